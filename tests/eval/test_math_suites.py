"""Math suites: extraction, equivalence (in workers), loaders of every layout, end to end."""
import json

import pytest

from rlsvr.data import math_datasets
from rlsvr.data.sources import DataError
from rlsvr.eval import math_suites as ms
from rlsvr.eval import runner

from .conftest import shared_path, smoke, write_jsonl


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{42}.", "42"),
    ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last box counts
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),  # nested braces
    ("\\fbox{7}", "7"),
    ("\\boxed{12", None),  # unbalanced
    ("no box here", None),
    ("\\boxed{" + "1" * (math_datasets.MAX_ANSWER_CHARS + 5) + "}", None),  # absurdly long: ignored
])
def test_last_boxed(text, expected):
  assert math_datasets.last_boxed(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("\\boxed{B}", "B"), ("\\boxed{(C)}", "C"), ("\\boxed{\\text{D}}", "D"),
    ("\\boxed{A. 42 apples}", "A"), ("The answer is (E).", "E"),
    ("\\boxed{J}", None),  # out of range for 4 choices
    ("\\boxed{Apple}", None),
])
def test_extract_choice(text, expected):
  assert ms.extract_choice(text, 5 if expected == "E" else 4) == expected


@pytest.mark.parametrize("gold, response, correct", [
    ("\\frac{1}{2}", "\\boxed{0.5}", True),
    ("\\frac{1}{2}", "\\boxed{\\dfrac12}", True),
    ("\\frac{1}{2}", "\\boxed{2/4}", True),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}", False),
    ("10", "The width is \\boxed{10\\text{ cm}}", True),  # units
    ("18", "\\boxed{\\$18}", True),
    ("1000", "\\boxed{1,000}", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3,\\frac{\\pi}{2})}", True),
    ("3", "\\boxed{3} wait, no: \\boxed{4}", False),  # multiple boxes: the last one
    ("27", "so the answer is 27", True),  # unboxed: math-verify reads the tail
])
def test_score_equivalence(pool, gold, response, correct):
  item = math_datasets.MathItem("q", "question", gold)
  assert ms.score([item], [[response]], pool=pool)[0]["correct"] == [correct]


def test_score_multiple_choice_and_pass_at_1(pool):
  item = math_datasets.MathItem("q", "question", "B", ("x", "y", "z"))
  record = ms.score([item], [["\\boxed{B}", "\\boxed{A}", "nothing", "answer is (B)"]],
                    pool=pool)[0]
  assert record["correct"] == [True, False, False, True]
  assert record["score"] == 0.5
  assert ms.aggregate([record, {**record, "score": 1.0}])["accuracy"] == 75.0


def test_scoring_timeouts_and_errors_count_as_wrong():
  from rlsvr.workers import Outcome

  class StuckPool:  # what a WorkerPool returns when it killed a comparison past its limit
    def map(self, fn, arg_tuples, timeout):
      assert fn is ms.equivalent and timeout == 3.0
      return [Outcome("timeout", error="no result"), Outcome("error", error="boom")]

  item = math_datasets.MathItem("q", "question", "\\frac{1}{2}")
  record = ms.score([item], [["\\boxed{0.5}", "\\boxed{1/2}"]], pool=StuckPool(), timeout=3.0)[0]
  assert record["correct"] == [False, False]
  assert record["timed_out"] == [True, False]
  assert ms.aggregate([record])["scoring_timeouts"] == 1.0


@pytest.mark.parametrize("prediction", [
    "\\boxed{10^{123456}}", "\\boxed{2^{3^{4^{5}}}}", "\\boxed{9999!}", "\\boxed{3**12345}",
    "\\boxed{" + "+".join(f"x_{{{i}}}" for i in range(300)) + "}"])
def test_math_verify_work_is_bounded_by_size_not_time(prediction):
  # Rejected before SymPy computes anything, so the verdict is the same under any load.
  assert ms.equivalent("1", prediction) is False


def test_math_verify_within_the_bounds():
  assert ms.equivalent("1024", "\\boxed{2^{10}}") and ms.equivalent("\\frac{1}{2}", "\\boxed{0.5}")


def test_prompts_ask_for_a_box():
  assert "\\boxed{}" in ms.prompt(math_datasets.MathItem("q", "What is 1+1?", "2"))
  mc = ms.prompt(math_datasets.MathItem("q", "Pick", "A", ("yes", "no")))
  assert "A. yes\nB. no" in mc and "\\boxed{A}" in mc


def test_gpqa_from_a_local_csv(tmp_path):
  path = tmp_path / "gpqa.csv"
  path.write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,"
                  "Incorrect Answer 3\nWhich?,right,w1,w2,w3\n", encoding="utf-8")
  item, = math_datasets.load("gpqa_diamond", str(path), seed=3)
  assert item.choices[ord(item.answer) - ord("A")] == "right"
  assert math_datasets.load("gpqa_diamond", str(path), seed=3) == [item]  # seeded order
  with pytest.raises(DataError, match="data.gpqa_diamond"):
    math_datasets.load("gpqa_diamond")  # not shipped


@pytest.mark.parametrize("name, relative, first_answer", [
    ("gsm8k", "gsm8k/test.jsonl", "18"),
    ("math500", "math500/test.jsonl", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("aime24", "aime24/test.jsonl", "204"),
    ("aime25", "aime25/test.jsonl", "70"),
    ("amc23", "amc23/test.jsonl", "27"),
    ("minerva_math", "minerva_math/test.jsonl", "1.6"),
    ("mmlu_pro", "mmlu_pro/mmlu_pro_test_full.jsonl", None),
])
def test_shared_data_loaders(name, relative, first_answer):
  shared_path(relative)
  items = math_datasets.load(name, limit=3)
  assert len(items) == 3 and all(i.question for i in items)
  if first_answer is not None:
    assert items[0].answer == first_answer
  else:
    assert len(items[0].choices) > 4 and items[0].answer in "ABCDEFGHIJ"


def test_math_suite_end_to_end(tmp_path):
  gsm = write_jsonl(tmp_path / "gsm.jsonl", [
      {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"},
      {"question": "What is 10-4?", "answer": "#### 6"}])
  mmlu = write_jsonl(tmp_path / "mmlu.jsonl", [
      {"question_id": 7, "question": "Pick one", "options": ["a", "b", "c"], "answer": "B"}])
  c = smoke("eval_math", tmp_path / "out", gsm8k=gsm, mmlu_pro=mmlu)
  results = runner.run(c, c.workdir)
  assert set(results["datasets"]) == {"gsm8k", "mmlu_pro"}
  assert results["datasets"]["gsm8k"]["metrics"]["n"] == 2
  records = [json.loads(l) for l in open(results["datasets"]["gsm8k"]["records"])]
  assert [r["answer"] for r in records] == ["5", "6"]
  assert all(len(r["responses"]) == 1 for r in records)
  assert (tmp_path / "out" / "results.md").read_text().count("| gsm8k |") >= 1
