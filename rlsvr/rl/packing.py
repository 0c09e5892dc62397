"""Host side: the packed (padding-free) layout of a train batch (`build_batch(pack_tokens=N)`).

Rows are laid end to end into buffers of L tokens instead of each padded to the
longest prompt and completion. A segment is one row, or (with `share_prompts`) one
prompt followed by the completions of the rows that continue it; attention stays
inside a segment, and a completion sees its prompt and itself only
(`rlsvr.model.attention.Segments`), so every token gets what the padded layouts give it.

  packed_tokens_NxL     [p0 .. pk c0 .. EOS d0 .. EOS | q0 .. qm e0 .. EOS | pad ..]
  packed_positions_NxL  [0  .. k  k+1 ..    k+1 ..    | 0  .. m  m+1 ..    | 0   ..]
  packed_segment_NxL    [1  .. 1  1   ..    1   ..    | 2  .. 2  2   ..    | 0   ..]
  packed_branch_NxL     [0  .. 0  1   .. 1  2   .. 2  | 0  .. 0  1   .. 1  | 0   ..]
  score_hidden_S        one entry per completion token of every row, S in all: the flat
                        index n * L + l, into its part's buffers, of the hidden state
                        that predicts it (its prompt's last token for the first)
  score_token_S         that completion token
  score_row_S, score_col_S  where its logprob goes in the B x C arrays (row within its
                        part; padding entries name row B / parts, past the last)
  loss_mask_BxC, sampler_logp_BxC, advantages_B, temperature_B (and allowed_BxCxK)
                        as in the padded layouts

So the per-row arrays of the loss keep their shapes and meaning: the update
(`train_step`) differs only in how the forward reaches each row's hidden states. The
unembedding (a vocabulary-wide matmul per scored position) runs over the S real
completion tokens, not over B x C: rows of very different lengths, such as the spy
game's 2-token votes beside 40-token clues in one batch, would otherwise all be scored
over the longest one's columns (bench/packing.py).
Rows go to the update's parts (updates x micro-batches) as in the shared-prompt
layout (`batch.rows_of_parts`), and each part packs its own rows into its own
buffers (buffer j of part m is buffer j * parts + m, row i of part m is row
i * parts + m, as `train_step` splits them), so every micro-batch is the one the
padded layout gives it.

Shapes come from buckets, so a run compiles few programs: L is the length bucket, from
the longest row's up to `pack_tokens`' (further only when a row is longer), that
computes the fewest token slots, N a row bucket (1, 2, 3, 4, 6, 8, ...) per part, S per
part the power of two at or above its most completion tokens, capped at its rows' B x C,
B and C as in the padded layouts.
Entry s of part m's scored positions is entry s * parts + m, as its rows and buffers.

Attention costs L per token in every buffer, where a padded row costs its own length:
on a mesh the gather of the scored positions reads every data shard, so `rlsvr.train`
packs on one batch shard only, as it shares prompts (bench/packing.py measures
the layouts on played rows).
"""
from __future__ import annotations

import numpy as np

from rlsvr.sampling.layout import length_bucket, length_buckets


def loss_rows(b: int, c: int, allowed: int = 0) -> dict[str, np.ndarray]:
  """The per-row arrays of the loss, which every layout shares (`rlsvr.rl.batch`); padding
  rows have no tokens and temperature 1. With `allowed` = K > 0, also allowed_BxCxK: the
  tokens each position's probability is normalised over (-1 beyond them; none: all)."""
  arrays = {"loss_mask_BxC": np.zeros((b, c), np.float32),
            "sampler_logp_BxC": np.zeros((b, c), np.float32),
            "advantages_B": np.zeros((b,), np.float32),
            "temperature_B": np.ones((b,), np.float32)}
  if allowed:
    arrays["allowed_BxCxK"] = np.full((b, c, allowed), -1, np.int32)
  return arrays


def put_loss_row(arrays: dict[str, np.ndarray], i: int, trajectory, advantage: float) -> None:
  """Row i of `loss_rows` from a trajectory whose temperature is set (`batch.build_batch`)."""
  n_c = len(trajectory.completion_ids)
  arrays["loss_mask_BxC"][i, :n_c] = 1.0
  arrays["sampler_logp_BxC"][i, :n_c] = trajectory.logprobs
  arrays["advantages_B"][i] = advantage
  # Greedy rows (temperature 0) are scored under the model's own distribution.
  arrays["temperature_B"][i] = trajectory.temperature or 1.0
  if trajectory.allowed_ids is not None:
    for j, allowed in enumerate(trajectory.allowed_ids):
      arrays["allowed_BxCxK"][i, j, :len(allowed)] = allowed


def _segments(part_rows, share_prompts: bool, length: int) -> list[list]:
  """The part's rows as segments (lists of (row position, row)), each at most `length`
  tokens: one per row, or one per prompt while its completions fit."""
  if not share_prompts:
    return [[(i, row)] for i, row in enumerate(part_rows)]
  by_prompt: dict[tuple[int, ...], list] = {}
  for i, row in enumerate(part_rows):
    by_prompt.setdefault(tuple(row[0].prompt_ids), []).append((i, row))
  segments = []
  for prompt, members in by_prompt.items():
    current, used = [], len(prompt)
    for member in members:
      n_c = len(member[1][0].completion_ids)
      if current and used + n_c > length:
        segments.append(current)
        current, used = [], len(prompt)
      current.append(member)
      used += n_c
    segments.append(current)
  return segments


