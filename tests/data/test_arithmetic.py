"""The generated word problems (`bundled:arithmetic`): seeded, right, scored by math-verify,
and what `configs/rlvr_math.py:cpu` / `:smoke` read without any shared data folder."""
import random
import re

import pytest

from rlsvr.data import arithmetic, sources

# Each template's answer from its numbers, written here again rather than imported, so a
# slip in the generator's arithmetic shows up as a mismatch.
EXPECTED = {
    "give_away": lambda v: v["a"] * v["b"] - v["c"],
    "change": lambda v: v["c"] - v["a"] * v["b"],
    "share": lambda v: v["a"] * v["b"] // v["c"],
    "wages": lambda v: v["a"] * v["b"] * v["c"],
    "ages": lambda v: (v["a"] + v["b"]) * v["c"],
    "pages": lambda v: v["a"] - v["b"] * v["c"],
    "distance": lambda v: v["a"] * v["b"] + v["c"] * v["d"],
    "half_then_more": lambda v: v["a"] // 2 + v["b"],
}


def test_the_same_seed_draws_the_same_problems_and_another_seed_others():
  assert arithmetic.problems(50, seed=3) == arithmetic.problems(50, seed=3)
  assert arithmetic.problems(50, seed=3) != arithmetic.problems(50, seed=4)
  assert arithmetic.rows(20) == arithmetic.rows(20, arithmetic.DEFAULT_SEED)
  # A longer draw starts with the shorter one: `data.limit` only cuts the stream.
  assert arithmetic.rows(10) == arithmetic.rows(30)[:10]
  assert len(arithmetic.rows()) == arithmetic.DEFAULT_COUNT


def test_answers_follow_from_the_numbers_in_the_text():
  drawn = arithmetic.problems(2000, seed=0)
  assert {p.kind for p in drawn} == set(EXPECTED)  # every template comes up
  for p in drawn:
    expected = EXPECTED[p.kind](p.values)
    assert p.answer == expected and expected > 0, p
    # The text states every number the answer is computed from.
    stated = [int(n) for n in re.findall(r"\d+", p.question)]
    assert all(v in stated for v in p.values.values()), p
  assert all(p.values["b"] % p.values["c"] == 0 for p in drawn if p.kind == "share")
  assert len({p.question for p in drawn}) > 0.95 * len(drawn)  # hardly any repeats


def test_rows_carry_the_columns_the_math_rewards_read():
  row = arithmetic.rows(1, seed=5)[0]
  p = arithmetic.problems(1, seed=5)[0]
  assert row == {"question": p.question, "answer": str(p.answer), "id": "arithmetic-5-0"}


def test_math_verify_accuracy_scores_the_gold_answer_1_and_a_wrong_one_0():
  from rlsvr.rewards.math import accuracy

  rng = random.Random(1)
  one_per_kind = {}
  for p in arithmetic.stream(seed=1):
    one_per_kind.setdefault(p.kind, p)
    if len(one_per_kind) == len(EXPECTED):
      break
  picked = [*one_per_kind.values(), *(arithmetic.problem(rng) for _ in range(4))]
  golds = [str(p.answer) for p in picked]
  right = [f"So the answer is $\\boxed{{{p.answer}}}$." for p in picked]
  wrong = [f"So the answer is $\\boxed{{{p.answer + 1}}}$." for p in picked]
  assert accuracy(right + wrong, answer=golds + golds) == [1.0] * len(picked) + [0.0] * len(
      picked)


@pytest.fixture
def no_shared_data(monkeypatch, tmp_path):
  """A fresh clone: $RLSVR_DATA is an empty folder, and the `../shared/data` fallback
  points into an empty temp folder too, so neither can supply a file."""
  empty = tmp_path / "empty_data"
  empty.mkdir()
  monkeypatch.setenv(sources.ENV_VAR, str(empty))
  monkeypatch.setattr(sources, "_REPO_ROOT", tmp_path / "clone")
  return empty


@pytest.mark.parametrize("variant", ["cpu", "smoke"])
def test_rlvr_math_cpu_and_smoke_need_no_shared_data(no_shared_data, variant):
  from configs.rlvr_math import get_config
  from rlsvr import train
  from rlsvr.envs.reward_fn import data

  c = get_config(variant)
  assert c.data.source == "bundled:arithmetic"
  train.check_config(c)
  rows = data.load_rows(c)
  assert len(rows) == (c.data.limit or arithmetic.DEFAULT_COUNT)
  assert rows[0] == arithmetic.rows(1)[0]
  assert list(no_shared_data.iterdir()) == []
  # GSM8K stays one override away, and without the shared folder it says where to put it.
  c.data.source = "gsm8k"
  train.check_config(c)
  with pytest.raises(sources.DataError, match=sources.ENV_VAR):
    data.load_rows(c)


@pytest.mark.parametrize("source, says", [
    ("bundled:algebra", "no bundled set 'algebra'"), ("bundled:arithmetic:x", "integer"),
])
def test_bad_bundled_sources_are_refused_by_name(source, says):
  from rlsvr.envs.reward_fn import data

  with pytest.raises(ValueError, match=says):
    data.check_source(source)


def test_a_seed_after_the_name_draws_another_set():
  from configs.rlvr_math import get_config
  from rlsvr.envs.reward_fn import data

  c = get_config("smoke")
  c.data.source = "bundled:arithmetic:7"
  assert data.load_rows(c) == arithmetic.rows(16, seed=7)
