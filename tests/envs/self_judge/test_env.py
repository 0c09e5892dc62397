"""Tests for rlsvr.envs.self_judge.env with a scripted policy and a scripted judge."""
import re

import numpy as np
import pytest

from rlsvr.envs.base import Completion
from rlsvr.envs.self_judge import countdown, integration
from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.env import SelfJudgeEnv
from rlsvr.envs.self_judge.judge import INITIAL, POLICY
from tests.envs.spy.fakes import EOS, ByteTokenizer

PROBLEMS = [countdown.CountdownProblem((3, 5, 7, 2), 24), {"nums": [44, 19, 35], "target": 98}]
# Per problem, the G=4 answers: correct, wrong value, no tags, an equation.
ANSWERS = {
    "[3, 5, 7, 2]": ["<think>ok</think><answer>7*3+5-2</answer>", "<answer>7*3+5+2</answer>",
                     "I give up", "<answer>7*3+5-2 = 24</answer>"],
    "[44, 19, 35]": ["<answer>44 + 19 + 35</answer>", "<answer>44 + 19 - 35</answer>",
                     "no idea", "<answer>44+19+35=98</answer>"],
}
# The judge accepts the first two answers, rejects the equation and cannot be parsed on the rest.
JUDGE = {"7*3+5-2": "\\boxed{1}", "7*3+5+2": "\\boxed{1}", "44 + 19 + 35": "\\boxed{1}",
         "44 + 19 - 35": "\\boxed{1}", "7*3+5-2 = 24": "\\boxed{0}", "44+19+35=98": "\\boxed{0}"}


class ShiftTokenizer(ByteTokenizer):
  """Another model's tokenizer: bytes shifted by 1000, so mixing the two would show."""

  def encode(self, text):
    return [b + 1000 for b in text.encode("utf-8")]

  def decode(self, ids, skip_special_tokens=False):
    return bytes(i - 1000 for i in ids if 1000 <= i < 1256).decode("utf-8", errors="replace")


class Scripted:
  """A SampleFn answering `respond(prompt_text, index_in_call)`; records its calls."""

  def __init__(self, tokenizer, respond):
    self.tokenizer, self.respond, self.calls = tokenizer, respond, []

  def __call__(self, prompts, **sampling):
    texts = [self.tokenizer.decode(p) for p in prompts]
    self.calls.append((texts, sampling))
    out = []
    for k, text in enumerate(texts):
      ids = tuple(self.tokenizer.encode(self.respond(text, k))) + (EOS,)
      out.append(Completion(ids, tuple(-0.1 for _ in ids), "eos" if k % 4 else "length"))
    return out


def _countdown_policy(text, k):
  nums = re.search(r"Using the numbers (\[[^\]]*\])", text).group(1)
  return ANSWERS[nums][k % 4]


def _judge(text, k):
  del k
  candidate = text.split("Candidate answer:\n")[1].split("\n\n")[0]
  return "Let me check. " + JUDGE.get(candidate, "it is fine")


