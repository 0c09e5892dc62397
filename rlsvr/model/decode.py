"""The one-token decode step of the `qwen3` decoder, laid out for fast decode loops.

  init_cache(config, batch, max_len) -> KVCache     # per layer, per chunk of slots
  from_stacked(qwen3_cache, max_len, rows_B) -> KVCache  # after a (scanned) `qwen3.forward` prefill
  unstack_layers(params) -> layers                   # once, outside the decode loop
  decode_step(config, params, tokens_Bx1, positions_Bx1, kv_mask_BxS, cache, cache_index,
              layers=None) -> (hidden_Bx1xD, cache)

Same math and contract as `qwen3.forward` with T == 1, structured for CPU
decode loops, where a step is dominated by moving weights and cache around:

- The layers are unrolled in Python over per-layer weights instead of scanned
  over stacked [L, ...] arrays. Inside a loop, XLA:CPU materialises every
  layer slice of a stacked array as a copy before its matmul (a profile of
  SmolLM2-135M at batch 8 had those copies at 40% of a step). `unstack_layers`
  pays that copy once per decode call: the loop then reads the weights in place.
- The cache is a separate array per layer and per chunk of slots: each layer
  writes its new slot in place in its own (donated, loop-carried) buffer and
  reads the cache without a copy (a stacked cache is sliced, i.e. copied, per layer).
- Chunks of slots after `cache_index` are skipped (`lax.cond`), and the chunks'
  softmaxes are merged as in flash attention: reading the cache is the largest
  cost of a step at batch 128, and early in generation most slots are empty.

Compile time grows with depth, unlike the scanned forward (prefill keeps the scan).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig

Layers = tuple[dict[str, Any], ...]
_MAX_CHUNKS = 4  # More chunks skip more empty slots but add per-chunk ops to every layer.
_MIN_CHUNK = 32


class KVCache(NamedTuple):
  """Preallocated keys and values: [layer][chunk] arrays, chunks in slot order.

  K is stored transposed (head_dim before slots), the layout the score matmul
  reads: markedly faster on CPU (TOOLCHAIN.md).
  """

  k_BxKxDhxC: tuple[tuple[jax.Array, ...], ...]
  v_BxKxCxDh: tuple[tuple[jax.Array, ...], ...]

  @property
  def chunk_lens(self) -> tuple[int, ...]:
    return tuple(k.shape[-1] for k in self.k_BxKxDhxC[0])

  @property
  def max_len(self) -> int:
    return sum(self.chunk_lens)


def chunk_lens(max_len: int) -> tuple[int, ...]:
  """Near-equal chunks of at least `_MIN_CHUNK` slots (one chunk for short caches)."""
  n = max(1, min(_MAX_CHUNKS, max_len // _MIN_CHUNK))
  return tuple(max_len // n + (i < max_len % n) for i in range(n))


def init_cache(config: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> KVCache:
  k, dh, layers = config.num_kv_heads, config.head_dim, range(config.num_layers)
  lens = chunk_lens(max_len)
  return KVCache(tuple(tuple(jnp.zeros((batch, k, dh, c), dtype) for c in lens) for _ in layers),
                 tuple(tuple(jnp.zeros((batch, k, c, dh), dtype) for c in lens) for _ in layers))


def from_stacked(cache: qwen3.KVCache, max_len: int | None = None, rows_B=None) -> KVCache:
  """The chunked per-layer form of a cache that `qwen3.forward` filled (a copy).

  `max_len` (default: the stacked cache's length) may exceed it: a prefill only
  needs slots for the prompt, and the decode slots after it start as zeros.
  `rows_B` picks (and may repeat) rows: prompts shared by several rows are
  prefilled once and copied here.
  """
  k_all, v_all = cache
  filled = cache.max_len
  max_len = filled if max_len is None else max_len
  if max_len < filled:
    raise ValueError(f"max_len={max_len} is shorter than the filled cache ({filled} slots)")
  if rows_B is not None:
    k_all, v_all = jnp.take(k_all, rows_B, axis=1), jnp.take(v_all, rows_B, axis=1)
  starts = [0]
  for c in chunk_lens(max_len):
    starts.append(starts[-1] + c)

  def chunk(x, axis: int, a: int, b: int):
    part = jax.lax.slice_in_dim(x, min(a, filled), min(b, filled), axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, (b - a) - part.shape[axis])
    return jnp.pad(part, pad)

  spans = list(zip(starts[:-1], starts[1:]))
  return KVCache(tuple(tuple(chunk(k, 3, a, b) for a, b in spans) for k in k_all),
                 tuple(tuple(chunk(v, 2, a, b) for a, b in spans) for v in v_all))


def unstack_layers(params: qwen3.Params) -> Layers:
  """Each layer's weights as separate arrays (a copy): compute it outside the decode loop."""
  num_layers = jax.tree.leaves(params["layers"])[0].shape[0]
  return tuple(jax.tree.map(lambda a, i=i: a[i], params["layers"]) for i in range(num_layers))


def _write(chunk, new, start: int, axis: int, cache_index):
  """`chunk` with `new` (size 1 on `axis`) at slot `cache_index` if that slot is in it."""
  local = cache_index - start
  inside = (local >= 0) & (local < chunk.shape[axis])
  at = [0] * chunk.ndim
  at[axis] = jnp.clip(local, 0, chunk.shape[axis] - 1)
  old = jax.lax.dynamic_slice(chunk, at, new.shape)
  return jax.lax.dynamic_update_slice(chunk, jnp.where(inside, new.astype(chunk.dtype), old), at)


def _attend_chunk(q_BxKxGxDh, k_BxKxDhxC, v_BxKxCxDh, mask_BxC, scale):
  """(max_BxKxG, sum_BxKxG, out_BxKxGxDh) of exp(scores - max) over one chunk of slots."""
  scores_BxKxGxC = jnp.einsum("bkgd,bkdc->bkgc", q_BxKxGxDh, k_BxKxDhxC.astype(q_BxKxGxDh.dtype),
                              preferred_element_type=jnp.float32) * scale
  scores_BxKxGxC = jnp.where(mask_BxC[:, None, None], scores_BxKxGxC, jnp.finfo(jnp.float32).min)
  max_BxKxG = jnp.max(scores_BxKxGxC, axis=-1)
  exp_BxKxGxC = jnp.exp(scores_BxKxGxC - max_BxKxG[..., None])
  out_BxKxGxDh = jnp.einsum("bkgc,bkcd->bkgd", exp_BxKxGxC.astype(v_BxKxCxDh.dtype), v_BxKxCxDh,
                            preferred_element_type=jnp.float32)
  return max_BxKxG, jnp.sum(exp_BxKxGxC, axis=-1), out_BxKxGxDh


def _empty_chunk(q_BxKxGxDh, *_):
  return (jnp.full(q_BxKxGxDh.shape[:3], jnp.finfo(jnp.float32).min),
          jnp.zeros(q_BxKxGxDh.shape[:3], jnp.float32), jnp.zeros(q_BxKxGxDh.shape, jnp.float32))


def _attention(attn: qwen3.Attention, x_Bx1xD, sin, cos, mask_BxS, ks, vs, cache_index):
  """(y_Bx1xD, ks, vs): writes this token's K/V at `cache_index`, then attends over the chunks."""
  cfg = attn.config
  q_Bx1xHxDh, k_Bx1xKxDh, v_Bx1xKxDh = attn.qkv(x_Bx1xD, sin, cos)
  b = x_Bx1xD.shape[0]
  q_BxKxGxDh = q_Bx1xHxDh.reshape(b, cfg.num_kv_heads, cfg.num_groups, cfg.head_dim)
  k_new_BxKxDhx1 = k_Bx1xKxDh.transpose(0, 2, 3, 1)
  v_new_BxKx1xDh = v_Bx1xKxDh.transpose(0, 2, 1, 3)
  scale = 1 / math.sqrt(cfg.head_dim)
  parts, new_ks, new_vs, start = [], [], [], 0
  for k_c, v_c in zip(ks, vs):
    k_c = _write(k_c, k_new_BxKxDhx1, start, 3, cache_index)
    v_c = _write(v_c, v_new_BxKx1xDh, start, 2, cache_index)
    mask_BxC = mask_BxS[:, start:start + k_c.shape[-1]]
    if start == 0:  # Holds the prompt: always read.
      parts.append(_attend_chunk(q_BxKxGxDh, k_c, v_c, mask_BxC, scale))
    else:  # Not reached yet: skipped, and weighs nothing in the merge below.
      parts.append(jax.lax.cond(start <= cache_index, _attend_chunk, _empty_chunk, q_BxKxGxDh,
                                k_c, v_c, mask_BxC, scale))
    new_ks.append(k_c)
    new_vs.append(v_c)
    start += k_c.shape[-1]
  # Softmax over all chunks from each chunk's (max, sum, unnormalised output).
  max_BxKxG = functools.reduce(jnp.maximum, [m for m, _, _ in parts])
  weights = [jnp.exp(m - max_BxKxG) for m, _, _ in parts]
  denom_BxKxG = sum(w * s for w, (_, s, _) in zip(weights, parts))
  out_BxKxGxDh = sum(w[..., None] * o for w, (_, _, o) in zip(weights, parts))
  out_BxKxGxDh = out_BxKxGxDh / denom_BxKxG[..., None]
  out_Bx1xHxDh = out_BxKxGxDh.reshape(b, 1, cfg.num_heads, cfg.head_dim)
  return attn.output(out_Bx1xHxDh, x_Bx1xD.dtype), tuple(new_ks), tuple(new_vs)


def decode_step(config: ModelConfig, params: qwen3.Params, tokens_Bx1, positions_Bx1, kv_mask_BxS,
                cache: KVCache, cache_index, layers: Layers | None = None):
  """`qwen3.forward` of one token per row into slot `cache_index` of `cache` (same contract).

  In a loop, pass `layers=unstack_layers(params)` computed before the loop;
  `params["layers"]` is then not read.
  """
  model = qwen3.module(config, params)
  layers = unstack_layers(params) if layers is None else layers
  layer_def = nnx.graphdef(model.layers)
  mask_BxS = kv_mask_BxS.astype(bool) & (jnp.arange(cache.max_len) <= cache_index)[None]
  x_Bx1xD = jnp.take(model.embed[...], tokens_Bx1, axis=0)
  sin, cos = qwen3.rope_tables(config, positions_Bx1)
  ks, vs = list(cache.k_BxKxDhxC), list(cache.v_BxKxCxDh)
  for i, layer in enumerate(layers):
    block = nnx.merge(layer_def, layer)
    h_Bx1xD, ks[i], vs[i] = _attention(block.attn, block.input_norm(x_Bx1xD), sin, cos, mask_BxS,
                                       ks[i], vs[i], cache_index)
    x_Bx1xD = x_Bx1xD + h_Bx1xD
    x_Bx1xD = x_Bx1xD + block.mlp(block.post_attn_norm(x_Bx1xD))
  return model.final_norm(x_Bx1xD), KVCache(tuple(ks), tuple(vs))
