"""Masked grouped-query attention, computed in query blocks when the sequence is long.

Plain attention materialises the B x H x T x S scores (and, for the backward pass,
the probabilities) of every layer: at the paper's 40k-token detection prompts that
is hundreds of GiB per sequence. Here the queries are split into blocks of
`block` rows; each block's scores exist only while that block is computed, and
the backward pass recomputes them (`jax.checkpoint`), so the extra memory is
B x H x block x S whatever T is. The result equals the unblocked computation
(same operations per query row).

The mask is never materialised either: key slot s is visible to a query at slot q
iff s <= q and `kv_valid_BxS[b, s]` (left padding is invalid). Slots are cache
columns; without a cache they are the sequence positions 0..T-1.

Packed sequences (`Segments`, self-attention without a cache) add two conditions: the
key is in the query's segment, and on its branch or on the segment's shared branch 0.
A segment is one row, or a prompt (branch 0) followed by the completions that continue
it (branches 1, 2, ...), each of which then sees the prompt and itself only: what
every row would see laid out alone (`rlsvr.rl.packing`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

DEFAULT_BLOCK = 512  # Query rows per block; sequences up to this length run unblocked.


class Segments(NamedTuple):
  """Per-token packing ids of a self-attended sequence (S == T; module docstring)."""

  segment_BxT: jax.Array  # 0: padding (sees nothing, seen by nothing), else the segment
  branch_BxT: jax.Array  # 0: the segment's shared part, k >= 1: its k-th continuation


def _visible(kv_valid_BxS, query_slot_T, segments: Segments | None, query_segments):
  """B x T x S: which key slots each query sees."""
  s = kv_valid_BxS.shape[-1]
  visible = ((jnp.arange(s)[None, :] <= query_slot_T[:, None])[None]
             & kv_valid_BxS.astype(bool)[:, None, :])
  if segments is None:
    return visible
  q_segment_BxT, q_branch_BxT = query_segments
  same_segment = q_segment_BxT[:, :, None] == segments.segment_BxT[:, None, :]
  on_branch = ((segments.branch_BxT[:, None, :] == 0)
               | (segments.branch_BxT[:, None, :] == q_branch_BxT[:, :, None]))
  return visible & same_segment & on_branch


def _attend(q_BxTxKxGxDh, k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS, query_slot_T,
            segments: Segments | None = None, query_segments=None):
  scale = 1.0 / math.sqrt(q_BxTxKxGxDh.shape[-1])
  # Queries moved head-major first (a small copy), so both matmuls produce the layout the
  # softmax reads: from q's own layout XLA:CPU computed the scores S-major and transposed the
  # whole T x S matrix twice, which slows long forwards (bench/forward.py).
  q_BxKxGxTxDh = q_BxTxKxGxDh.transpose(0, 2, 3, 1, 4)
  scores = jnp.einsum("bkgtd,bkds->bkgts", q_BxKxGxTxDh, k_BxKxDhxS.astype(q_BxTxKxGxDh.dtype),
                      preferred_element_type=jnp.float32) * scale
  visible_BxTxS = _visible(kv_valid_BxS, query_slot_T, segments, query_segments)
  scores = jnp.where(visible_BxTxS[:, None, None], scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores, axis=-1).astype(v_BxKxSxDh.dtype)
  return jnp.einsum("bkgts,bksd->bkgtd", probs, v_BxKxSxDh).transpose(0, 3, 1, 2, 4)


def attend(q_BxTxHxDh, k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS, query_slot_T, *,
           block: int | None = DEFAULT_BLOCK, segments: Segments | None = None):
  """Attention output B x T x H x Dh; H query heads share K = H / G key/value heads.

  `block=None` computes all T query rows at once. `segments`: packed sequences (the
  module docstring); the keys are then the queries' own tokens.
  """
  b, t, h, dh = q_BxTxHxDh.shape
  k = k_BxKxDhxS.shape[1]
  q_BxTxKxGxDh = q_BxTxHxDh.reshape(b, t, k, h // k, dh)
  if block is None or t <= block:
    out = _attend(q_BxTxKxGxDh, k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS, query_slot_T,
                  segments, segments)
    return out.reshape(b, t, h, dh)
  n = -(-t // block)
  # Equal blocks of at most `block` rows: 528 queries run as 2 x 264, not 2 x 512 (half
  # of them padding, whose scores cost as much as real ones).
  block = -(-t // n)
  pad = n * block - t  # Padded query rows see slot 0 at most and are cut off below.
  blocks = lambda x_BxT: jnp.pad(x_BxT, ((0, 0), (0, pad))).reshape(b, n, block).swapaxes(0, 1)
  q_NxBxCxKxGxDh = jnp.pad(q_BxTxKxGxDh, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0))).reshape(
      b, n, block, k, h // k, dh).swapaxes(0, 1)
  slot_NxC = jnp.pad(query_slot_T, (0, pad)).reshape(n, block)
  query_segments = None if segments is None else tuple(map(blocks, segments))

  @jax.checkpoint
  def one_block(xs):
    return _attend(xs[0], k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS, xs[1], segments, xs[2])

  out_NxBxCxKxGxDh = jax.lax.map(one_block, (q_NxBxCxKxGxDh, slot_NxC, query_segments))
  return out_NxBxCxKxGxDh.swapaxes(0, 1).reshape(b, n * block, h, dh)[:, :t]
