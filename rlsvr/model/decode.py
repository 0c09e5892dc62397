"""The one-token decode step of the `qwen3` decoder, laid out for fast decode loops.

  from_stacked(prefill_cache, new_len, batch) -> KVCache  # after a `qwen3.forward` prefill
  init_cache(config, batch, new_len) -> KVCache            # no prompt (tests)
  decode_weights(config, params) -> DecodeWeights           # once, outside the decode loop
  decode_step(config, params, tokens_Bx1, positions_Bx1, prefix_mask_UxP, cache, step,
              weights=None) -> (logits_VxB, cache)
  logits(config, params, weights, x_DxB) -> logits_VxB      # the step's final norm + LM head

The layer math is `qwen3.layer`'s, as in `qwen3.forward` with T == 1; this module
lays it out for decode loops, where a step is dominated by moving weights and
cache around:

- The prompt's keys and values (the prefix, P slots) are kept once per distinct
  prompt: U prompts, each continued by R = B / U consecutive rows (the samples
  of a GRPO group, the detectors of a game). Each row's generated tokens have
  their own N slots. The prefix is neither copied per row nor re-read per row:
  its score matmul runs on the queries of all R rows at once. At the spy
  paper's 40k-token detector prompts with 8 detectors and 4k new tokens this
  is 5x less cache memory, and 5x fewer cache bytes read per step, than a
  cache per row.
- The layers are unrolled in Python over per-layer weights instead of scanned
  over stacked [L, ...] arrays. Inside a loop, XLA:CPU materialises every
  layer slice of a stacked array as a copy before its matmul (in profiles those
  copies were a large share of a step). `decode_weights` pays that copy once per
  decode call: the loop then reads the weights in place.
- The step is feature-major: activations are [features, B] and weights [out, in],
  so each matmul is W @ x with the many output features as its rows, not x @ W
  with B rows. XLA:CPU's matmul kernels waste most of their work on few rows, so
  this layout wins at small batches and is about even once both layouts have
  rows enough (batch 128); sampler speed: bench/sampler.py. `decode_weights`
  transposes while it copies. Attention and the cache stay batch-major; only
  q, k, v and the attention output, small arrays, change layout. The step ends
  feature-major too: logits [vocab, batch] from head [V, D] @ hidden [D, B], and
  the sampler samples them in that layout (`strategies.sample_vocab_first`):
  fewer, cheaper ops per step than transposing to batch-major logits.
- The generated slots are a separate array per layer and per chunk: each layer
  writes its new slot in place in its own (donated, loop-carried) buffer and
  reads the cache without a copy (a stacked cache is sliced, i.e. copied, per layer).
- Chunks of slots after `step` are skipped (`lax.cond`), and the softmaxes of
  the prefix and the chunks are merged as in flash attention: reading the cache
  is the largest cost of a step at batch 128, and early on most slots are empty.

Compile time grows with depth, unlike the scanned forward (prefill keeps the scan).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rlsvr.model import params as params_lib
from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig

_MAX_CHUNKS = 4  # More chunks skip more empty slots but add per-chunk ops to every layer.
_MIN_CHUNK = 32
_NEG = jnp.finfo(jnp.float32).min


class KVCache(NamedTuple):
  """Keys and values per layer: the shared prompt prefix, and each row's generated slots.

  K is stored transposed (head_dim before slots), the layout the score matmul
  reads: markedly faster on CPU (TOOLCHAIN.md). Row b continues prefix b // R.
  """

  prefix_k_UxKxDhxP: tuple[jax.Array, ...]  # () when there is no prompt prefix.
  prefix_v_UxKxPxDh: tuple[jax.Array, ...]
  k_BxKxDhxC: tuple[tuple[jax.Array, ...], ...]  # [layer][chunk], chunks in slot order.
  v_BxKxCxDh: tuple[tuple[jax.Array, ...], ...]

  @property
  def chunk_lens(self) -> tuple[int, ...]:
    return tuple(k.shape[-1] for k in self.k_BxKxDhxC[0])

  @property
  def new_len(self) -> int:
    """Generated-token slots per row."""
    return sum(self.chunk_lens)


def chunk_lens(new_len: int) -> tuple[int, ...]:
  """Near-equal chunks of at least `_MIN_CHUNK` slots (one chunk for short caches)."""
  n = max(1, min(_MAX_CHUNKS, new_len // _MIN_CHUNK))
  return tuple(new_len // n + (i < new_len % n) for i in range(n))


def _new_slots(num_layers: int, batch: int, kv_heads: int, head_dim: int, new_len: int, dtype):
  lens, layers = chunk_lens(new_len), range(num_layers)
  zeros = lambda *shape: jnp.zeros(shape, dtype)
  return (tuple(tuple(zeros(batch, kv_heads, head_dim, c) for c in lens) for _ in layers),
          tuple(tuple(zeros(batch, kv_heads, c, head_dim) for c in lens) for _ in layers))


def init_cache(config: ModelConfig, batch: int, new_len: int, dtype=jnp.float32) -> KVCache:
  """A cache with no prompt prefix (every slot generated): tests and prompt-less decoding."""
  return KVCache((), (), *_new_slots(config.num_layers, batch, config.num_kv_heads,
                                     config.head_dim, new_len, dtype))


def from_stacked(prefill: qwen3.KVCache, new_len: int, batch: int) -> KVCache:
  """The decode cache after a prefill of U prompts whose `batch` rows continue them.

  `prefill` is the stacked cache `qwen3.forward` filled; each layer's prefix is
  split off once (a copy), and row b continues prompt b // (batch / U).
  """
  k_all, v_all = prefill
  layers, u, kv_heads, head_dim, _ = k_all.shape
  if batch % u:
    raise ValueError(f"{batch} rows cannot continue {u} prompts equally")
  return KVCache(tuple(k_all[i] for i in range(layers)), tuple(v_all[i] for i in range(layers)),
                 *_new_slots(layers, batch, kv_heads, head_dim, new_len, k_all.dtype))


class DecodeWeights(NamedTuple):
  """The weights `decode_step` reads, laid out for it (`decode_weights`)."""

  layers: tuple[dict[str, Any], ...]  # Per layer, features first (see `decode_weights`).
  head_VxD: jax.Array  # The unembedding, [vocab, hidden]: the tied embedding itself.


def decode_weights(config: ModelConfig, params: qwen3.Params) -> DecodeWeights:
  """Each layer's weights as separate arrays laid out for `decode_step` (a copy, once
  per decode call, outside its loop), in `qwen3.layer`'s features-first layout:
  matrices out-major ([out..., in...]), norm scales and biases with a trailing axis
  of 1 that broadcasts over the batch; and the unembedding as [vocab, hidden].
  """
  def relayout(path, w):
    n_in = params_lib.BY_PATH["layers/" + path].n_in
    if n_in is None:
      return w[..., None]
    return jnp.moveaxis(w, tuple(range(1, 1 + n_in)), tuple(range(w.ndim - n_in, w.ndim)))

  flat = {path: relayout(path, w) for path, w in params_lib.flatten(params["layers"]).items()}
  layers = tuple(params_lib.unflatten({path: w[i] for path, w in flat.items()})
                 for i in range(config.num_layers))
  head_VxD = params["embed"] if config.tie_word_embeddings else params["lm_head"].T
  return DecodeWeights(layers, head_VxD)


def _write(chunk, new, start: int, axis: int, step):
  """`chunk` with `new` (size 1 on `axis`) at generated slot `step` if that slot is in it."""
  local = step - start
  inside = (local >= 0) & (local < chunk.shape[axis])
  at = [0] * chunk.ndim
  at[axis] = jnp.clip(local, 0, chunk.shape[axis] - 1)
  old = jax.lax.dynamic_slice(chunk, at, new.shape)
  return jax.lax.dynamic_update_slice(chunk, jnp.where(inside, new.astype(chunk.dtype), old), at)


def _softmax_parts(scores, mask, v, out_spec: str):
  """(max, sum, unnormalised output) of exp(scores - max) over the last axis of `scores`."""
  scores = jnp.where(mask, scores, _NEG)
  max_ = jnp.max(scores, axis=-1)
  exp = jnp.exp(scores - max_[..., None])
  return max_, jnp.sum(exp, axis=-1), jnp.einsum(out_spec, exp.astype(v.dtype), v,
                                                 preferred_element_type=jnp.float32)


def _attend_chunk(q_BxKxGxDh, k_BxKxDhxC, v_BxKxCxDh, visible_C, scale):
  """(max_BxKxG, sum_BxKxG, out_BxKxGxDh) over one chunk of generated slots."""
  scores_BxKxGxC = jnp.einsum("bkgd,bkdc->bkgc", q_BxKxGxDh, k_BxKxDhxC.astype(q_BxKxGxDh.dtype),
                              preferred_element_type=jnp.float32) * scale
  return _softmax_parts(scores_BxKxGxC, visible_C, v_BxKxCxDh, "bkgc,bkcd->bkgd")


def _empty_chunk(q_BxKxGxDh, *_):
  return (jnp.full(q_BxKxGxDh.shape[:3], _NEG), jnp.zeros(q_BxKxGxDh.shape[:3], jnp.float32),
          jnp.zeros(q_BxKxGxDh.shape, jnp.float32))


def _attend_prefix(q_BxKxGxDh, k_UxKxDhxP, v_UxKxPxDh, mask_UxP, scale):
  """(max_BxKxG, sum_BxKxG, out_BxKxGxDh) over the prompt slots, each prefix read once
  for the R rows that continue it (their queries are one matmul's rows)."""
  b, kv, g, dh = q_BxKxGxDh.shape
  u = k_UxKxDhxP.shape[0]
  r = b // u
  q_UxKxRGxDh = q_BxKxGxDh.reshape(u, r, kv, g, dh).transpose(0, 2, 1, 3, 4).reshape(
      u, kv, r * g, dh)
  scores_UxKxRGxP = jnp.einsum("ukqd,ukdp->ukqp", q_UxKxRGxDh, k_UxKxDhxP.astype(
      q_BxKxGxDh.dtype), preferred_element_type=jnp.float32) * scale
  parts = _softmax_parts(scores_UxKxRGxP, mask_UxP[:, None, None, :], v_UxKxPxDh,
                         "ukqp,ukpd->ukqd")

  def rows_first(x):  # [U, K, R*G, ...] -> [B, K, G, ...]
    x = x.reshape(u, kv, r, g, *x.shape[3:])
    return jnp.moveaxis(x, 2, 1).reshape(b, kv, g, *x.shape[4:])

  return tuple(rows_first(x) for x in parts)


def _attention(q_HxDhxB, k_KxDhxB, v_KxDhxB, prefix, prefix_mask_UxP, ks, vs, step):
  """(out_HxDhxB, (ks, vs)): writes this token's K/V at generated slot `step`, then
  attends over the prompt prefix and the generated chunks."""
  kv, dh, b = k_KxDhxB.shape
  q_BxKxGxDh = q_HxDhxB.reshape(kv, -1, dh, b).transpose(3, 0, 1, 2)
  k_new_BxKxDhx1 = k_KxDhxB.transpose(2, 0, 1)[..., None]
  v_new_BxKx1xDh = v_KxDhxB.transpose(2, 0, 1)[:, :, None, :]
  scale = 1 / math.sqrt(dh)
  parts = [_attend_prefix(q_BxKxGxDh, *prefix, prefix_mask_UxP, scale)] if prefix else []
  new_ks, new_vs, start = [], [], 0
  for k_c, v_c in zip(ks, vs):
    k_c = _write(k_c, k_new_BxKxDhx1, start, 3, step)
    v_c = _write(v_c, v_new_BxKx1xDh, start, 2, step)
    visible_C = start + jnp.arange(k_c.shape[-1]) <= step
    if start == 0:  # Holds the first generated token: always read.
      parts.append(_attend_chunk(q_BxKxGxDh, k_c, v_c, visible_C, scale))
    else:  # Not reached yet: skipped, and weighs nothing in the merge below.
      parts.append(jax.lax.cond(start <= step, _attend_chunk, _empty_chunk, q_BxKxGxDh,
                                k_c, v_c, visible_C, scale))
    new_ks.append(k_c)
    new_vs.append(v_c)
    start += k_c.shape[-1]
  # Softmax over the prefix and all chunks from each part's (max, sum, unnormalised output).
  max_BxKxG = functools.reduce(jnp.maximum, [m for m, _, _ in parts])
  weights = [jnp.exp(m - max_BxKxG) for m, _, _ in parts]
  denom_BxKxG = sum(w * s for w, (_, s, _) in zip(weights, parts))
  out_BxKxGxDh = sum(w[..., None] * o for w, (_, _, o) in zip(weights, parts))
  out_BxKxGxDh = out_BxKxGxDh / denom_BxKxG[..., None]
  # Through a 2-D transpose, which the o_proj matmul reads in place (a 3-D one is copied).
  out_HxDhxB = out_BxKxGxDh.reshape(b, -1).T.reshape(-1, dh, b)
  return out_HxDhxB, (tuple(new_ks), tuple(new_vs))


def decode_step(config: ModelConfig, params: qwen3.Params, tokens_Bx1, positions_Bx1,
                prefix_mask_UxP, cache: KVCache, step, weights: DecodeWeights | None = None):
  """One token per row into generated slot `step` (0-based); returns (logits_VxB, cache),
  the float32 next-token logits laid out [vocab, batch].

  Row b attends to its prompt prefix (b // R) where `prefix_mask_UxP` is true
  (false on left padding; ignored without a prefix) and to its generated slots
  0..step. In a loop, pass `weights=decode_weights(config, params)` computed before
  the loop; `params["layers"]` and the LM head are then not read.
  """
  weights = decode_weights(config, params) if weights is None else weights
  x_DxB = jnp.take(params["embed"], tokens_Bx1[:, 0], axis=0).T
  sin_Bx1xDh, cos_Bx1xDh = qwen3.rope_tables(config, positions_Bx1)
  sin_DhxB, cos_DhxB = sin_Bx1xDh[:, 0].T, cos_Bx1xDh[:, 0].T
  ks, vs = list(cache.k_BxKxDhxC), list(cache.v_BxKxCxDh)
  prefixes = (list(zip(cache.prefix_k_UxKxDhxP, cache.prefix_v_UxKxPxDh))
              or [()] * config.num_layers)
  for i, w in enumerate(weights.layers):
    attend = functools.partial(_attention, prefix=prefixes[i],
                               prefix_mask_UxP=prefix_mask_UxP, ks=ks[i], vs=vs[i], step=step)
    x_DxB, (ks[i], vs[i]) = qwen3.layer(config, w, x_DxB, sin_DhxB, cos_DhxB, attend,
                                        features_last=False)
  return (logits(config, params, weights, x_DxB),
          cache._replace(k_BxKxDhxC=tuple(ks), v_BxKxCxDh=tuple(vs)))


def logits(config: ModelConfig, params: qwen3.Params, weights: DecodeWeights, x_DxB):
  """Float32 next-token logits [vocab, batch] from the last layer's output [hidden, batch]:
  the final norm, then the LM head."""
  hidden_DxB = qwen3.rms_norm(x_DxB, params["final_norm"]["scale"][:, None],
                              config.rms_norm_eps, axis=0)
  return jnp.dot(weights.head_VxD, hidden_DxB, preferred_element_type=jnp.float32)
