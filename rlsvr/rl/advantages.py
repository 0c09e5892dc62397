"""Advantage estimators by name (`grpo.advantage`), and DAPO's overlong reward shaping.

An estimator is one pure, jittable function of per-row arrays:

  @register_advantage("mine")
  def mine(rewards_N, group_ids_N, baselines_N, tokens_N, config) -> advantages_N

`rewards_N` are the rewards of every played row (shaped, see below), trained
or not; `baselines_N` the rows' own baselines (the spy game's role EMAs; 0 for
plain GRPO); `tokens_N` the number of completion tokens each row puts into the
batch (0 for rows played but not trained); `config` the `GRPOConfig`.

Every estimator works on x = reward - baseline, and follows the rule of
DESIGN.md: a group of two or more whose rewards are all equal gets 0 in every
row, whatever the baselines (`core.informative_groups`).

  grpo  (x - mean_g) / (std_g + 1e-6), or x - mean_g with norm_adv_by_std=False
        (`core.group_advantages`; verl compute_grpo_outcome_advantage).
  rloo  x_i - mean of the other rows' x in its group (verl
        compute_rloo_outcome_advantage: x * n/(n-1) - mean * n/(n-1)); a group
        of one keeps its x, as in verl.
  reinforce_plus_plus_baseline  x - mean_g (a group of one: x), then whitened
        over the batch's tokens: mean and unbiased variance weighted by each
        row's token count, (a - mean) / sqrt(var + 1e-8) (verl
        compute_reinforce_plus_plus_baseline_outcome_advantage, masked_whiten);
        the all-equal rule applies after the whitening (verl's would give those
        rows -mean / std).
`norm_adv_by_std` is the grpo estimator's alone (verl: norm_adv_by_std_in_grpo).

Overlong shaping (verl's DAPO reward manager, `overlong_buffer`): a completion of
L tokens (EOS included) under a limit of M tokens gets
min(-(L - (M - buffer)) / buffer * factor, 0) added to its reward, before any
advantage: no penalty up to M - buffer tokens, -factor at M.
"""
from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np

from rlsvr.rl import core

Estimator = Callable[..., jnp.ndarray]

# verl's masked_whiten adds 1e-8 to the variance.
_WHITEN_EPS = 1e-8

_ESTIMATORS: dict[str, Estimator] = {}


def register_advantage(name: str) -> Callable[[Estimator], Estimator]:
  """Decorator: makes `fn` the advantage estimator called `name`."""

  def register(fn: Estimator) -> Estimator:
    _ESTIMATORS[name] = fn
    return fn

  return register


def advantage_names() -> tuple[str, ...]:
  return tuple(_ESTIMATORS)


def advantage_fn(name: str) -> Estimator:
  if name not in _ESTIMATORS:
    raise ValueError(f"unknown advantage estimator {name!r}; registered: {advantage_names()}")
  return _ESTIMATORS[name]


def _centred(rewards_N, group_ids_N, baselines_N):
  """(x_N, x_N - mean of x over the row's group or 0 for a group of one, group sizes_N)."""
  x_N = jnp.asarray(rewards_N, jnp.float32) - jnp.asarray(baselines_N, jnp.float32)
  group_ids_N = jnp.asarray(group_ids_N)
  same_NxN = (group_ids_N[:, None] == group_ids_N[None, :]).astype(jnp.float32)
  count_N = same_NxN.sum(-1)
  mean_N = jnp.where(count_N == 1, 0.0, same_NxN @ x_N / count_N)
  return x_N, x_N - mean_N, count_N


@register_advantage("grpo")
def grpo_advantages(rewards_N, group_ids_N, baselines_N, tokens_N, config):
  del tokens_N  # Every row of a group counts once, whatever its length.
  return core.group_advantages(rewards_N, group_ids_N, baselines_N=baselines_N,
                               norm_by_std=config.norm_adv_by_std)


@register_advantage("rloo")
def rloo(rewards_N, group_ids_N, baselines_N, tokens_N, config):
  del tokens_N, config
  x_N, centred_N, count_N = _centred(rewards_N, group_ids_N, baselines_N)
  # x - (sum - x) / (n - 1) = (x - mean) * n / (n - 1).
  loo_N = jnp.where(count_N > 1, centred_N * count_N / jnp.maximum(count_N - 1, 1), x_N)
  return jnp.where(core.informative_groups(rewards_N, group_ids_N), loo_N, 0.0)


@register_advantage("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline(rewards_N, group_ids_N, baselines_N, tokens_N, config):
  del config
  _, centred_N, _ = _centred(rewards_N, group_ids_N, baselines_N)
  weights_N = jnp.asarray(tokens_N, jnp.float32)
  tokens = weights_N.sum()
  mean = (weights_N * centred_N).sum() / (tokens + 1e-8)
  # Unbiased over tokens (verl's Bessel factor n / (n - 1) on the token count).
  var = (weights_N * (centred_N - mean) ** 2).sum() / jnp.maximum(tokens - 1.0, 1.0)
  whitened_N = (centred_N - mean) / jnp.sqrt(var + _WHITEN_EPS)
  return jnp.where(core.informative_groups(rewards_N, group_ids_N), whitened_N, 0.0)


def overlong_penalty(lengths_N, max_lengths_N, buffer: int, factor: float) -> np.ndarray:
  """DAPO's soft overlong punishment of each row (<= 0); zeros when `buffer` is 0."""
  lengths_N = np.asarray(lengths_N, np.float64)
  if buffer <= 0:
    return np.zeros(lengths_N.shape, np.float32)
  max_lengths_N = np.broadcast_to(np.asarray(max_lengths_N, np.float64), lengths_N.shape)
  if np.any(max_lengths_N < buffer):
    raise ValueError(f"max response length {max_lengths_N.min():g} is below overlong_buffer="
                     f"{buffer}")
  exceed_N = lengths_N - (max_lengths_N - buffer)
  return np.minimum(-exceed_N / buffer * factor, 0.0).astype(np.float32)