def _tokens_of(segment) -> int:
  return len(segment[0][1][0].prompt_ids) + sum(len(t.completion_ids) for _, (t, _) in segment)


def _fill(segments, length: int) -> list[list]:
  """First-fit decreasing: the buffers' segments, each buffer at most `length` tokens."""
  buffers: list[list] = []
  room: list[int] = []
  for segment in sorted(segments, key=_tokens_of, reverse=True):
    n = _tokens_of(segment)
    j = next((j for j, r in enumerate(room) if r >= n), None)
    if j is None:
      buffers.append([])
      room.append(length)
      j = len(buffers) - 1
    buffers[j].append(segment)
    room[j] -= n
  return buffers


def packed_layout(rows_of_part: dict[int, list], c: int, b: int, pad_id: int, pack_tokens: int,
                  share_prompts: bool, row_bucket, allowed: int = 0) -> dict[str, np.ndarray]:
  """The packed batch (module docstring) of `rows_of_part` (part -> [(trajectory,
  advantage)], `batch.rows_of_parts`): `b` rows of `c` completion columns, buffers of
  at most `pack_tokens` unless a row is longer, counted per part by `row_bucket`
  (`batch.row_bucket`, passed in: `rlsvr.rl.batch` imports this module); `allowed` as
  in `loss_rows`."""
  n_parts = len(rows_of_part)
  rows = [row for part_rows in rows_of_part.values() for row in part_rows]
  if any(not t.prompt_ids for t, _ in rows):
    raise ValueError("packing needs every row's prompt (>= 1 token): its last token "
                     "scores the completion's first")
  longest_row = max(len(t.prompt_ids) + len(t.completion_ids) for t, _ in rows)
  # Every buffer length from the longest row's bucket up to pack_tokens' is tried, and the
  # one computing the fewest slots wins (the shorter on a tie: attention costs L a token).
  shortest = length_bucket(longest_row)
  longest = max(shortest, length_bucket(pack_tokens))
  best = None
  for length in (n for n in length_buckets() if shortest <= n <= longest):
    buffers_of_part = {part: _fill(_segments(part_rows, share_prompts, length), length)
                       for part, part_rows in rows_of_part.items()}
    per_part = row_bucket(max(len(x) for x in buffers_of_part.values()))
    if best is None or per_part * length < best[0] * best[1]:
      best = (per_part, length, buffers_of_part)
  buffers_per_part, length, buffers_of_part = best
  n = buffers_per_part * n_parts
  tokens = np.full((n, length), pad_id, np.int32)
  positions = np.zeros((n, length), np.int32)
  segment_ids = np.zeros((n, length), np.int32)
  branches = np.zeros((n, length), np.int32)
  per_row = loss_rows(b, c, allowed)
  scored = {part: [] for part in buffers_of_part}  # part -> [(hidden, token, row, col)]
  for part, buffers in buffers_of_part.items():
    for j, buffer in enumerate(buffers):
      row = j * n_parts + part
      at = 0
      for s, segment in enumerate(buffer, start=1):
        prompt = segment[0][1][0].prompt_ids
        n_p = len(prompt)
        tokens[row, at:at + n_p] = prompt
        positions[row, at:at + n_p] = np.arange(n_p)
        segment_ids[row, at:at + n_p] = s
        last_prompt = j * length + at + n_p - 1  # Flat index within the part's buffers.
        at += n_p
        for k, (i, (t, a)) in enumerate(segment, start=1):
          n_c = len(t.completion_ids)
          tokens[row, at:at + n_c] = t.completion_ids
          positions[row, at:at + n_c] = n_p + np.arange(n_c)
          segment_ids[row, at:at + n_c] = s
          branches[row, at:at + n_c] = k
          # Completion token k is scored from the hidden state of the token before it:
          # the prompt's last for k = 0, completion token k - 1 after that.
          hidden = [last_prompt, *(j * length + at + np.arange(n_c - 1))]
          scored[part] += zip(hidden, t.completion_ids, [i] * n_c, range(n_c))
          put_loss_row(per_row, i * n_parts + part, t, a)
          at += n_c
  # S: a power of two, so that steps of one run differ in few S; at most B x C per part,
  # which the rows' shapes fix, where the completions fill most of their columns.
  most = max(1, max(len(x) for x in scored.values()))
  s = min(1 << (most - 1).bit_length(), b // n_parts * c)
  # Padding entries score hidden state 0 and land past the last row: dropped.
  score = np.zeros((4, s, n_parts), np.int32)
  score[2] = b // n_parts
  for part, entries in scored.items():
    if entries:
      score[:, :len(entries), part] = np.asarray(entries, np.int32).T
  hidden_S, token_S, row_S, col_S = score.reshape(4, s * n_parts)
  return {"packed_tokens_NxL": tokens, "packed_positions_NxL": positions,
          "packed_segment_NxL": segment_ids, "packed_branch_NxL": branches,
          "score_hidden_S": hidden_S, "score_token_S": token_S, "score_row_S": row_S,
          "score_col_S": col_S, **per_row}
