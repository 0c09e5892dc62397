"""Tests for rlsvr.envs.self_judge.countdown: the formal check table, generator, loaders."""
import json
from fractions import Fraction

import pytest

from rlsvr.envs.self_judge import countdown
from rlsvr.envs.self_judge.countdown import CountdownProblem, check

from .conftest import assert_payload_is_live, shared_path

NUMS, TARGET = (3, 5, 7, 2), 24  # 7 * 3 + 5 - 2 == 24


def A(expr: str) -> str:  # noqa: N802 - reads like the tag
  return f"<think>reasoning</think>\n<answer>{expr}</answer>"


# (response, nums, target, format_ok, correct, reason substring)
TABLE = [
    # Correct answers in many forms.
    (A("(7 * 3 + 5) - 2"), NUMS, TARGET, True, True, "ok"),
    (A("7*3+5-2"), NUMS, TARGET, True, True, "ok"),
    (A("5 - 2 + 7 * 3"), NUMS, TARGET, True, True, "ok"),
    (A("((7 * 3) + (5 - 2))"), NUMS, TARGET, True, True, "ok"),
    (A("  3*7 + 5 - 2  "), NUMS, TARGET, True, True, "ok"),
    (A("3\n*\n7\n+5\t-2"), NUMS, TARGET, True, True, "ok"),
    (A("(((3)))*7+5-2"), NUMS, TARGET, True, True, "ok"),
    (A("55 + 1 - 2"), (55, 1, 2), 54, True, True, "ok"),
    (A("44 + 19 + 35"), (44, 19, 35), 98, True, True, "ok"),
    (A("(2 + 2) / 8"), (2, 2, 8), Fraction(1, 2), True, True, "ok"),
    (A("8 / (3 - 8 / 3)"), (8, 3, 8, 3), 24, True, True, "ok"),  # exact fractions matter here
    (A("6 / (1 - 3 / 4)"), (6, 1, 3, 4), 24, True, True, "ok"),
    # Numbers reused, missing, or not given (value 24 all the same).
    (A("3 * (5 + 7) / 2 + 0 * 0 + 6"), NUMS, TARGET, True, False, "numbers used"),
    (A("(7 - 5) * 3 * 2 * 2"), NUMS, TARGET, True, False, "numbers used"),
    (A("(5 + 7) * 2 * 3 / 3"), NUMS, TARGET, True, False, "numbers used"),
    (A("(7 + 5) * 3 - 2 * 6"), NUMS, TARGET, True, False, "numbers used"),
    (A("7 * 3 + 7 - 2 - 2"), NUMS, TARGET, True, False, "numbers used"),
    (A("7 * 3 + 3"), NUMS, TARGET, True, False, "numbers used"),
    (A("7 * 3 + 5 - 2 + 0"), NUMS, TARGET, True, False, "numbers used"),
    (A("24"), NUMS, TARGET, True, False, "numbers used"),
    (A("7 * 3 + 5 - 2 + 10 - 10"), NUMS, TARGET, True, False, "numbers used"),
    (A("(7 - 5) * 12"), NUMS, TARGET, True, False, "numbers used"),
    # Wrong value with the right numbers.
    (A("7 * 3 + 5 + 2"), NUMS, TARGET, True, False, "value 28"),
    (A("7 * (3 + 5) - 2"), NUMS, TARGET, True, False, "value 54"),
    (A("7 / 2 * 3 + 5"), NUMS, TARGET, True, False, "value 31/2"),
    # Equations, powers and other operators.
    (A("7 * 3 + 5 - 2 = 24"), NUMS, TARGET, False, False, "'='"),
    (A("24 = 7 * 3 + 5 - 2"), NUMS, TARGET, False, False, "'='"),
    (A("3 ** 2 + 7 + 5 + 2"), NUMS, TARGET, False, False, "'**'"),
    (A("3 ^ 2 * 2 + 7 - 5"), NUMS, TARGET, False, False, "illegal character '^'"),
    (A("7 × 3 + 5 - 2"), NUMS, TARGET, False, False, "illegal character"),
    (A("7 % 3 + 5 - 2"), NUMS, TARGET, False, False, "illegal character '%'"),
    (A("[7 * 3] + 5 - 2"), NUMS, TARGET, False, False, "illegal character '['"),
    # Unary minus and decimals.
    (A("-2 + 7 * 3 + 5"), NUMS, TARGET, False, False, "unary"),
    (A("7 * 3 + 5 - (-2) - 4"), NUMS, TARGET, False, False, "unary"),
    (A("+7 * 3 + 5 - 2"), NUMS, TARGET, False, False, "unary"),
    (A("7 * 3 + 5 - 2.0"), NUMS, TARGET, False, False, "illegal character '.'"),
    (A("7 * 3.5 + 5 - 2"), NUMS, TARGET, False, False, "illegal character '.'"),
    # Huge intermediate values stay exact.
    (A("99 * 98 * 97 * 96 / (99 * 98 * 97 * 96)"), (99, 98, 97, 96, 99, 98, 97, 96), 1,
     True, True, "ok"),
    (A("123456789012345678901234567890 * 98765432109876543210 - 1"), (1, 2), 3, True, False,
     "numbers used"),
    (A("1" * 31 + " + 1"), (1,), 2, False, False, "longer than 30 digits"),
    # Division by zero.
    (A("7 / (5 - 5) + 3 + 2"), (7, 5, 5, 3, 2), 24, True, False, "division by zero"),
    (A("(3 - 3) / (2 - 2)"), (3, 3, 2, 2), 1, True, False, "division by zero"),
    # Malformed expressions.
    (A(""), NUMS, TARGET, False, False, "empty"),
    (A("   \n "), NUMS, TARGET, False, False, "empty"),
    (A("(7 * 3 + 5 - 2"), NUMS, TARGET, False, False, "unbalanced"),
    (A("7 * 3 + 5 - 2)"), NUMS, TARGET, False, False, "unexpected ')'"),
    (A("7 3 + 5 - 2"), NUMS, TARGET, False, False, "unexpected '3'"),
    (A("7 * * 3 + 5 - 2"), NUMS, TARGET, False, False, "unexpected '*'"),
    (A("7 * 3 + 5 -"), NUMS, TARGET, False, False, "ends early"),
    (A("(" * 60 + "7" + ")" * 60 + " * 3 + 5 - 2"), NUMS, TARGET, False, False, "nested deeper"),
    (A("7 * 3 + 5 - 2" + " " * 1000), NUMS, TARGET, False, False, "longer than"),
    # Tags: missing, text around them, several blocks (the last counts), case.
    ("7 * 3 + 5 - 2", NUMS, TARGET, False, False, "no <answer>"),
    ("<answer>7 * 3 + 5 - 2", NUMS, TARGET, False, False, "no <answer>"),
    ("<ANSWER>7 * 3 + 5 - 2</ANSWER>", NUMS, TARGET, False, False, "no <answer>"),
    ("So the answer is <answer>7*3+5-2</answer>. Done!", NUMS, TARGET, True, True, "ok"),
    ("<answer>1 + 1</answer> wait, no: <answer>7*3+5-2</answer>", NUMS, TARGET, True, True, "ok"),
    ("<answer>7*3+5-2</answer> hmm, rather <answer>7*3+5+2</answer>", NUMS, TARGET, True, False,
     "value 28"),
    ("<answer>7*3\n+5-2\n</answer>\n", NUMS, TARGET, True, True, "ok"),
    # Code-injection payloads are just illegal characters (see also the file test below).
    (A("__import__('os').system('echo hi')"), NUMS, TARGET, False, False, "illegal character '_'"),
    (A("7*3+5-2 if True else exit()"), NUMS, TARGET, False, False, "illegal character 'i'"),
    (A("eval('7*3+5-2')"), NUMS, TARGET, False, False, "illegal character 'e'"),
]


