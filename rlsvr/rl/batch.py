"""Host side: `Trajectory` rows -> the padded batch dict of `train_step`, and rollout metrics.

Layout of one row (P = prompt bucket, C = completion bucket, T = P + C):

  tokens     [pad ... pad  p0 p1 ... pk | c0 c1 ... EOS  pad ... pad]   B x T
  attention  [0   ...   0   1  1 ...  1 |  1  1 ...   1    0 ...   0]   B x T
  loss_mask                             |  1  1 ...   1    0 ...   0]   B x C
  sampler_logp                          | l0 l1 ...  le    0 ...   0]   B x C

The prompt ends at column P and the completion starts there, so every row's
completion starts at the same column, and the per-token arrays of the loss
cover only the last C columns: the update never computes logits (the largest
activation) for prompt positions, which in the spy game's detection prompts
outnumber the completion tokens many times over. P and C are rounded up to buckets
(powers of two), so a run compiles a handful of shapes, not one per step.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from rlsvr.envs.base import Trajectory
from rlsvr.rl import grpo


LONG_STEP = 4096  # Above 2 * LONG_STEP lengths round up to multiples of this, not powers of two.


def bucket(n: int, minimum: int = 16) -> int:
  """The smallest power of two >= max(n, minimum), or above 8192 the next multiple of 4096:
  the sampler's prompt buckets. A 40k-token detection prompt pads to 40960, not 65536."""
  if n > 2 * LONG_STEP:
    return -(-n // LONG_STEP) * LONG_STEP
  size = max(minimum, 1)
  while size < n:
    size *= 2
  return size


def advantages_of(trajectories: Sequence[Trajectory], *, norm_by_std: bool = True) -> np.ndarray:
  """GRPO advantages of every row, grouped by `group_id` (trained or not): each row's
  `reward - baseline` against its group's, and 0 for a group whose raw rewards are equal."""
  rewards = np.array([t.reward for t in trajectories], np.float32)
  baselines = np.array([t.baseline for t in trajectories], np.float32)
  groups = np.array([t.group_id for t in trajectories], np.int64)
  return np.asarray(grpo.group_advantages(rewards, groups, baselines_N=baselines,
                                          norm_by_std=norm_by_std))


def build_batch(trajectories: Sequence[Trajectory], *, advantages: Sequence[float] | None = None,
                norm_adv_by_std: bool = True, pad_id: int = 0, min_bucket: int = 16,
                batch_multiple: int = 1) -> dict[str, np.ndarray]:
  """The `train_step` batch of the trained rows of `trajectories`.

  Args:
    trajectories: played rows; those with `trained=False` take part in the
      advantage groups but are not in the batch.
    advantages: one per trajectory; default `advantages_of(trajectories)`.
    norm_adv_by_std: passed to `advantages_of` when `advantages` is None.
    pad_id: token id of padding (never attended to, never trained).
    min_bucket: the smallest prompt / completion bucket.
    batch_multiple: rows are padded with fully masked rows to a multiple of
      this (updates per batch x micro-batch size, and data shards), which
      changes no loss.

  Returns:
    tokens_BxT, attention_mask_BxT, loss_mask_BxC, sampler_logp_BxC,
    advantages_B as numpy arrays (int32 / float32).
  """
  if advantages is None:
    advantages = advantages_of(trajectories, norm_by_std=norm_adv_by_std)
  if len(advantages) != len(trajectories):
    raise ValueError(f"{len(advantages)} advantages for {len(trajectories)} trajectories")
  rows = [(t, float(a)) for t, a in zip(trajectories, advantages) if t.trained]
  if not rows:
    raise ValueError("no trained trajectories")
  for t, _ in rows:
    if len(t.logprobs) != len(t.completion_ids):
      raise ValueError(f"{len(t.logprobs)} logprobs for {len(t.completion_ids)} completion ids")
  p = bucket(max(len(t.prompt_ids) for t, _ in rows), min_bucket)
  c = bucket(max(len(t.completion_ids) for t, _ in rows), min_bucket)
  b = -(-len(rows) // batch_multiple) * batch_multiple
  tokens = np.full((b, p + c), pad_id, np.int32)
  attention = np.zeros((b, p + c), np.int32)
  loss_mask = np.zeros((b, c), np.float32)
  sampler_logp = np.zeros((b, c), np.float32)
  adv = np.zeros((b,), np.float32)
  for i, (t, a) in enumerate(rows):
    n_p, n_c = len(t.prompt_ids), len(t.completion_ids)
    tokens[i, p - n_p:p] = t.prompt_ids
    tokens[i, p:p + n_c] = t.completion_ids
    attention[i, p - n_p:p + n_c] = 1
    loss_mask[i, :n_c] = 1.0
    sampler_logp[i, :n_c] = t.logprobs
    adv[i] = a
  return {"tokens_BxT": tokens, "attention_mask_BxT": attention, "loss_mask_BxC": loss_mask,
          "sampler_logp_BxC": sampler_logp, "advantages_B": adv}


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
  """reward/mean|std, reward/baselined_mean, frac_reward_zero_std,
  response_length/mean|max|clip_ratio, over the trained rows.

  Rewards are raw (`reward/baselined_mean` is the mean of reward - baseline).
  `frac_reward_zero_std` is the fraction of groups (of trained rows) whose raw
  rewards are all equal, a group of one included: those rows teach nothing
  relative to their group. `clip_ratio` is the fraction of completions cut by
  the length limit (finish_reason "length").
  """
  rows = [t for t in trajectories if t.trained]
  if not rows:
    return {}
  rewards = np.array([t.reward for t in rows], np.float64)
  lengths = np.array([len(t.completion_ids) for t in rows], np.float64)
  groups: dict[int, list[float]] = {}
  for t in rows:
    groups.setdefault(t.group_id, []).append(t.reward)
  return {
      "reward/mean": float(rewards.mean()),
      "reward/std": float(rewards.std()),
      "reward/baselined_mean": float(np.mean([t.reward - t.baseline for t in rows])),
      "frac_reward_zero_std": float(np.mean([np.ptp(g) == 0 for g in groups.values()])),
      "response_length/mean": float(lengths.mean()),
      "response_length/max": float(lengths.max()),
      "response_length/clip_ratio": float(np.mean([t.finish_reason == "length" for t in rows])),
  }
