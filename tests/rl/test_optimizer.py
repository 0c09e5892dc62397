"""The learning-rate schedules against transformers' schedulers, and the optimizer following them."""
import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers import optimization as hf

from configs.spy_summ import get_config
from rlsvr.rl.config import GRPOConfig
from rlsvr.rl.optimizer import lr_schedule, make_optimizer
from rlsvr.train import grpo_config

LR, DECAY = 3e-4, 20


def hf_rates(kind: str, warmup: int, min_ratio: float) -> np.ndarray:
  """transformers' learning rate at updates 0..DECAY (LambdaLR's multiplier times lr)."""
  opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
  if kind == "constant":
    sched = hf.get_constant_schedule_with_warmup(opt, warmup)
  elif kind == "linear" and min_ratio == 0:
    sched = hf.get_linear_schedule_with_warmup(opt, warmup, DECAY)
  elif kind == "linear":  # A polynomial of power 1 down to lr_end is the linear one with a floor.
    sched = hf.get_polynomial_decay_schedule_with_warmup(opt, warmup, DECAY, lr_end=LR * min_ratio)
  elif min_ratio == 0:
    sched = hf.get_cosine_schedule_with_warmup(opt, warmup, DECAY)
  else:
    sched = hf.get_cosine_with_min_lr_schedule_with_warmup(opt, warmup, DECAY, min_lr_rate=min_ratio)
  return np.array([LR * sched.lr_lambdas[0](k) for k in range(DECAY + 1)])


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup", [0, 4])
@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
def test_schedule_matches_transformers(kind, warmup, min_ratio):
  config = GRPOConfig(lr=LR, warmup_steps=warmup, lr_schedule=kind, min_lr_ratio=min_ratio,
                      decay_steps=DECAY)
  ours = np.array([float(lr_schedule(config)(k)) for k in range(DECAY + 4)])
  np.testing.assert_allclose(ours[:DECAY + 1], hf_rates(kind, warmup, min_ratio), rtol=1e-5,
                             atol=1e-12)
  # Past the decay the rate holds (transformers' cosine would rise again there).
  np.testing.assert_array_equal(ours[DECAY:], ours[DECAY])


def test_adamw_steps_by_the_scheduled_rate():
  # A constant gradient makes each Adam step exactly lr_k (m_hat / sqrt(v_hat) = 1; no decay):
  # the optimizer, not only the metric, follows the schedule.
  config = GRPOConfig(lr=LR, warmup_steps=2, lr_schedule="cosine", decay_steps=8,
                      weight_decay=0.0, adam_eps=1e-12, max_grad_norm=1e9)
  tx = make_optimizer(config)
  params = {"w": jnp.zeros(())}
  state = tx.init(params)
  steps = []
  for _ in range(10):
    updates, state = tx.update({"w": jnp.ones(())}, state, params)
    steps.append(-float(updates["w"]))
  # float32 bias corrections: within 1e-4 of the rate.
  np.testing.assert_allclose(steps, [float(lr_schedule(config)(k)) for k in range(10)],
                             rtol=1e-4, atol=1e-12)
  assert steps[0] == 0.0 and steps[2] == pytest.approx(LR, rel=1e-4) and steps[-1] == 0.0


@pytest.mark.parametrize("fields, match", [
    (dict(lr_schedule="step"), "lr_schedule='step' is not one of"),
    (dict(lr_schedule="cosine"), "decay_steps .0. must exceed warmup_steps"),
    (dict(lr_schedule="linear", warmup_steps=10, decay_steps=10), "must exceed"),
    (dict(min_lr_ratio=1.5), "min_lr_ratio must be in"),
])
def test_bad_schedules_are_refused(fields, match):
  with pytest.raises(ValueError, match=match):
    GRPOConfig(**fields)


def test_the_trainer_decays_over_the_runs_updates():
  c = get_config("smoke")
  c.steps, c.grpo.updates_per_batch, c.grpo.lr_schedule = 6, 2, "linear"
  assert grpo_config(c).decay_steps == 12
  c.grpo.decay_steps = 7
  assert grpo_config(c).decay_steps == 7
  c.grpo.lr_schedule = "constant"
  c.grpo.decay_steps = 0
  assert dataclasses.asdict(grpo_config(c))["decay_steps"] == 0
  # Shortened below its warmup (`--config.steps=2` of a 4-step warmup): it ends warming up.
  c.grpo.lr_schedule, c.steps, c.grpo.updates_per_batch, c.grpo.warmup_steps = "cosine", 2, 1, 4
  config = grpo_config(c)
  assert config.decay_steps == 5
  assert [float(lr_schedule(config)(k)) for k in range(2)] == pytest.approx([0.0, c.grpo.lr / 4])
