"""GRPO's pure loss functions, with the semantics of verl's `core_algos` (hence the name).

Names and formulas follow verl 0.9.1 (`compute_grpo_outcome_advantage`,
`kl_penalty`, `agg_loss`, `compute_policy_loss_vanilla`) so runs can be
compared with verl's. All functions are pure and jittable; the string options
(`kind`, `mode`) are static.

Aggregation is split into a numerator and a denominator (`aggregate_terms`):
micro-batches sum their numerators while the denominator is counted once over
the whole batch, so any split of a batch gives exactly the full-batch loss.

  group_advantages(rewards_N, group_ids_N) -> advantages_N
  kl_penalty(logp_BxT, ref_logp_BxT, kind) -> kl_BxT
  aggregate(values_BxT, mask_BxT, mode) -> scalar
  policy_loss(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT) -> (loss, metrics)
  rollout_is_weights(old_logp_BxT, sampler_logp_BxT, mask_BxT, level, threshold) -> w_BxT

The other advantage estimators and policy losses, selectable by name, are in
`rlsvr.rl.advantages` and `rlsvr.rl.losses`; the update itself is
`rlsvr.rl.train_step.train_step` (this module is below it and never imports it).
`rlsvr.rl.grpo` is the public face of all of them.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

ROLLOUT_IS_LEVELS = ("none", "token", "sequence")
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")

# verl clamps the log-ratio before `exp` so one wild token cannot overflow.
_LOG_RATIO_CLAMP = 20.0
# verl's `low_var_kl`: the log-ratio is clamped to +-20 and the estimate to +-10.
_K3_CLAMP = 10.0
# verl's `seq-mean-token-mean` divides each row's sum by (tokens + 1e-8).
_SEQ_TOKEN_EPS = 1e-8


def group_advantages(rewards_N, group_ids_N, *, baselines_N=None, norm_by_std: bool = True,
                     eps: float = 1e-6):
  """GRPO outcome advantages: each reward against the other rewards of its group.

  `(x - mean_g) / (std_g + eps)` of `x = rewards - baselines` (baselines: e.g.
  per-role EMAs; default 0) with the unbiased std of group g; with
  `norm_by_std=False`, `x - mean_g` (Dr. GRPO). Group ids are any integers.

  A group of two or more whose raw rewards are all equal carries no
  information: all its rows get exactly 0, whatever their baselines (different
  baselines would otherwise turn "no signal" into a confident gradient, and
  float rounding of the mean into noise divided by eps). A group of one has
  mean 0 and std 1: its advantage is its centred reward, as in verl.
  """
  rewards_N = jnp.asarray(rewards_N, jnp.float32)
  group_ids_N = jnp.asarray(group_ids_N)
  x_N = rewards_N if baselines_N is None else rewards_N - jnp.asarray(baselines_N, jnp.float32)
  # N is a batch of completions (hundreds), so an N x N same-group matrix is cheap
  # and keeps the function jittable for arbitrary, non-contiguous ids.
  same_NxN = (group_ids_N[:, None] == group_ids_N[None, :]).astype(jnp.float32)
  count_N = same_NxN.sum(-1)
  mean_N = same_NxN @ x_N / count_N
  sq_dev_NxN = (x_N[None, :] - mean_N[:, None]) ** 2
  var_N = (same_NxN * sq_dev_NxN).sum(-1) / jnp.maximum(count_N - 1, 1)
  single_N = count_N == 1
  mean_N = jnp.where(single_N, 0.0, mean_N)
  std_N = jnp.where(single_N, 1.0, jnp.sqrt(var_N))
  advantages_N = (x_N - mean_N) / (std_N + eps) if norm_by_std else x_N - mean_N
  return jnp.where(informative_groups(rewards_N, group_ids_N), advantages_N, 0.0)


def informative_groups(rewards_N, group_ids_N):
  """True for the rows of a group of one or of a group whose raw rewards are not all equal:
  the rows that every advantage estimator may give a non-zero advantage."""
  rewards_N = jnp.asarray(rewards_N, jnp.float32)
  group_ids_N = jnp.asarray(group_ids_N)
  same_NxN = group_ids_N[:, None] == group_ids_N[None, :]
  # Exact comparison of the raw rewards: the test is "no spread at all", not "small".
  differs_N = (same_NxN & (rewards_N[None, :] != rewards_N[:, None])).any(-1)
  return (same_NxN.sum(-1) == 1) | differs_N


def _kl_forward(logp_BxT, ref_logp_BxT, kind: str):
  if kind in ("k1", "kl"):
    return logp_BxT - ref_logp_BxT
  if kind == "abs":
    return jnp.abs(logp_BxT - ref_logp_BxT)
  if kind in ("k2", "mse"):
    return 0.5 * jnp.square(logp_BxT - ref_logp_BxT)
  if kind in ("k3", "low_var_kl"):
    d = jnp.clip(ref_logp_BxT - logp_BxT, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return jnp.clip(jnp.exp(d) - d - 1.0, -_K3_CLAMP, _K3_CLAMP)
  raise ValueError(f"unknown KL estimator {kind!r}; known: {KL_KINDS} (optionally with '+')")


def kl_penalty(logp_BxT, ref_logp_BxT, kind: str):
  """Per-token KL estimate of the policy against the reference.

  `k1`/`kl`: lp - ref; `abs`: |lp - ref|; `k2`/`mse`: (lp - ref)^2 / 2;
  `k3`/`low_var_kl`: exp(d) - d - 1 with d = clamp(ref - lp, +-20), clamped to
  +-10. A trailing `+` (verl's straight-through, e.g. `k3+`) keeps the value of
  the estimator but takes the gradient of k2, which is unbiased for the KL.
  """
  base = kind[:-1] if kind.endswith("+") else kind
  forward = _kl_forward(logp_BxT, ref_logp_BxT, base)
  if not kind.endswith("+") or base in ("k2", "mse"):
    return forward
  backward = 0.5 * jnp.square(logp_BxT - ref_logp_BxT)
  return backward - jax.lax.stop_gradient(backward) + jax.lax.stop_gradient(forward)


def aggregate_terms(values_BxT, mask_BxT, mode: str, *, loss_scale_factor: float | None = None):
  """(numerator, denominator) of `aggregate`; numerators add across micro-batches.

  token-mean: sum of masked values / number of unmasked tokens.
  seq-mean-token-sum: sum of per-row sums / rows with >= 1 unmasked token.
  seq-mean-token-mean: sum of per-row means / rows with >= 1 unmasked token.
  seq-mean-token-sum-norm: seq-mean-token-sum / loss_scale_factor (default T).
  A fully masked row adds 0 to both, so it never produces NaN.
  """
  mask_BxT = mask_BxT.astype(jnp.float32)
  masked_BxT = values_BxT.astype(jnp.float32) * mask_BxT
  if mode == "token-mean":
    return masked_BxT.sum(), mask_BxT.sum()
  if mode not in AGG_MODES:
    raise ValueError(f"unknown aggregation mode {mode!r}; known: {AGG_MODES}")
  tokens_B = mask_BxT.sum(-1)
  num_seqs = (tokens_B > 0).astype(jnp.float32).sum()
  row_sums_B = masked_BxT.sum(-1)
  if mode == "seq-mean-token-mean":
    return (row_sums_B / (tokens_B + _SEQ_TOKEN_EPS)).sum(), num_seqs
  numerator = row_sums_B.sum()
  if mode == "seq-mean-token-sum-norm":
    scale = values_BxT.shape[-1] if loss_scale_factor is None else loss_scale_factor
    numerator = numerator / scale
  return numerator, num_seqs


def aggregate(values_BxT, mask_BxT, mode: str, *, loss_scale_factor: float | None = None):
  """verl's `agg_loss` of a (B, T) matrix under `mask_BxT`; 0 when nothing is unmasked."""
  numerator, denominator = aggregate_terms(values_BxT, mask_BxT, mode,
                                           loss_scale_factor=loss_scale_factor)
  return numerator / jnp.maximum(denominator, 1.0)


def policy_loss_terms(logp_BxT, old_logp_BxT, advantages_BxT, *, clip_low: float = 0.2,
                      clip_high: float = 0.2, clip_c: float = 3.0) -> dict[str, Any]:
  """Per-token clipped PPO loss and the per-token indicators behind its metrics.

  Returns {"pg_loss": (B, T), "clipped": (B, T), "clipped_lower": (B, T),
  "neg_log_ratio": (B, T)} with no mask applied.
  """
  if clip_c <= 1.0:
    raise ValueError(f"clip_c (dual-clip lower bound) must be > 1, got {clip_c}")
  log_ratio = jnp.clip(logp_BxT - old_logp_BxT, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
  ratio = jnp.exp(log_ratio)
  losses1 = -advantages_BxT * ratio
  losses2 = -advantages_BxT * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  clip_losses1 = jnp.maximum(losses1, losses2)
  # Dual clip: with A < 0 a huge ratio would make the loss unbounded; cap it at -A * c.
  losses3 = -advantages_BxT * clip_c
  clip_losses2 = jnp.minimum(losses3, clip_losses1)
  negative = advantages_BxT < 0
  return {
      "pg_loss": jnp.where(negative, clip_losses2, clip_losses1),
      "clipped": (losses2 > losses1).astype(jnp.float32),
      "clipped_lower": ((clip_losses1 > losses3) & negative).astype(jnp.float32),
      "neg_log_ratio": -log_ratio,
  }


def rollout_is_weights(old_logp_BxT, sampler_logp_BxT, mask_BxT, level: str,
                       threshold: float = 2.0):
  """Truncated importance weights of the trainer's policy against the sampler's (verl's TIS).

  `token`: min(exp(clamp(old - sampler, +-20)), threshold) per token; `sequence`:
  min(exp(clamp(sum of the row's log-ratios, +-20)), threshold) broadcast over the
  row. Zero on masked tokens, no gradient (the weights change the measure, not
  the objective). They multiply the per-token policy loss, as verl's
  `rollout_is_weights`; `none` gives ones.
  """
  mask_BxT = mask_BxT.astype(jnp.float32)
  if level == "none":
    return mask_BxT
  log_ratio_BxT = (old_logp_BxT - sampler_logp_BxT) * mask_BxT
  if level == "sequence":
    log_ratio_BxT = jnp.broadcast_to(log_ratio_BxT.sum(-1, keepdims=True), log_ratio_BxT.shape)
  elif level != "token":
    raise ValueError(f"unknown rollout_is level {level!r}; known: {ROLLOUT_IS_LEVELS}")
  weights_BxT = jnp.exp(jnp.clip(log_ratio_BxT, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
  return jax.lax.stop_gradient(jnp.minimum(weights_BxT, threshold) * mask_BxT)


def rollout_mismatch_sums(old_logp_BxT, sampler_logp_BxT, mask_BxT, threshold: float):
  """Token sums (and a max) behind the `rollout_corr/*` metrics; divide the sums by the
  number of tokens. The ratio is the trainer's probability over the sampler's,
  pi_old / pi_sampler; `kl` estimates KL(sampler || trainer) as verl's (sampler - old)."""
  mask_BxT = mask_BxT.astype(jnp.float32)
  log_ratio_BxT = jnp.clip(old_logp_BxT - sampler_logp_BxT, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
  ratio_BxT = jnp.exp(log_ratio_BxT)
  outside_BxT = (ratio_BxT > threshold) | (ratio_BxT < 1.0 / threshold)
  total = lambda x: (x * mask_BxT).sum()
  return {
      "sum": {"rollout_corr/kl": total(-log_ratio_BxT),
              "rollout_corr/k3_kl": total(ratio_BxT - log_ratio_BxT - 1.0),
              "rollout_corr/ratio_mean": total(ratio_BxT),
              "rollout_corr/ratio_fraction_outside": total(outside_BxT.astype(jnp.float32))},
      "max": {"rollout_corr/ratio_max": jnp.max(jnp.where(mask_BxT > 0, ratio_BxT, 0.0))},
  }


def masked_mean(values_BxT, mask_BxT):
  """Mean over unmasked entries (metrics); 0 when nothing is unmasked."""
  mask_BxT = mask_BxT.astype(jnp.float32)
  return (values_BxT * mask_BxT).sum() / jnp.maximum(mask_BxT.sum(), 1.0)


def policy_loss(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, *, clip_low: float = 0.2,
                clip_high: float = 0.2, clip_c: float = 3.0, agg_mode: str = "token-mean",
                loss_scale_factor: float | None = None):
  """verl's vanilla PPO policy loss: `max(-A*rho, -A*clip(rho, 1-eps_low, 1+eps_high))`.

  rho = exp(clamp(logp - old_logp, +-20)); for A < 0 the loss is further capped
  at `-A * clip_c` (dual clip). Advantages are per token (broadcast a sequence
  advantage with `advantages_B[:, None]`). Returns (loss, metrics) with metrics
  `pg_clipfrac`, `pg_clipfrac_lower` and `ppo_kl` (masked token means).
  """
  terms = policy_loss_terms(logp_BxT, old_logp_BxT, advantages_BxT, clip_low=clip_low,
                            clip_high=clip_high, clip_c=clip_c)
  loss = aggregate(terms["pg_loss"], mask_BxT, agg_mode, loss_scale_factor=loss_scale_factor)
  metrics = {
      "pg_clipfrac": masked_mean(terms["clipped"], mask_BxT),
      "pg_clipfrac_lower": masked_mean(terms["clipped_lower"], mask_BxT),
      "ppo_kl": masked_mean(terms["neg_log_ratio"], mask_BxT),
  }
  return loss, metrics
