"""The reward_fn environment: a step with a fake sampler, the registered spec, the plan."""
import json

import pytest

from configs.rlvr_math import get_config
from rlsvr import plan_costs
from rlsvr.envs import registry
from rlsvr.envs.base import Completion
from rlsvr.envs.reward_fn.config import RewardFnConfig
from rlsvr.envs.reward_fn.env import RewardFnEnv
from rlsvr.rewards.calling import RewardFunctionError
from tests.rewards import funcs
from rlsvr.rl import batch as batch_lib
from rlsvr.rl.config import GRPOConfig
from tests.envs.spy.fakes import EOS, USER, ByteTokenizer

ROWS = [{"q": "What is 9 + 9?", "answer": "18", "id": "a"},
        {"q": "What is 2 + 3?", "answer": "5", "id": "b"}]


class FakePolicy:
  """Answers the k-th copy of each prompt with `replies[k]`; records every call."""

  def __init__(self, tokenizer, replies):
    self.tokenizer, self.replies, self.calls = tokenizer, replies, []

  def __call__(self, prompts, **sampling):
    self.calls.append((list(prompts), sampling))
    out = []
    for k, _ in enumerate(prompts):
      ids = tuple(self.tokenizer.encode(self.replies[k % len(self.replies)])) + (EOS,)
      out.append(Completion(ids, tuple(-0.25 for _ in ids), "eos"))
    return out


def _config(**reward_fn):
  c = get_config("smoke")
  c.reward_fn.update(dict(dict(prompt_field="q", group_size=3, prompts_per_step=2), **reward_fn))
  return c


def _play(replies, step=3, rows=ROWS, **reward_fn):
  c = _config(**reward_fn)
  tokenizer = ByteTokenizer()
  env = RewardFnEnv(RewardFnConfig.from_config(c), tokenizer, max_steps=c.steps)
  policy = FakePolicy(tokenizer, replies)
  return env.play_episodes(rows, policy, None, step), policy, c


def test_a_step_makes_one_group_per_prompt_with_weighted_math_rewards():
  batch, policy, c = _play(["\\boxed{18}", "\\boxed{5}", "no box"])
  (prompts, sampling), = policy.calls
  assert len(prompts) == 6 and prompts[0] == prompts[2] != prompts[3]
  assert sampling == dict(max_new_tokens=c.reward_fn.max_new_tokens, temperature=1.0, top_p=1.0,
                          top_k=0)
  rows = batch.trajectories
  assert [t.group_id for t in rows] == [0, 0, 0, 1, 1, 1]
  assert {t.role for t in rows} == {"policy"} and all(t.trained for t in rows)
  assert all(t.finish_reason == "eos" and t.logprobs == [-0.25] * len(t.completion_ids)
             for t in rows)
  assert rows[0].completion_ids[-1] == EOS and rows[0].prompt_ids == prompts[0]
  # reward = accuracy + 0.1 format (configs/rlvr_math.py)
  assert [t.reward for t in rows] == pytest.approx([1.1, 0.1, 0.0, 0.1, 1.1, 0.0])
  m = batch.metrics
  assert m["rewards/accuracy/mean"] == pytest.approx(2 / 6)
  assert m["rewards/format/mean"] == pytest.approx(4 / 6)
  assert m["rewards/timeouts"] == 0.0 and m["rewards/unscorable"] == 0.0


def test_records_hold_prompt_completions_rewards_and_gold():
  batch, _, _ = _play(["\\boxed{18}", "\\boxed{5}", "no box"])
  assert len(batch.records) == 2
  rec = json.loads(json.dumps(batch.records[1]))  # JSON as the rollout writer stores it
  assert rec["step"] == 3 and rec["prompt_index"] == 1
  assert rec["prompt"].startswith("What is 2 + 3?\n\nPlease reason")
  assert rec["columns"] == {"answer": "5", "id": "b"}
  assert [a["text"] for a in rec["completions"]] == ["\\boxed{18}", "\\boxed{5}", "no box"]
  assert rec["completions"][1]["rewards"] == {"accuracy": 1.0, "format": 1.0}
  text = batch.record_text
  assert "What is 9 + 9?" in text and "answer: 18" in text
  assert "completion 1: reward=1.100 (accuracy=1 format=1)" in text and "no box" in text


@pytest.mark.parametrize("chat", [True, False])
def test_string_prompts_give_string_completions_as_in_trl(chat):
  # TRL: a string prompt gives string completions; the chat template (when on) is only how
  # the policy reads the prompt. The call is in this process (no time limit) to record it.
  funcs.CALLS.clear()
  _, policy, _ = _play(["hello"], reward_funcs="tests.rewards.funcs:trl_style",
                       reward_weights="", use_chat_template=chat, step=5, reward_timeout_s=0)
  (call,) = funcs.CALLS
  assert call["prompts"][0].startswith("What is 9 + 9?")
  assert call["completions"][0] == "hello"
  assert (policy.calls[0][0][0][0] == USER) == chat
  assert call["answer"] == ["18"] * 3 + ["5"] * 3 and call["id"] == ["a"] * 3 + ["b"] * 3
  assert "q" in call  # the prompt column is a column too (TRL drops only "prompt")
  assert call["completion_ids"][0] == [*b"hello", EOS]
  assert call["trainer_state"].global_step == 4


