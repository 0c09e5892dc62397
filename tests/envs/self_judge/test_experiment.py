"""RLSR through the trainer: the judge schedules and their checkpoints, config checks."""
import os

import numpy as np
import pytest

import dataclasses

from rlsvr import checkpoint, metrics, train
from rlsvr.envs import registry
from rlsvr.envs.self_judge import experiment


def rlsr_smoke(variant: str = "", steps: int = 2):
  from configs.rlsr_countdown import get_config

  c = get_config(",".join(v for v in ("smoke", variant) if v))
  c.steps = steps
  return c


def test_rlsr_delayed_judge_is_checkpointed_and_restored(tmp_path, monkeypatch):
  import jax

  built, initial = [], []
  spec = registry.get("rlsr")

  def spy_on_build(ctx):
    initial.append(jax.tree.map(np.asarray, ctx.initial_params))
    built.append(spec.build(ctx))
    return built[-1]

  monkeypatch.setitem(registry._REGISTRY, "rlsr", dataclasses.replace(spec, build=spy_on_build))
  # Every sampler's decode layout is dropped before each update, the judge's too.
  from rlsvr import train_loop

  real_step, layouts = train_loop.train_step, []

  def update(state, batch):
    layouts.append(dict(built[-1].judge_sampler._laid_out._by_placement))
    return real_step(state, batch)

  monkeypatch.setattr(train_loop, "train_step", update)
  workdir = str(tmp_path / "run")
  c = rlsr_smoke("delayed", steps=2)
  c.rlsr.judge_delay_steps = 2  # the copy at step 2 is the policy after step 1's update
  train.train(c, workdir)
  assert layouts == [{}, {}]
  records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  assert "self_judge/true_reward" in records[-1] and "self_judge/format_rate" in records[-1]
  ckpts = os.path.join(workdir, "checkpoints")
  assert not os.path.isdir(os.path.join(ckpts, "1", "models"))
  assert os.path.isdir(os.path.join(ckpts, "2", "models"))
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
  assert exp.model_state(2) == {} and exp.model_state(3)["judge"] is exp.judge_params
  for mode in ("fixed", "online"):  # initial weights are rebuilt, online ones are the policy's
    exp.schedule = JudgeSchedule(mode)
    assert exp.model_state(100) == {}


@pytest.mark.parametrize("key,value,match", [
    ("rlsr.judge_template", "countdown_7", "rlsr"),
    ("rlsr.problems_per_step", 0, "problems_per_step"),
    ("judge.source", "smollm2", "fixed"),
])
def test_bad_rlsr_configs(key, value, match):
  c = rlsr_smoke("online")
  section, name = key.split(".")
  setattr(c[section], name, value)
  with pytest.raises(ValueError, match=match):
    train.check_config(c)


@pytest.mark.parametrize("local", ["cpu", "smoke"])
def test_a_schedule_set_on_the_command_line_equals_its_variant(local):
  """`--config.rlsr.judge_weights=delayed` gets what `:local,delayed` gets (the copy step)."""
  from configs.rlsr_countdown import get_config

  for weights in ("delayed", "online"):
    c = get_config(local)
    c.rlsr.judge_weights = weights
    assert c.to_dict() == get_config(f"{local},{weights}").to_dict()


def test_an_online_judge_keeps_no_copy_of_the_weights():
  """It judges with the policy's weights of each step; the initial ones would be dead
  weight (a whole model) for the run's length."""
  from rlsvr import parallel, train_loop

  for variant, kept in (("online", False), ("", True)):
    c = rlsr_smoke(variant)
    exp = train_loop._build(c, train.grpo_config(c), registry.get("rlsr"),  # noqa: SLF001
                            parallel.make_mesh({"data": 1, "fsdp": 1, "tensor": 1}))[2]
    assert (exp.judge_params is not None) == kept, variant
