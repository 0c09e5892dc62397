"""Host side: `Trajectory` rows -> the padded batch dict of `train_step`, and rollout metrics.

Layout of one row (P = prompt bucket, C = completion bucket, T = P + C):

  tokens     [pad ... pad  p0 p1 ... pk | c0 c1 ... EOS  pad ... pad]   B x T
  attention  [0   ...   0   1  1 ...  1 |  1  1 ...   1    0 ...   0]   B x T
  loss_mask                             |  1  1 ...   1    0 ...   0]   B x C
  sampler_logp                          | l0 l1 ...  le    0 ...   0]   B x C
  advantages_B, temperature_B           one per row: its advantage, and the temperature
                                        it was sampled at (the update scores it so)
  allowed_BxCxK                         only when a row was drawn from a few choices
                                        (`Trajectory.allowed_ids`): the tokens each
                                        position could take, -1 after them (all -1:
                                        the whole vocabulary); K a power of two

The prompt ends at column P and the completion starts there, so every row's
completion starts at the same column, and the per-token arrays of the loss
cover only the last C columns: the update never computes logits (the largest
activation) for prompt positions, which in the spy game's detection prompts
outnumber the completion tokens many times over. P and C are rounded up to the
sampler's length buckets (`sampling.layout.length_buckets`), so a run compiles a
handful of shapes, not one per step.

With `share_prompts`, rows that continue the same prompt (a GRPO group, the
detectors of one game) are laid out so that the update runs each prompt once
(`qwen3.forward_shared_prompts`), when that saves a quarter of the tokens or more:

  prompt_tokens_UxP      [pad ... pad  p0 p1 ... pk]   U distinct prompts (and empty ones)
  prompt_mask_UxP        [0   ...   0   1  1 ...  1]
  prompt_index_B         row b continues prompt prompt_index_B[b] of its micro-batch
  completion_tokens_BxC  [c0 c1 ... EOS  pad ... pad]
  completion_mask_BxC    [ 1  1 ...   1    0 ...   0]
  loss_mask_BxC, sampler_logp_BxC, advantages_B, temperature_B (allowed_BxCxK) as above

The update splits rows (and prompts) i -> part i % n_parts (updates per batch x
micro-batches); the rows are reordered so that each part holds its rows' prompts
(`prompt_index_B` counts within the part), while every update gets the same rows
as in the whole-row layout. Over data shards the layout is still exact, but XLA
then all-gathers every prompt's keys and values, so `rlsvr.train` uses it on
one batch shard only.

With `pack_tokens`, the rows are instead packed end to end into buffers without
padding (`rlsvr.rl.packing`, whose docstring shows that layout), sharing each prompt
within a buffer when `share_prompts` is set.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rlsvr.rl import advantages as estimators
from rlsvr.rl import packing
from rlsvr.rl.config import GRPOConfig
from rlsvr.rl.rollout import Trajectory
from rlsvr.sampling.layout import length_bucket


def shaped_rewards(trajectories: Sequence[Trajectory], config: GRPOConfig,
                   max_response_length: int | Sequence[int] | None = None) -> np.ndarray:
  """Each row's raw reward plus DAPO's overlong penalty (`config.overlong_buffer` > 0),
  which needs each row's length limit: `max_response_length` (one int or one per row),
  by default each row's own `Trajectory.max_new_tokens`."""
  rewards = np.array([t.reward for t in trajectories], np.float32)
  if config.overlong_buffer <= 0:
    return rewards
  if max_response_length is None:
    max_response_length = [t.max_new_tokens for t in trajectories]
  limits = np.atleast_1d(np.asarray(max_response_length, object))
  if any(m is None for m in limits):
    raise ValueError("overlong_buffer > 0 needs max_response_length (the completion limit) "
                     "of every row")
  lengths = [len(t.completion_ids) for t in trajectories]
  return rewards + estimators.overlong_penalty(lengths, limits.astype(np.float64),
                                               config.overlong_buffer,
                                               config.overlong_penalty_factor)