def test_countdown_rewards_metrics_and_records():
  tokenizer, judge_tokenizer = ByteTokenizer(), ShiftTokenizer(as_mapping=True)
  config = SelfJudgeConfig(group_size=4, judge_template="countdown_4",
                           sampling={"temperature": 0.9}, judge_sampling={"temperature": 0.0},
                           policy_max_new_tokens=64, judge_max_new_tokens=32)
  policy, judge = Scripted(tokenizer, _countdown_policy), Scripted(judge_tokenizer, _judge)
  env = SelfJudgeEnv(config, tokenizer, judge_sample=judge, judge_tokenizer=judge_tokenizer)
  batch = env.play_episodes(PROBLEMS, policy, np.random.default_rng(0), step=7)

  # One policy call with G copies per problem, one judge call for every answer.
  assert [len(t) for t, _ in policy.calls] == [8] and [len(t) for t, _ in judge.calls] == [8]
  assert policy.calls[0][1] == {"max_new_tokens": 64, "temperature": 0.9}
  assert judge.calls[0][1] == {"max_new_tokens": 32, "temperature": 0.0}
  assert "ALL of the following" in judge.calls[0][0][0]  # template 4
  assert "Candidate answer:\nI give up\n" in judge.calls[0][0][2]  # no block: the whole response
  rows = batch.trajectories
  assert [r.group_id for r in rows] == [0] * 4 + [1] * 4
  assert {r.role for r in rows} == {"policy"} and all(r.trained for r in rows)
  assert [r.reward for r in rows] == pytest.approx([1.1, 1.1, 0.0, 0.0] * 2)
  assert rows[0].prompt_ids == env.encode(countdown.prompt(PROBLEMS[0]))
  assert env.encode("hi", judge=True)[1:3] == [1000 + ord("h"), 1000 + ord("i")]
  assert rows[0].completion_ids[-1] == EOS and len(rows[0].logprobs) == len(rows[0].completion_ids)
  assert [r.finish_reason for r in rows[:4]] == ["length", "eos", "eos", "eos"]

  m = batch.metrics
  assert m["self_judge/true_reward"] == 0.25
  assert m["self_judge/format_rate"] == 0.5
  assert m["self_judge/reward"] == pytest.approx(0.55)
  assert m["self_judge/judge_positive_rate"] == 0.5
  # Over the 6 verdicts given: both correct answers accepted, 2 of the 4 parsed wrong ones
  # rejected; the 2 unparsed verdicts (wrong answers) count for neither side.
  assert m["self_judge/judge_tpr"] == 1.0
  assert m["self_judge/judge_tnr"] == pytest.approx(2 / 4)
  assert m["self_judge/judge_fpr"] == pytest.approx(2 / 4)
  assert m["self_judge/judge_acc"] == pytest.approx(4 / 6)
  assert m["self_judge/judge_parse_failures"] == 2.0
  assert m["self_judge/judge_parse_failure_rate"] == 0.25
  assert m["self_judge/response_length/clip_ratio"] == 0.25

  record = batch.records[1]
  assert (record["step"], record["problem"], record["nums"], record["target"]) == (7, 1,
                                                                                   [44, 19, 35], 98)
  assert [(a["format_ok"], a["correct"], a["judge_says"]) for a in record["answers"]] == [
      (True, True, 1), (True, False, 1), (False, False, None), (False, False, 0)]
  assert "step 7" in batch.record_text and "7*3+5+2" in batch.record_text
  assert env.state_dict() == {}


def test_a_judge_that_never_gives_a_verdict_reports_no_accuracy():
  """Unparsed verdicts are not rejections: a silent judge must not look perfect on negatives."""
  tokenizer = ByteTokenizer()
  config = SelfJudgeConfig(group_size=4, policy_max_new_tokens=64, judge_max_new_tokens=32)
  policy = Scripted(tokenizer, _countdown_policy)
  silent = Scripted(tokenizer, lambda text, k: "I am not sure.")
  m = SelfJudgeEnv(config, tokenizer, judge_sample=silent).play_episodes(
      PROBLEMS, policy, np.random.default_rng(0), step=1).metrics
  assert m["self_judge/judge_parse_failure_rate"] == 1.0
  assert m["self_judge/reward"] == pytest.approx(0.1 * m["self_judge/format_rate"])
  for key in ("judge_acc", "judge_tpr", "judge_tnr", "judge_fpr"):
    assert f"self_judge/{key}" not in m


def test_metrics_without_positives_leave_tpr_out():
  tokenizer = ByteTokenizer()
  env = SelfJudgeEnv(SelfJudgeConfig(group_size=1), tokenizer)
  policy = Scripted(tokenizer, lambda t, k: "<answer>1+1</answer>" if "judge" not in t
                    else "\\boxed{0}")
  batch = env.play_episodes(PROBLEMS[:1], policy, np.random.default_rng(0), step=1)  # the policy judges
  assert len(policy.calls) == 2
  assert "self_judge/judge_tpr" not in batch.metrics
  assert batch.metrics["self_judge/judge_tnr"] == 1.0