def test_message_prompts_give_message_completions_as_in_trl():
  funcs.CALLS.clear()
  rows = [dict(row, q=[{"role": "user", "content": row["q"]}]) for row in ROWS]
  _play(["hello"], rows=rows, reward_funcs="tests.rewards.funcs:trl_style", reward_weights="",
        reward_timeout_s=0)
  (call,) = funcs.CALLS
  assert call["prompts"][0][-1]["role"] == "user"
  assert call["completions"][0] == [{"role": "assistant", "content": "hello"}]


def test_the_prefill_starts_every_completion_text_but_not_its_ids():
  batch, policy, _ = _play(["18}"], answer_prefill="\\boxed{")
  assert policy.calls[0][0][0][-len("\\boxed{"):] == list(b"\\boxed{")
  assert batch.records[0]["completions"][0]["text"] == "\\boxed{18}"
  assert batch.trajectories[0].completion_ids == [*b"18}", EOS]
  assert batch.trajectories[0].reward == pytest.approx(1.1)


@pytest.mark.parametrize("mode", ["zero_advantage", "drop"])
def test_unscorable_rows_move_no_baseline_and_train_with_advantage_zero_or_not(mode):
  batch, _, _ = _play(["x", "xx", "xxx"], reward_funcs="tests.rewards.funcs:length_or_none_odd",
                      reward_weights="", unscorable=mode)
  rows = batch.trajectories
  odd = [k % 2 == 1 for k in range(6)]
  assert [t.trained for t in rows] == [not o or mode == "zero_advantage" for o in odd]
  # Each alone in a group (TRL: NaN, out of the group's mean and std), so its advantage is 0
  # and prompt 0's scorable rows (rewards 1 and 3) are centred on their own mean, 2.
  assert [t.group_id for t in rows] == [0, 3, 0, 5, 1, 7]
  advantages = batch_lib.advantages_of(rows, GRPOConfig())
  assert [a for a, o in zip(advantages, odd) if o] == [0.0, 0.0, 0.0]
  assert advantages[0] == pytest.approx(-advantages[2]) and advantages[0] < 0
  assert batch.metrics["rewards/unscorable"] == 3.0


def test_a_step_with_nothing_scorable_fails_clearly():
  with pytest.raises(RewardFunctionError, match="step 3: every reward function returned None"):
    _play(["x"], reward_funcs="tests.rewards.funcs:always_none", reward_weights="")


def test_check_names_a_reward_function_that_does_not_import():
  spec = registry.get("reward_fn")
  spec.check(get_config("smoke"))
  c = _config(reward_funcs="rlsvr.rewards.math:accuracy,no_such_pkg.rewards:score")
  with pytest.raises(ValueError, match="no_such_pkg.rewards:score"):
    spec.check(c)
  with pytest.raises(ValueError, match=r"reward_weights has 1 weights for 2"):
    spec.check(_config(reward_weights="1.0"))
  with pytest.raises(ValueError, match="group_size=0 must be >= 1"):
    spec.check(_config(group_size=0))
  with pytest.raises(ValueError, match="unscorable='skip': use one of"):
    spec.check(_config(unscorable="skip"))


def test_experiment_streams_rows_and_resumes_where_it_was(tmp_path):
  path = tmp_path / "rows.jsonl"
  path.write_text("".join(json.dumps(dict(r, id=f"{r['id']}{k}")) + "\n"
                          for k in range(3) for r in ROWS))
  c = _config(group_size=2)
  c.data.source = str(path)
  ctx = registry.BuildContext(c, ByteTokenizer(), None, None, None)
  spec = registry.get("reward_fn")
  exp = spec.build(ctx)
  policy = FakePolicy(ctx.tokenizer, ["\\boxed{18}"])
  first = exp.play_round(1, policy, None)
  state = exp.state_dict()
  second = exp.play_round(2, policy, None)
  resumed = spec.build(ctx)
  resumed.load_state_dict(json.loads(json.dumps(state)), 1)
  again = resumed.play_round(2, policy, None)
  assert [r["columns"]["id"] for r in again.records] == [r["columns"]["id"] for r in
                                                         second.records]
  assert len(first.trajectories) == 4 and exp.model_state(2) == {}


def test_plan_is_one_policy_call_and_one_train_phase():
  c = get_config("")
  plan = registry.get("reward_fn").plan(c, plan_costs.Estimates(template_tokens=100))
  (call,), (phase,) = plan.calls, plan.phases
  assert (call.name, call.rows, call.new_tokens, call.rows_per_prompt) == ("policy", 512, 1024, 8)
  assert call.prompt_tokens > 100
  assert (phase.rows, phase.calls, phase.completion_tokens) == (512, ("policy",), 1024)