@pytest.mark.parametrize("response,nums,target,format_ok,correct,reason", TABLE)
def test_check_table(response, nums, target, format_ok, correct, reason):
  verdict = check(response, nums, target)
  assert (verdict.format_ok, verdict.correct) == (format_ok, correct), verdict
  assert reason in verdict.reason


def test_table_is_large_enough():
  assert len(TABLE) >= 40


def test_injection_payload_does_not_run(tmp_path):
  payloads = ["__import__('os').system('touch {marker}')",
              "open('{marker}', 'w').close() or 7*3+5-2"]
  for k, template in enumerate(payloads):
    marker = tmp_path / f"pwned{k}"
    assert_payload_is_live(template, tmp_path / f"control{k}")
    verdict = check(A(template.format(marker=marker)), NUMS, TARGET)
    assert not verdict.format_ok and not verdict.correct
    assert not marker.exists()


def test_parse_and_evaluate_are_exact():
  tree, literals = countdown.parse("8 / (3 - 8 / 3)")
  assert literals == [8, 3, 8, 3]
  assert countdown.evaluate(tree) == 24
  assert countdown.evaluate(countdown.parse("1 / 3 + 1 / 3 + 1 / 3")[0]) == 1
  with pytest.raises(ValueError):
    countdown.parse("1 + ")


def test_generate_is_seeded_and_solvable():
  problems = countdown.generate(50, seed=3)
  assert problems == countdown.generate(50, seed=3)
  assert problems != countdown.generate(50, seed=4)
  for p in problems:
    assert len(p.nums) in (3, 4) and all(1 <= n <= 99 for n in p.nums)
    assert 1 <= p.target <= 100
    verdict = check(A(p.solution), p.nums, p.target)
    assert verdict.correct, (p, verdict)
  assert {len(p.nums) for p in problems} == {3, 4}


def test_prompt_states_numbers_target_and_format():
  text = countdown.prompt(CountdownProblem((44, 19, 35), 98))
  assert "[44, 19, 35]" in text and "98" in text and "<answer>" in text


def test_load_jsonl(tmp_path):
  path = tmp_path / "c.jsonl"
  path.write_text('{"target": 98, "nums": [44, 19, 35]}\n\n{"target": 5, "nums": [1, 4, 9]}\n')
  assert countdown.load_jsonl(str(path)) == [CountdownProblem((44, 19, 35), 98),
                                             CountdownProblem((1, 4, 9), 5)]


def test_load_hub_reads_a_dataset_by_name(tmp_path):
  # `datasets` resolves a directory name offline, through the same code path as a hub name.
  rows = [{"target": 98, "nums": [44, 19, 35]}, {"target": 64, "nums": [63, 95, 96]}]
  (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  problems = countdown.load_hub(str(tmp_path), split="train", limit=1)
  assert problems == [CountdownProblem((44, 19, 35), 98)]


def test_shared_tinyzero_files():
  path = shared_path("countdown", "countdown_tinyzero_test.jsonl")
  problems = countdown.load_jsonl(str(path))
  assert len(problems) == 2001
  assert problems[0] == CountdownProblem((96, 7, 37, 74), 55)
  assert all(len(p.nums) in (3, 4) for p in problems)