def advantages_of(trajectories: Sequence[Trajectory], config: GRPOConfig | None = None, *,
                  max_response_length: int | Sequence[int] | None = None) -> np.ndarray:
  """The advantages of every row by `config.advantage` (default: GRPO), grouped by
  `group_id` (trained or not), from each row's shaped `reward - baseline`; 0 for a group
  whose (shaped) rewards are all equal. See `rlsvr.rl.advantages`."""
  config = config or GRPOConfig()
  rewards = shaped_rewards(trajectories, config, max_response_length)
  baselines = np.array([t.baseline for t in trajectories], np.float32)
  groups = np.array([t.group_id for t in trajectories], np.int64)
  tokens = np.array([len(t.completion_ids) if t.trained else 0 for t in trajectories],
                    np.float32)
  estimator = estimators.advantage_fn(config.advantage)
  return np.asarray(estimator(rewards, groups, baselines, tokens, config))


def row_bucket(n: int, multiple: int = 1) -> int:
  """The padded row count of a train batch of `n` rows: the smallest power of two or 1.5 x
  a power of two >= n (1, 2, 3, 4, 6, 8, 12, 16, 24, ...), rounded up to a multiple of
  `multiple`. Every distinct row count compiles `train_step` again, and partly filled
  DAPO batches or dropped unscorable rows would each bring one; the padding rows are
  fully masked (no loss changes) and are at most a third of the batch."""
  if n < 1:
    raise ValueError(f"a batch needs at least one row, got {n}")
  bucket = next(b for k in range(64) for b in (2**k, 3 * 2**k // 2) if b >= n)
  return -(-bucket // multiple) * multiple


def build_batch(trajectories: Sequence[Trajectory], config: GRPOConfig | None = None, *,
                advantages: Sequence[float] | None = None,
                max_response_length: int | Sequence[int] | None = None, pad_id: int = 0,
                min_bucket: int = 16, batch_multiple: int = 1,
                share_prompts: bool = False, pack_tokens: int = 0) -> dict[str, np.ndarray]:
  """The `train_step` batch of the trained rows of `trajectories`.

  Args:
    trajectories: played rows; those with `trained=False` take part in the
      advantage groups but are not in the batch.
    config: the estimator and reward shaping of `advantages_of` (default:
      `GRPOConfig()`, plain GRPO).
    advantages: one per trajectory; default `advantages_of(trajectories, config)`.
    max_response_length: the completion length limit (one, or one per
      trajectory), needed by `config.overlong_buffer` > 0.
    pad_id: token id of padding (never attended to, never trained).
    min_bucket: the smallest prompt bucket (completions: 1, 2, 4, ...).
    batch_multiple: rows are padded with fully masked rows, which change no
      loss, to `row_bucket(rows, batch_multiple)`: a bucket (few compiled
      shapes) that is a multiple of this (updates per batch x micro-batch
      size, and data shards).
    share_prompts: lay rows that share a prompt out to run it once (the layout
      above, rows reordered) when that saves >= 25% of the tokens; the update
      is the same. `config`'s updates_per_batch and micro_batch_size say how
      the step will split the rows.
    pack_tokens: > 0: pack the rows into buffers of up to this many tokens (of the
      longest row's, when longer; `rlsvr.rl.packing`; with `share_prompts`, each
      prompt once per buffer); the update is the same.

  Returns:
    tokens_BxT, attention_mask_BxT, loss_mask_BxC, sampler_logp_BxC,
    advantages_B, temperature_B (a row's `Trajectory.temperature`, else
    `config.temperature`) and, when a row has `allowed_ids`, allowed_BxCxK, as
    numpy arrays (int32 / float32); or, shared or packed, the keys of those
    layouts.
  """
  config = config or GRPOConfig()
  if advantages is None:
    advantages = advantages_of(trajectories, config, max_response_length=max_response_length)
  if len(advantages) != len(trajectories):
    raise ValueError(f"{len(advantages)} advantages for {len(trajectories)} trajectories")
  rows = [(t if t.temperature is not None else
            dataclasses.replace(t, temperature=config.temperature), float(a))
           for t, a in zip(trajectories, advantages) if t.trained]
  if not rows:
    raise ValueError("no trained trajectories")
  for t, _ in rows:
    if len(t.logprobs) != len(t.completion_ids):
      raise ValueError(f"{len(t.logprobs)} logprobs for {len(t.completion_ids)} completion ids")
    _check_allowed(t)
  widest = max((len(a) for t, _ in rows for a in t.allowed_ids or ()), default=0)
  allowed = 1 << (widest - 1).bit_length() if widest else 0  # Few shapes: a power of two.
  p = length_bucket(max(len(t.prompt_ids) for t, _ in rows), min_bucket)
  # Completions bucket from 1: each completion column costs an unembedding over the
  # whole vocabulary, and a constrained vote is 2 tokens (padded to 16, the spy game's
  # decision update spent most of its time on empty columns).
  c = length_bucket(max(len(t.completion_ids) for t, _ in rows), 1)
  b = row_bucket(len(rows), batch_multiple)
  if pack_tokens > 0:
    rows_of_part = rows_of_parts(rows, b, config)
    if rows_of_part is None:
      raise ValueError(f"a batch of {b} rows does not split into updates_per_batch="
                       f"{config.updates_per_batch} x micro-batches of "
                       f"{config.micro_batch_size}")
    return packing.packed_layout(rows_of_part, c, b, pad_id, pack_tokens, share_prompts,
                                 row_bucket, allowed)
  if share_prompts:
    shared = _shared_prompt_layout(rows, p, c, b, config, pad_id, allowed)
    if shared is not None:
      return shared
  tokens = np.full((b, p + c), pad_id, np.int32)
  attention = np.zeros((b, p + c), np.int32)
  per_row = packing.loss_rows(b, c, allowed)
  for i, (t, a) in enumerate(rows):
    n_p, n_c = len(t.prompt_ids), len(t.completion_ids)
    tokens[i, p - n_p:p] = t.prompt_ids
    tokens[i, p:p + n_c] = t.completion_ids
    attention[i, p - n_p:p + n_c] = 1
    packing.put_loss_row(per_row, i, t, a)
  return {"tokens_BxT": tokens, "attention_mask_BxT": attention, **per_row}


def _check_allowed(t: Trajectory) -> None:
  """A constrained row's allowed sets: one per completion token, each holding its token."""
  if t.allowed_ids is None:
    return
  if len(t.allowed_ids) != len(t.completion_ids):
    raise ValueError(f"{len(t.allowed_ids)} allowed sets for {len(t.completion_ids)} "
                     "completion ids")
  for token, allowed in zip(t.completion_ids, t.allowed_ids):
    if token not in allowed:
      raise ValueError(f"completion token {token} is not among its allowed tokens {allowed}")


# The shared layout is used when it runs at most this fraction of the plain layout's tokens.
_SHARED_TOKENS_FRACTION = 0.75


def rows_of_parts(rows, b: int, config: GRPOConfig) -> dict[int, list] | None:
  """Which rows each part of the update gets (part -> rows), as `train_step` splits a
  batch of `b` rows (updates per batch x micro-batches, row i to part i % parts), with
  the rows of one prompt in as few micro-batches as possible; None when `b` does not
  split so (`train_step` refuses such a batch anyway, with the reason)."""
  updates, micro_batch = config.updates_per_batch, config.micro_batch_size
  if b % updates or (micro_batch and (b // updates) % micro_batch):
    return None
  micro_batches = b // updates // micro_batch if micro_batch else 1  # Per update.
  rows_per_part = b // (updates * micro_batches)
  # Each update gets the rows the whole-row layout gives it (row i to update i % updates),
  # so every update is the same; inside it, each prompt's rows are packed into its
  # micro-batches, into one (if any) with room for all of them, else split.
  rows_of_part: dict[int, list] = {}
  for update in range(updates):
    groups: dict[tuple[int, ...], list] = {}
    for row in rows[update::updates]:
      groups.setdefault(tuple(row[0].prompt_ids), []).append(row)
    packed: list[list] = [[] for _ in range(micro_batches)]
    for group in sorted(groups.values(), key=len, reverse=True):  # Largest first: fewer splits.
      while group:
        room = [rows_per_part - len(part) for part in packed]
        fits = [m for m in range(micro_batches) if room[m] >= len(group)]
        m = min(fits, key=lambda m: room[m]) if fits else int(np.argmax(room))
        packed[m] += group[:room[m]]
        group = group[room[m]:]
    for m, part_rows in enumerate(packed):
      rows_of_part[m * updates + update] = part_rows
  return rows_of_part


def _shared_prompt_layout(rows, p: int, c: int, b: int, config: GRPOConfig,
                          pad_id: int, allowed: int) -> dict[str, np.ndarray] | None:
  """The shared-prompt batch of `build_batch` (module docstring), or None when it would
  not save enough tokens."""
  rows_of_part = rows_of_parts(rows, b, config)
  if rows_of_part is None:
    return None
  n_parts = len(rows_of_part)
  prompts_of_part = {part: list(dict.fromkeys(tuple(t.prompt_ids) for t, _ in part_rows))
                     for part, part_rows in rows_of_part.items()}
  # Every part holds as many prompt rows, so they too split by i % n_parts.
  prompts_per_part = max(1, max(len(x) for x in prompts_of_part.values()))
  n_prompt_rows = prompts_per_part * n_parts
  if n_prompt_rows * p + b * c > _SHARED_TOKENS_FRACTION * b * (p + c):
    return None
  prompt_tokens = np.full((n_prompt_rows, p), pad_id, np.int32)
  prompt_mask = np.zeros((n_prompt_rows, p), np.int32)
  prompt_index = np.zeros((b,), np.int32)
  tokens = np.full((b, c), pad_id, np.int32)
  attention = np.zeros((b, c), np.int32)
  per_row = packing.loss_rows(b, c, allowed)
  for part, part_rows in rows_of_part.items():
    slot_of_prompt = {ids: slot for slot, ids in enumerate(prompts_of_part[part])}
    for ids, slot in slot_of_prompt.items():
      prompt_row = slot * n_parts + part
      prompt_tokens[prompt_row, p - len(ids):] = ids
      prompt_mask[prompt_row, p - len(ids):] = 1
    # Padding rows (the part's rows after its last real one) read the part's prompt 0.
    for position, (t, a) in enumerate(part_rows):
      i = position * n_parts + part
      n_c = len(t.completion_ids)
      prompt_index[i] = slot_of_prompt[tuple(t.prompt_ids)]
      tokens[i, :n_c] = t.completion_ids
      attention[i, :n_c] = 1
      packing.put_loss_row(per_row, i, t, a)
  return {"prompt_tokens_UxP": prompt_tokens, "prompt_mask_UxP": prompt_mask,
          "prompt_index_B": prompt_index, "completion_tokens_BxC": tokens,
          "completion_mask_BxC": attention, **per_row}


def forward_slots(batch: dict[str, np.ndarray]) -> int:
  """Token positions the update's forward computes for `batch`, padding included."""
  if "packed_tokens_NxL" in batch:
    return batch["packed_tokens_NxL"].size
  if "tokens_BxT" in batch:
    return batch["tokens_BxT"].size
  return batch["prompt_tokens_UxP"].size + batch["completion_tokens_BxC"].size


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
