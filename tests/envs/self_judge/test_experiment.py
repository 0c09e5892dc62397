"""Experiment glue: RLSR through the trainer, judge schedules, problem sources."""
import os

import numpy as np
import pytest

from rlsvr import checkpoint, experiment, metrics, train


def rlsr_smoke(variant: str = "", steps: int = 2):
  from configs.rlsr_countdown import get_config

  c = get_config(",".join(v for v in ("smoke", variant) if v))
  c.steps = steps
  return c


def test_rlsr_delayed_judge_is_checkpointed_and_restored(tmp_path, monkeypatch):
  import jax

  built, initial = [], []
  build = experiment.build

  def spy_on_build(c, tokenizer, model_config, params, mesh):
    initial.append(jax.tree.map(np.asarray, params))
    built.append(build(c, tokenizer, model_config, params, mesh))
    return built[-1]

  monkeypatch.setattr(experiment, "build", spy_on_build)
  workdir = str(tmp_path / "run")
  c = rlsr_smoke("delayed", steps=2)
  c.rlsr.judge_delay_steps = 2  # the copy at step 2 is the policy after step 1's update
  train.train(c, workdir)
  records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  assert "self_judge/true_reward" in records[-1] and "self_judge/format_rate" in records[-1]
  ckpts = os.path.join(workdir, "checkpoints")
  assert not os.path.isdir(os.path.join(ckpts, "1", "judge"))
  assert os.path.isdir(os.path.join(ckpts, "2", "judge"))
  _, _, policy_at_1 = checkpoint.restore_params(ckpts, 1)
  _, _, policy_at_2 = checkpoint.restore_params(ckpts, 2)
  same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a),
                                                               jax.tree.leaves(b)))
  assert same(built[0].judge_params, policy_at_1) and not same(policy_at_1, policy_at_2)
  c.steps = 3
  train.train(c, workdir)
  # The rerun restored the copy made at step 2 (not the initial weights, not the policy).
  assert same(built[1].judge_params, policy_at_1)
  assert not same(built[1].judge_params, initial[1])
  assert [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [1, 2,
                                                                                              3]
  text = open(os.path.join(workdir, "rollouts.txt"), encoding="utf-8").read()
  assert "step 3" in text


def test_only_delayed_judge_copies_are_checkpointed():
  from rlsvr.envs.self_judge.judge import JudgeSchedule

  exp = experiment.SelfJudgeExperiment.__new__(experiment.SelfJudgeExperiment)
  exp.judge_params = {"w": np.zeros(2)}
  exp.schedule = JudgeSchedule("delayed", delay_steps=3)
  assert exp.judge_state(2) is None and exp.judge_state(3) is exp.judge_params
  for mode in ("fixed", "online"):  # initial weights are rebuilt, online ones are the policy's
    exp.schedule = JudgeSchedule(mode)
    assert exp.judge_state(100) is None


@pytest.mark.parametrize("key,value,match", [
    ("rlsr.judge_template", 7, "rlsr"),
    ("rlsr.problems_per_step", 0, "problems_per_step"),
    ("judge.source", "smollm2", "fixed"),
])
def test_bad_rlsr_configs(key, value, match):
  c = rlsr_smoke("online")
  section, name = key.split(".")
  setattr(c[section], name, value)
  with pytest.raises(ValueError, match=match):
    train.check_config(c)


def test_countdown_problem_sources(tmp_path):
  c = rlsr_smoke()
  c.data.limit = 5
  generated = experiment.rlsr_problems(c)
  assert len(generated) == 5 and generated == experiment.rlsr_problems(c)  # seeded
  path = tmp_path / "cd.jsonl"
  path.write_text('{"target": 24, "nums": [4, 6, 1]}\n{"target": 10, "nums": [5, 2, 3]}\n')
  c.data.source = str(path)
  assert [p.target for p in experiment.rlsr_problems(c)] == [24, 10]
  c.data.source = "nowhere"
  with pytest.raises(ValueError, match="data.source"):
    experiment.rlsr_problems(c)
