"""`GRPOConfig`: the hyperparameters of the update and of the host-side advantages.

A plain frozen dataclass (static under `jit`), below the update and the batch
builder that both read it: `rlsvr.rl.train_step` (the loss) and
`rlsvr.rl.batch` (rewards -> advantages). Names are checked here, against the
registries, so a typo fails when the config is built, not inside a trace.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from rlsvr.rl import advantages, core, losses

DTYPES = ("float32", "bfloat16")
LR_SCHEDULES = ("constant", "linear", "cosine")


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
  """Hyperparameters of the update (verl's names in comments where they differ)."""

  lr: float = 1e-6
  warmup_steps: int = 0  # Linear warmup from 0 to `lr` over this many updates.
  # After the warmup: constant | linear | cosine (`rlsvr.rl.optimizer`; verl and TRL:
  # lr_scheduler_type), decaying to lr * min_lr_ratio at update `decay_steps`.
  lr_schedule: str = "constant"
  min_lr_ratio: float = 0.0  # verl: min_lr_ratio
  decay_steps: int = 0  # Updates of the whole run; `rlsvr.train` sets it when left 0.
  weight_decay: float = 0.01
  b1: float = 0.9
  b2: float = 0.999
  adam_eps: float = 1e-8
  max_grad_norm: float = 1.0  # verl: grad_clip
  clip_low: float = 0.2  # verl: clip_ratio_low
  clip_high: float = 0.2  # verl: clip_ratio_high (> clip_low: "clip-higher")
  clip_c: float = 3.0  # verl: clip_ratio_c (dual clip for A < 0)
  kl_coef: float = 0.0  # verl: kl_loss_coef; 0 means no reference model at all
  kl_kind: str = "low_var_kl"  # verl: kl_loss_type
  entropy_coef: float = 0.0  # verl: entropy_coeff
  # verl: policy_loss.loss_mode; a name in `rlsvr.rl.losses` (vanilla | gspo | cispo | ...).
  policy_loss: str = "vanilla"
  agg_mode: str = "token-mean"  # verl: loss_agg_mode
  # TRL's `loss_type` (grpo | bnpo | dapo | dr_grpo): when set, it replaces agg_mode
  # (`losses.LOSS_TYPES`).
  loss_type: str = ""
  # The seq-mean-token-sum-norm (dr_grpo) divisor, which that mode needs: the max completion
  # length, as verl's fixed padding and TRL's max_completion_length give it. A batch's own
  # width (its length bucket) would move the step size with its longest completion.
  # `rlsvr.train` sets it from the environment's length limits when the config leaves 0.
  loss_scale_factor: float = 0.0
  # verl: adv_estimator; a name in `rlsvr.rl.advantages` (grpo, rloo, reinforce_plus_plus_baseline).
  advantage: str = "grpo"
  norm_adv_by_std: bool = True  # verl: norm_adv_by_std_in_grpo (the grpo estimator only)
  # DAPO's overlong reward shaping (verl: reward_model.overlong_buffer.len / penalty_factor):
  # completions longer than max_length - overlong_buffer lose up to the factor; 0: off.
  overlong_buffer: int = 0
  overlong_penalty_factor: float = 1.0
  micro_batch_size: int = 0  # Rows per forward/backward; 0: the whole (mini-)batch at once.
  # Optimizer updates per batch, each on 1/K of its rows (verl: train_batch_size /
  # ppo_mini_batch_size). Warmup counts updates.
  updates_per_batch: int = 1
  rollout_is: str = "none"  # Truncated IS correction for the sampler: none | token | sequence.
  rollout_is_threshold: float = 2.0  # Upper bound of the IS weights; also the metrics' band.
  # DAPO dynamic sampling (host side, `rlsvr.rl.filtering`): drop groups whose raw rewards
  # are all equal, play more until the batch is full or max_num_gen_batches rounds ran.
  filter_groups: bool = False
  max_num_gen_batches: int = 4
  # Logits are divided by the sampling temperature (of rows without `temperature_B`).
  temperature: float = 1.0
  param_dtype: str = "float32"  # Storage dtype of the params (optimizer state is fp32).
  compute_dtype: str | None = None  # Forward/backward dtype; None: param_dtype.
  remat: bool = False  # Recompute each layer in the backward pass.
  # Host side: `rlsvr.train` builds batches whose rows share prompts with each prompt once
  # (`build_batch(share_prompts=True)`, the same update), where that saves tokens.
  share_prompts: bool = True
  # Host side: > 0 packs the rows end to end into buffers of about this many tokens
  # (`build_batch(pack_tokens=N)`, `rlsvr.rl.packing`; the same update) instead of padding
  # each to the batch's longest prompt and completion; with `share_prompts`, each prompt
  # once per buffer. 0: padded rows.
  pack_tokens: int = 0
  logits_chunk: int = 0  # Sequence chunk of the unembedding; 0: automatic.

  def __post_init__(self):
    names = (("policy_loss", losses.policy_loss_names()),
             ("advantage", advantages.advantage_names()),
             ("loss_type", ("", *losses.LOSS_TYPES)), ("agg_mode", core.AGG_MODES),
             ("rollout_is", core.ROLLOUT_IS_LEVELS))
    for name, known in names:
      if getattr(self, name) not in known:
        raise ValueError(f"{name}={getattr(self, name)!r} is not one of {known}")
    if self.lr_schedule not in LR_SCHEDULES:
      raise ValueError(f"lr_schedule={self.lr_schedule!r} is not one of {LR_SCHEDULES}")
    if self.lr_schedule != "constant" and self.decay_steps <= max(self.warmup_steps, 0):
      raise ValueError(f"lr_schedule={self.lr_schedule!r} decays after the warmup: decay_steps "
                       f"({self.decay_steps}) must exceed warmup_steps ({self.warmup_steps})")
    if not 0.0 <= self.min_lr_ratio <= 1.0:
      raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
    if self.kl_kind.rstrip("+") not in core.KL_KINDS:
      raise ValueError(f"kl_kind={self.kl_kind!r} is not one of {core.KL_KINDS}")
    if self.loss_agg_mode == "seq-mean-token-sum-norm" and self.loss_scale_factor <= 0:
      raise ValueError(f"{self.loss_type or self.agg_mode!r} divides by the max completion "
                       "length: set loss_scale_factor to it (TRL: max_completion_length)")
    if self.loss_scale_factor < 0:
      raise ValueError(f"loss_scale_factor must be >= 0, got {self.loss_scale_factor}")
    if self.overlong_buffer < 0 or self.overlong_penalty_factor < 0:
      raise ValueError(f"overlong_buffer={self.overlong_buffer} and overlong_penalty_factor="
                       f"{self.overlong_penalty_factor} must be >= 0")
    if self.clip_c <= 1.0:
      raise ValueError(f"clip_c must be > 1, got {self.clip_c}")
    if self.updates_per_batch < 1:
      raise ValueError(f"updates_per_batch must be >= 1, got {self.updates_per_batch}")
    if self.rollout_is_threshold <= 1.0:
      raise ValueError(f"rollout_is_threshold must be > 1, got {self.rollout_is_threshold}")
    if self.pack_tokens < 0:
      raise ValueError(f"pack_tokens must be >= 0 (0: no packing), got {self.pack_tokens}")
    if self.max_num_gen_batches < 1:
      raise ValueError(f"max_num_gen_batches must be >= 1, got {self.max_num_gen_batches}")
    for name in ("param_dtype", "compute_dtype"):
      if getattr(self, name) not in (None, *DTYPES):
        raise ValueError(f"{name}={getattr(self, name)!r} is not one of {DTYPES}")

  @property
  def loss_agg_mode(self) -> str:
    """The aggregation in effect: `loss_type`'s preset when set, else `agg_mode`."""
    return losses.LOSS_TYPES[self.loss_type] if self.loss_type else self.agg_mode

  @property
  def dtype(self) -> jnp.dtype:
    """The forward/backward (compute) dtype."""
    return jnp.dtype(self.compute_dtype or self.param_dtype)
