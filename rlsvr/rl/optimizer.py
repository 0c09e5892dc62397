"""The update's optimizer: global-norm clipping, then AdamW on a learning-rate schedule.

The schedule counts optimizer updates (a step with `updates_per_batch=K` makes K): a
linear warmup from 0 to `lr` over `warmup_steps`, then `lr_schedule`'s shape to the
`decay_steps`-th update (`rlsvr.train` sets it to the run's updates when left 0):

  constant  lr after the warmup (verl's default)
  linear    lr down to lr * min_lr_ratio (TRL's default, `lr_scheduler_type="linear"`)
  cosine    half a cosine from lr to lr * min_lr_ratio (verl's `lr_scheduler_type=cosine`)

Each matches the multiplier of the transformers scheduler of the same name
(`tests/rl/test_optimizer.py`); past `decay_steps` the rate stays at its end value.
"""
from __future__ import annotations

import optax

from rlsvr.rl.config import GRPOConfig


def lr_schedule(config: GRPOConfig) -> optax.Schedule:
  """The learning rate at each optimizer update (0-based, as optax counts)."""
  lr, warmup = config.lr, max(config.warmup_steps, 0)
  if config.lr_schedule == "constant":
    after = optax.constant_schedule(lr)
  elif config.lr_schedule == "linear":
    after = optax.linear_schedule(lr, lr * config.min_lr_ratio, config.decay_steps - warmup)
  else:
    after = optax.cosine_decay_schedule(lr, config.decay_steps - warmup, alpha=config.min_lr_ratio)
  if warmup == 0:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), after], [warmup])


def make_optimizer(config: GRPOConfig) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      optax.adamw(lr_schedule(config), b1=config.b1, b2=config.b2, eps=config.adam_eps,
                  weight_decay=config.weight_decay))