@pytest.mark.parametrize("mode,expected", [
    ("fixed", [0, 0, 0, 0, 0]),
    ("delayed", [0, 2, 2, 2, 2]),
    ("online", [1, 2, 3, 4, 5]),
])
def test_judge_schedules_drive_the_judge(mode, expected):
  """A fake trainer applies the schedule: judge version 0 is the initial model,
  version s the policy after s - 1 updates; the lenient initial judge says 1."""
  tokenizer = ByteTokenizer()
  config = SelfJudgeConfig(group_size=2, judge_weights=mode, judge_delay_steps=2)
  env = SelfJudgeEnv(config, tokenizer)
  schedule = config.schedule()
  policy = Scripted(tokenizer, _countdown_policy)

  def judge_with(version):
    return Scripted(tokenizer, lambda t, k: f"v{version} \\boxed{{{int(version == 0)}}}")

  version, seen, rewards = 0, [], []
  for step in range(1, 6):
    action = schedule.weights_at(step)
    version = 0 if action == INITIAL else step if action == POLICY else version
    batch = env.play_episodes(PROBLEMS[:1], policy, np.random.default_rng(step), step,
                     judge_sample=judge_with(version))
    seen.append(int(re.match(r"v(\d+)", batch.records[0]["answers"][0]["judge_response"])[1]))
    rewards.append(batch.trajectories[0].reward)
  assert seen == expected
  assert rewards == pytest.approx([1.1 if v == 0 else 0.1 for v in expected])


def test_integration_task(pool):
  tokenizer = ByteTokenizer()
  answers = ["<answer>x**2 + C</answer>", "<answer>2*x**2</answer>",
             "<answer>__import__('os')</answer>"]
  policy = Scripted(tokenizer, lambda t, k: answers[k % 3])
  judge = Scripted(tokenizer, lambda t, k: "\\boxed{1}" if "x**2 + C" in t else "\\boxed{0}")
  env = SelfJudgeEnv(SelfJudgeConfig(task="integration", group_size=3), tokenizer,
                     judge_sample=judge, pool=pool)
  problem = integration.Problem.from_sympy("2*x")
  batch = env.play_episodes([problem], policy, np.random.default_rng(0), step=1)
  assert "SymPy expression" in policy.calls[0][0][0] and "<answer>" in policy.calls[0][0][0]
  assert "Differentiate" in judge.calls[0][0][0]
  assert [r.reward for r in batch.trajectories] == pytest.approx([1.1, 0.1, 0.0])
  assert batch.metrics["self_judge/true_reward"] == pytest.approx(1 / 3)
  assert batch.metrics["self_judge/judge_acc"] == 1.0
  assert batch.metrics["self_judge/format_rate"] == pytest.approx(2 / 3)
  assert batch.records[0]["definite"] is False
  assert batch.metrics["verifier/timeouts"] == 0.0


def test_an_answer_past_the_verifier_safety_net_is_scored_as_unparseable(pool):
  tokenizer = ByteTokenizer()
  slow = "x**2" + " + 0*sin(x)" * 150  # correct, but its parse alone takes milliseconds
  policy = Scripted(tokenizer, lambda t, k: f"<answer>{slow}</answer>")
  judge = Scripted(tokenizer, lambda t, k: "\\boxed{1}")
  env = SelfJudgeEnv(SelfJudgeConfig(task="integration", group_size=2,
                                     verifier_time_limit_s=1e-4), tokenizer,
                     judge_sample=judge, pool=pool)
  batch = env.play_episodes([integration.Problem.from_sympy("2*x")], policy, np.random.default_rng(0),
                   step=1)
  # The judge's 1, no format bonus, not correct: the reward of an unparseable answer.
  assert [r.reward for r in batch.trajectories] == pytest.approx([1.0, 1.0])
  assert batch.metrics["verifier/timeouts"] == 2.0
  assert batch.metrics["self_judge/true_reward"] == 0.0
  # Which stage hits the limit depends on the machine (a worker may have the
  # parse cached); the verdict does not.
  assert all(a["reason"].endswith(": timed out") for a in batch.records[0]["answers"])


