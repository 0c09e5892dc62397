"""The GRPO API in one place: the pure losses, the registries and the update.

  group_advantages(rewards_N, group_ids_N) -> advantages_N
  kl_penalty(logp_BxT, ref_logp_BxT, kind) -> kl_BxT
  aggregate(values_BxT, mask_BxT, mode) -> scalar
  policy_loss(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT) -> (loss, metrics)
  rollout_is_weights(old_logp_BxT, sampler_logp_BxT, mask_BxT, level, threshold) -> w_BxT
  train_step(state, batch) -> (state, metrics)

This module sits on top: the formulas live in `core` (verl's `core_algos`),
`losses` and `advantages`, the jitted update in `train_step`, and none of them
imports this one.
"""
from rlsvr.rl.advantages import advantage_fn, register_advantage
from rlsvr.rl.config import GRPOConfig
from rlsvr.rl.core import (AGG_MODES, KL_KINDS, ROLLOUT_IS_LEVELS, aggregate, aggregate_terms,
                           group_advantages, informative_groups, kl_penalty, masked_mean,
                           policy_loss, policy_loss_terms, rollout_is_weights,
                           rollout_mismatch_sums)
from rlsvr.rl.losses import policy_loss_fn, register_policy_loss
from rlsvr.rl.train_step import TrainState, init_train_state, train_step

__all__ = ["AGG_MODES", "KL_KINDS", "ROLLOUT_IS_LEVELS", "GRPOConfig", "TrainState",
           "advantage_fn", "aggregate", "aggregate_terms", "group_advantages",
           "informative_groups", "init_train_state", "kl_penalty", "masked_mean", "policy_loss",
           "policy_loss_fn", "policy_loss_terms", "register_advantage", "register_policy_loss",
           "rollout_is_weights", "rollout_mismatch_sums", "train_step"]
