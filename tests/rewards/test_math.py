"""rlsvr.rewards.math: accuracy by math-verify in bounded workers, and the box format."""
import time

import pytest

from rlsvr.data.math_datasets import MAX_ANSWER_CHARS
from rlsvr.workers import Outcome
from rlsvr.eval import math_suites
from rlsvr.rewards import math as math_rewards
from rlsvr.rewards.math import accuracy, format as format_reward, gold_answer


def _metrics():
  logged = {}
  return logged, lambda name, value: logged.__setitem__(name, value)


@pytest.mark.parametrize("gold, expected", [
    ("Janet sells 9 eggs.\n#### 1,000", "1000"),  # GSM8K hub answers
    ("so it is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),  # MATH solutions
    (27.0, "27"), (42, "42"), ("  3/4 ", "3/4"), ("", None), (None, None),
])
def test_gold_answer_reads_the_common_dataset_forms(gold, expected):
  assert gold_answer(gold) == expected


def test_accuracy_hand_cases():
  completions = [
      "16 - 3 - 4 = 9, 9 * 2 = 18. \\boxed{18}",  # correct
      "\\boxed{17}",  # wrong
      "first \\boxed{18} then \\boxed{19}",  # the last box is the answer: wrong
      "\\boxed{}",  # malformed: empty box
      "I cannot solve this.",  # no answer at all
      "so \\boxed{\\frac{36}{2}}",  # equivalent by math-verify
  ]
  logged, log_metric = _metrics()
  rewards = accuracy(completions, answer=["#### 18"] * len(completions), log_metric=log_metric)
  assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
  assert logged == {"rewards/timeouts": 0.0}


def test_accuracy_reads_trl_conversational_completions_and_the_solution_column():
  completions = [[{"role": "assistant", "content": "It is \\boxed{\\frac{1}{3}}"}],
                 [{"role": "assistant", "content": "It is \\boxed{\\frac{1}{2}}"}]]
  assert accuracy(completions, solution=["$\\boxed{\\frac{1}{3}}$"] * 2) == [1.0, 0.0]


def test_accuracy_gives_no_reward_without_a_gold_answer():
  assert accuracy(["\\boxed{1}", "\\boxed{1}"], answer=["1", ""]) == [1.0, None]
  with pytest.raises(ValueError, match="'answer' or 'solution'"):
    accuracy(["\\boxed{1}"], question=["q"])


def test_hostile_answers_score_zero_within_bounded_time():
  hostile = ["\\boxed{10^{10^{10^{10}}}}", "\\boxed{9^{9^{9}}}", "\\boxed{99999!}",
             "x" * 1_000_000 + "\\boxed{2}", "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
             "\\boxed{" + "+".join(["x"] * 400) + "}"]
  start = time.monotonic()
  assert accuracy(hostile, answer=["3"] * len(hostile)) == [0.0] * len(hostile)
  assert time.monotonic() - start < 60  # sizes bound the work; the worker limit is 10 s each


class _TimeoutPool:
  """Every comparison sent to a worker runs out of time; records what it was sent."""

  def __init__(self):
    self.sent, self.timeouts = [], []

  def map(self, fn, arg_tuples, timeout):
    self.sent += list(arg_tuples)
    self.timeouts.append(timeout)
    return [Outcome("timeout", error="no result") for _ in arg_tuples]


def test_timed_out_comparisons_score_zero_and_are_counted(monkeypatch):
  pool = _TimeoutPool()
  monkeypatch.setattr(math_suites, "scoring_pool", lambda: pool)
  logged, log_metric = _metrics()
  # "18" matches the gold as written (no worker needed); the other two need math-verify.
  rewards = accuracy(["\\boxed{18}", "\\boxed{36/2}", "\\boxed{2^{100}}"], answer=["18"] * 3,
                     log_metric=log_metric)
  assert rewards == [1.0, 0.0, 0.0]
  assert len(pool.sent) == 2 and logged == {"rewards/timeouts": 2.0}
  assert pool.timeouts == [math_rewards.ANSWER_TIMEOUT_S]


@pytest.mark.parametrize("text, ok", [
    ("so \\boxed{18}.", True), ("\\fbox{x+1}", True), ("\\boxed{\\frac{1}{2}}", True),
    ("\\boxed{}", False), ("\\boxed{  }", False), ("\\boxed{18", False), ("18", False),
    ("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}", False),
])
def test_format_wants_a_complete_non_empty_box(text, ok):
  assert format_reward([text]) == [float(ok)]
  assert format_reward([[{"role": "assistant", "content": text}]]) == [float(ok)]