def test_sample_count_mismatch_raises():
  tokenizer = ByteTokenizer()
  env = SelfJudgeEnv(SelfJudgeConfig(group_size=2), tokenizer)
  with pytest.raises(ValueError, match="completions"):
    env.play_episodes(PROBLEMS[:1], lambda prompts, **kw: [], np.random.default_rng(0), 1)


@pytest.mark.parametrize("per_call", [0, 1])
def test_evaluate_scores_the_judge_over_the_verdicts_it_gave(per_call):
  tokenizer, judge_tokenizer = ByteTokenizer(), ShiftTokenizer(as_mapping=True)
  config = SelfJudgeConfig(group_size=4, judge_template="countdown_4",
                           policy_max_new_tokens=64, judge_max_new_tokens=32)
  policy, judge = Scripted(tokenizer, _countdown_policy), Scripted(judge_tokenizer, _judge)
  env = SelfJudgeEnv(config, tokenizer, judge_sample=judge, judge_tokenizer=judge_tokenizer)
  out = env.evaluate(PROBLEMS, policy, problems_per_call=per_call)
  assert len(policy.calls) == (2 if per_call == 1 else 1)
  assert out["true_reward"] == 0.25 and out["judge_unparsed_rate"] == 0.25
  assert out["judge_acc"] == pytest.approx(4 / 6) and out["judge_tpr"] == 1.0
  assert out["judge_tnr"] == pytest.approx(0.5)
  hits = [1.0] * 4 + [0.0] * 2  # the 6 parsed verdicts: right, right, right, right, wrong, wrong
  assert out["judge_acc/se"] == pytest.approx(np.std(hits, ddof=1) / np.sqrt(6))
  assert out["reward"] == pytest.approx(0.55)


def test_constrained_verdicts_and_the_answer_prefill():
  tokenizer = ByteTokenizer()
  config = SelfJudgeConfig(group_size=4, policy_max_new_tokens=64, judge_max_new_tokens=32,
                           answer_prefill="<answer>", constrained_verdict=True)
  seen = {}

  def policy(prompts, **kw):
    seen["policy"] = [tokenizer.decode(p) for p in prompts]
    text = " 7*3+5+2 </answer>"
    return [Completion(tuple(tokenizer.encode(text)), (-0.1,) * len(text), "eos")
            for _ in prompts]

  def judge(prompts, **kw):
    seen["judge"] = ([tokenizer.decode(p) for p in prompts], kw)
    return [Completion(tuple(kw["choices"][k % 2]), (-0.1,) * len(kw["choices"][k % 2]), "stop")
            for k in range(len(prompts))]

  batch = SelfJudgeEnv(config, tokenizer, judge_sample=judge).play_episodes(
      PROBLEMS, policy, np.random.default_rng(0), step=1)
  assert all(p.endswith("<answer>") for p in seen["policy"])
  judge_prompts, kw = seen["judge"]
  assert [tokenizer.decode(c) for c in kw["choices"]] == ["1}", "0}"]
  assert kw["max_new_tokens"] == 2 and all(p.endswith("\\boxed{") for p in judge_prompts)
  answers = [a for r in batch.records for a in r["answers"]]
  assert [a["judge_says"] for a in answers] == [1, 0] * 4
  assert all(a["response"].startswith("<answer> 7*3+5+2") for a in answers)
  assert batch.metrics["self_judge/judge_parse_failure_rate"] == 0.0
