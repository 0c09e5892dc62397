"""TRL's own reward functions, unchanged, through the environment (worker and all).

`trl.rewards` and the examples of TRL's GRPO docs (tests/rewards/trl_examples.py)
get what TRL 1.16's `GRPOTrainer` would give them: string completions for string
prompts (though the policy reads them through the chat template), messages for
chat prompts; their results, None and async included, are taken as TRL takes them.
"""
import numpy as np
import pytest

from tests.envs.reward_fn.test_env import _play

EX = "tests.rewards.trl_examples"
STANDARD = [{"q": "What is 2+2?", "ground_truth": "4", "task": "math"},
            {"q": "Write a function.", "ground_truth": "x", "task": "code"}]
# The k-th completion of the step (3 per prompt): ids are the bytes plus EOS.
REPLIES = ["\\boxed{4}", "4 four", ""]


def _per_function(batch):
  """{function name: [reward of each completion, None where it gave none]}."""
  answers = [a for record in batch.records for a in record["completions"]]
  return {name: [a["rewards"][name] for a in answers] for name in answers[0]["rewards"]}


def test_trl_doc_examples_get_string_completions_for_string_prompts():
  funcs = ["token_length", "char_length", "boxed_equals_ground_truth", "math_reward_func",
           "async_reward_func", "logging_reward_func", "soft_overlong"]
  batch, policy, _ = _play(REPLIES, rows=STANDARD, reward_weights="",
                           reward_funcs=",".join(f"{EX}:{f}" for f in funcs))
  assert policy.calls[0][0][0][0] == 256  # the policy read a chat (USER marker first)
  got = _per_function(batch)
  assert got["token_length"] == [10.0, 7.0, 1.0] * 2
  assert got["char_length"] == [9.0, 6.0, 0.0] * 2
  assert got["boxed_equals_ground_truth"] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  assert got["math_reward_func"] == [1.0, 1.0, -1.0, None, None, None]
  assert got["async_reward_func"] == [1.0, 1.0, 0.0] * 2
  assert got["logging_reward_func"] == got["boxed_equals_ground_truth"]
  assert got["soft_overlong_punishment_reward"] == [-1.0, -0.75, 0.0] * 2
  extra = batch.records[0]["completions"][0]["extra"]
  assert extra == {"golden_answer": "4", "extracted_answer": "4"}
  assert batch.metrics["accuracy"] == pytest.approx(1 / 6)
  totals = [t.reward for t in batch.trajectories]
  np.testing.assert_allclose(totals, [sum(v for v in col if v is not None)
                                      for col in zip(*got.values())])


def test_trl_rewards_get_messages_for_chat_prompts():
  rows = [{"q": [{"role": "user", "content": "2+2?"}], "solution": "4"},
          {"q": [{"role": "user", "content": "2+3?"}], "solution": "$5$"}]
  replies = ["<think>a</think><answer>\\boxed{4}</answer>", "<think>b</think> \\boxed{5}",
             "no think \\boxed{4}"]
  batch, _, _ = _play(replies, rows=rows, reward_weights="", reward_funcs=(
      f"trl.rewards:think_format_reward,trl.rewards:accuracy_reward,{EX}:format_reward_func"))
  got = _per_function(batch)
  assert got["think_format_reward"] == [1.0, 1.0, 0.0] * 2
  assert got["accuracy_reward"] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
  assert got["format_reward_func"] == [1.0, 0.0, 0.0] * 2
  assert batch.records[1]["completions"][1]["extra"]["solution"] == "$5$"


def test_an_unparseable_gold_leaves_rows_unscorable_with_advantage_zero():
  rows = [{"q": [{"role": "user", "content": "2+2?"}], "solution": "4"},
          {"q": [{"role": "user", "content": "?"}], "solution": "no answer here"}]
  batch, _, _ = _play(["\\boxed{4}", "\\boxed{5}", "x"], rows=rows, reward_weights="",
                      reward_funcs="trl.rewards:accuracy_reward")
  assert batch.metrics["rewards/unscorable"] == 3.0
  assert [t.trained for t in batch.trajectories] == [True] * 6  # TRL: advantage 0, trained
  assert len({t.group_id for t in batch.trajectories[3:]}) == 3  # each alone: no baseline
