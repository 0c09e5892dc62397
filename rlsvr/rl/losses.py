"""Policy losses by name (`grpo.policy_loss`), and TRL's `loss_type` aggregation presets.

A policy loss is one pure, jittable function of per-token arrays:

  @register_policy_loss("mine")
  def mine(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config) -> terms

`config` is the `GRPOConfig` (read `clip_low`, `clip_high`, `clip_c` or a field
of your own); `terms` holds B x T arrays, none of them masked yet:
  pg_loss        the loss of each token, before aggregation
  clipped        1 where the clip is active   -> actor/pg_clipfrac
  clipped_lower  1 where a lower bound is     -> actor/pg_clipfrac_lower
  neg_log_ratio  old_logp - logp              -> actor/ppo_kl
The update aggregates `pg_loss` with the configured mode (numerator and
denominator apart, so micro-batching stays exact) and averages the indicators
over unmasked tokens. A row's terms may depend on its own other tokens (GSPO's
sequence ratio), never on other rows: micro-batches split rows, never a row.
Registering in any module imported before the config is built makes the name
valid for `grpo.policy_loss`; the update itself is never touched.

Formulas follow verl 0.9.1's `core_algos` (`compute_policy_loss_vanilla`,
`_gspo`, `_cispo`); the metrics are verl's, including its 0 for
`pg_clipfrac_lower` under GSPO and CISPO.

TRL 1.16 `GRPOConfig.loss_type` presets (TRL's `GRPOTrainer._compute_loss`):
  grpo     row token-mean, then mean over rows       -> seq-mean-token-mean
  bnpo     token sum / tokens of the local batch      -> token-mean
  dapo     token sum / tokens of the global batch     -> token-mean
  dr_grpo  token sum / (rows * max_completion_length) -> seq-mean-token-sum-norm
           with loss_scale_factor = max_completion_length
Our denominators are those of the whole (mini-)batch of one optimizer update,
counted once before micro-batching, where TRL's differ:
  - grpo, dr_grpo: TRL's rows include fully masked ones (all tokens masked, e.g.
    `mask_truncated_completions`); ours count rows with >= 1 unmasked token (our
    padding rows are fully masked and must not count). Equal otherwise: TRL's
    micro-batches hold equal row counts, so its mean of means is the batch mean.
  - bnpo: TRL divides each process's micro-batch by its own tokens and averages
    those ratios over micro-batches and processes; ours divides by the batch's
    tokens, so it is dapo (TRL's bnpo equals it when every micro-batch holds
    the same number of tokens).
  - dapo: TRL divides by the generation batch's tokens spread evenly over its
    optimizer steps (`num_items_in_batch / num_processes * accumulation steps /
    steps_per_generation`); ours by the tokens of each update's own rows. Equal
    with one update per batch (`updates_per_batch=1`).
TRL's `cispo` loss_type clips only above, at `epsilon_high` itself:
`policy_loss="cispo"` with `clip_high = epsilon_high - 1` and `clip_low = 1`
(lower bound 0, never active) and `loss_type="dapo"` is the same loss. TRL's
GSPO (`importance_sampling_level="sequence"`) is `policy_loss="gspo"` with
`loss_type="grpo"` (verl's extra clamp of the log-ratio at 10 aside).
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from rlsvr.rl import core

PolicyLoss = Callable[..., dict[str, Any]]

LOSS_TYPES = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
              "dr_grpo": "seq-mean-token-sum-norm"}

# verl's GSPO clamps the sequence log-ratio from above only, at 10.
_GSPO_LOG_RATIO_MAX = 10.0
# verl's CISPO clamps the token log-ratio at +-20, as the vanilla loss.
_LOG_RATIO_CLAMP = 20.0

_POLICY_LOSSES: dict[str, PolicyLoss] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLoss], PolicyLoss]:
  """Decorator: makes `fn` the policy loss called `name` (a new name or a replacement)."""

  def register(fn: PolicyLoss) -> PolicyLoss:
    _POLICY_LOSSES[name] = fn
    return fn

  return register


def policy_loss_names() -> tuple[str, ...]:
  return tuple(_POLICY_LOSSES)


def policy_loss_fn(name: str) -> PolicyLoss:
  if name not in _POLICY_LOSSES:
    raise ValueError(f"unknown policy loss {name!r}; registered: {policy_loss_names()}")
  return _POLICY_LOSSES[name]


@register_policy_loss("vanilla")
def vanilla(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config):
  """PPO's clipped loss with the dual clip (`core.policy_loss_terms`)."""
  del mask_BxT  # Every token's loss is its own.
  return core.policy_loss_terms(logp_BxT, old_logp_BxT, advantages_BxT, clip_low=config.clip_low,
                                clip_high=config.clip_high, clip_c=config.clip_c)


@register_policy_loss("gspo")
def gspo(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config):
  """GSPO (arXiv 2507.18071): PPO's clip on the sequence ratio s_i = exp(mean_t log ratio).

  Each token's ratio is s_i,t = sg(s_i) * pi_t / sg(pi_t): its value is the row's
  s_i, its gradient that of the token's own log-prob, scaled by s_i. The
  paper's clip ranges are small (clip_low 3e-4, clip_high 4e-4) and its
  aggregation is seq-mean-token-mean (`loss_type="grpo"`).
  """
  mask_BxT = mask_BxT.astype(jnp.float32)
  log_ratio_BxT = logp_BxT - old_logp_BxT
  seq_log_ratio_B = (log_ratio_BxT * mask_BxT).sum(-1) / jnp.maximum(mask_BxT.sum(-1), 1.0)
  token_log_ratio_BxT = (logp_BxT - jax.lax.stop_gradient(logp_BxT)
                         + jax.lax.stop_gradient(seq_log_ratio_B)[:, None])
  ratio_BxT = jnp.exp(jnp.minimum(token_log_ratio_BxT, _GSPO_LOG_RATIO_MAX))
  losses1 = -advantages_BxT * ratio_BxT
  losses2 = -advantages_BxT * jnp.clip(ratio_BxT, 1.0 - config.clip_low, 1.0 + config.clip_high)
  return {"pg_loss": jnp.maximum(losses1, losses2),
          "clipped": (losses2 > losses1).astype(jnp.float32),
          "clipped_lower": jnp.zeros_like(losses1),
          "neg_log_ratio": -log_ratio_BxT}


@register_policy_loss("cispo")
def cispo(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config):
  """CISPO (MiniMax-M1, arXiv 2506.13585): -sg(clip(rho, 1-eps_low, 1+eps_high)) * A * logp.

  The clip bounds the importance weight, not the update: every token keeps its
  gradient -w * A * grad(logp), however far its ratio moved. The paper clips
  only above (clip_low = 1 leaves the weight unbounded below).
  """
  del mask_BxT  # Every token's loss is its own.
  log_ratio_BxT = jnp.clip(logp_BxT - old_logp_BxT, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
  ratio_BxT = jnp.exp(log_ratio_BxT)
  weight_BxT = jnp.clip(ratio_BxT, 1.0 - config.clip_low, 1.0 + config.clip_high)
  return {"pg_loss": -jax.lax.stop_gradient(weight_BxT) * advantages_BxT * logp_BxT,
          "clipped": (ratio_BxT != weight_BxT).astype(jnp.float32),
          "clipped_lower": jnp.zeros_like(ratio_BxT),
          "neg_log_ratio": -log_ratio_BxT}
