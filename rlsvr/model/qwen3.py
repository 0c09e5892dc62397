"""Qwen3 (and Llama / Qwen2) decoder: pure functions over a params pytree, with a KV cache.

The params are a nested dict of arrays named by `rlsvr.model.params.TABLE`, so
weights are always arguments of jitted functions and never constants baked into
a compiled program:

  apply(config, params, tokens_BxT, attention_mask_BxT) -> logits_BxTxV
  forward(config, params, tokens_BxT, positions_BxT, kv_mask_BxS, cache, cache_index)
      -> (hidden_BxTxD, cache)            # prefill (and any chunk) with a cache
  forward_shared_prompts(config, params, prompts, prompt_index_B, completions)
      -> (last_prompt_hidden_UxD, hidden_BxCxD)   # training rows that share prompts
  forward(..., segments=Segments(...))            # training rows packed end to end
  unembed(config, params, hidden_BxTxD) -> logits (float32)
  layer(config, w, x, sin, cos, attend, features_last) -> (x, carry)

`layer` is the math of one decoder layer, for `forward` and for the one-token
step of decode loops (`rlsvr.model.decode`, laid out differently for speed).

Layers are stacked along a leading axis and run under `lax.scan`, so compile
time does not grow with depth. Attention keeps GQA KV heads un-repeated: queries
are grouped as (kv_head, group) and contracted against the shared K/V.

Shape suffixes: B batch, T query tokens, S key slots (cache length), D hidden,
H query heads, K KV heads, G = H/K groups, Dh head_dim, F MLP hidden, V vocab,
L layers.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlsvr.model import attention, lora
from rlsvr.model import params as params_lib
from rlsvr.model.config import ModelConfig

Params = dict[str, Any]


class KVCache(NamedTuple):
  """Preallocated keys and values of every layer, stacked (what the layer scan carries).

  K is stored transposed (head_dim before slots), like `decode.KVCache`, which
  a prefill's cache becomes (`decode.from_stacked`): the decode step's score
  matmul reads it in its natural layout, markedly faster on CPU (TOOLCHAIN.md).
  """

  k_LxBxKxDhxS: jax.Array
  v_LxBxKxSxDh: jax.Array

  @property
  def max_len(self) -> int:
    return self.k_LxBxKxDhxS.shape[-1]


def init_cache(config: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> KVCache:
  l, k, dh = config.num_layers, config.num_kv_heads, config.head_dim
  return KVCache(jnp.zeros((l, batch, k, dh, max_len), dtype),
                 jnp.zeros((l, batch, k, max_len, dh), dtype))


# ----------------------------------------------------------------------------- layers


def rms_norm(x, scale, eps: float, axis: int = -1):
  """RMSNorm as HF computes it: normalise over `axis` in fp32, cast back, then scale
  (`scale` broadcast against x; the decode step's features come first)."""
  x32 = x.astype(jnp.float32)
  y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axis, keepdims=True) + eps)
  return scale * y.astype(x.dtype)


def rope_inv_freq(config: ModelConfig) -> jax.Array:
  """Inverse RoPE frequencies (Dh/2,), with Llama-3 / linear scaling when configured."""
  dh = config.head_dim
  inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, dh, 2, dtype=jnp.float32) / dh))
  scaling = dict(config.rope_scaling)
  if config.rope_type == "linear":
    inv_freq = inv_freq / scaling["factor"]
  elif config.rope_type == "llama3":
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    inv_freq = jnp.where(is_medium, smoothed, scaled)
  return inv_freq


def rope_tables(config: ModelConfig, positions_BxT):
  """(sin, cos) of shape (B, T, Dh), float32, for rotate-half RoPE."""
  freqs_BxTxF = positions_BxT.astype(jnp.float32)[..., None] * rope_inv_freq(config)
  emb = jnp.concatenate([freqs_BxTxF, freqs_BxTxF], axis=-1)
  return jnp.sin(emb), jnp.cos(emb)


def rotate(x, sin, cos, axis: int = -1):
  """Rotate-half RoPE along `axis` (head_dim) of x; `sin`/`cos` broadcast against x."""
  x32 = x.astype(jnp.float32)
  first, second = jnp.split(x32, 2, axis=axis)
  rotated = jnp.concatenate([-second, first], axis=axis)
  return (x32 * cos + rotated * sin).astype(x.dtype)


def layer(config: ModelConfig, w: Params, x, sin, cos, attend: Callable, *,
          features_last: bool = True):
  """One pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(x)); (x, carry).

  The math of both `forward` and the decode step, in either layout of the activations
  and of `w` (one layer's weights under the table's "layers/" paths):

    features_last  x_BxTxD, q_BxTxHxDh; weights as stored, [in..., out...]
    features first x_DxB, q_HxDhxB; matrices out-major, [out..., in...], and vectors
                   with a trailing batch axis of 1 (`decode.decode_weights`)

  `sin`/`cos` broadcast against q and k along their head_dim axis. `attend(q, k, v)
  -> (out like q, carry)` attends over whatever cache the caller keeps. LoRA adapters
  beside a weight (`rlsvr.model.lora.attach`) are applied in the features-last layout.
  """
  axis = -1 if features_last else -2
  attn, mlp = w["attn"], w["mlp"]

  def dense(x, part, name: str, n_in: int = 1):
    kernel = part[f"{name}_proj"]
    if features_last:
      # One 2-D matmul over all positions: its weight gradient then contracts a single
      # dimension. Contracting (B, T) made XLA:CPU write a transposed copy of the MLP's
      # activations for every layer's backward, slowing the update (bench/train_step.py).
      k_in = math.prod(kernel.shape[:n_in])
      x_NxI = x.reshape(-1, k_in)
      y = jnp.dot(x_NxI, kernel.reshape(k_in, -1))
      lora_a = part.get(f"{name}_lora_a")
      if lora_a is not None:  # Training a LoRA run: B comes scaled (`rlsvr.model.lora`).
        rank = lora_a.shape[-1]
        h_NxI = lora.dropout(x_NxI, part, name) if "lora_keep" in part else x_NxI
        y = y + jnp.dot(jnp.dot(h_NxI, lora_a.reshape(k_in, rank)),
                        part[f"{name}_lora_b"].reshape(rank, -1))
      y = y.reshape(*x.shape[:x.ndim - n_in], *kernel.shape[n_in:])
    else:  # The decode step reads merged weights (`lora.merge`): no adapters here.
      y = jnp.tensordot(kernel, x, n_in)
    bias = part.get(f"{name}_bias")
    return y if bias is None else y + bias

  def norm(x, part):
    return rms_norm(x, part["scale"], config.rms_norm_eps, axis)

  h = norm(x, w["input_norm"])
  q, k, v = dense(h, attn, "q"), dense(h, attn, "k"), dense(h, attn, "v")
  if config.qk_norm:
    q, k = norm(q, attn["q_norm"]), norm(k, attn["k_norm"])
  out, carry = attend(rotate(q, sin, cos, axis), rotate(k, sin, cos, axis), v)
  x = x + dense(out.astype(x.dtype), attn, "o", n_in=2)  # Contracts heads and head_dim.
  h = norm(x, w["post_attn_norm"])
  return x + dense(jax.nn.silu(dense(h, mlp, "gate")) * dense(h, mlp, "up"), mlp, "down"), carry


# --------------------------------------------------------------------- functional API


def init_params(config: ModelConfig, key: jax.Array, dtype=jnp.float32) -> Params:
  """Random weights (tests, benchmarks, "random:" sources) as a nested dict of arrays:
  N(0, 1/fan_in) matrices, N(0, 0.02^2) embeddings, zero biases, unit norm scales.

  Keys: `fold_in(key, 0)` for the embeddings, 2 for the LM head, and the j-th matrix
  of layer i (table order) `fold_in(split(fold_in(key, 1), L)[i], j)`: the streams of
  the Flax modules this code replaced, so a seed keeps its weights.
  """
  layer_keys = jax.random.split(jax.random.fold_in(key, 1), config.num_layers)
  flat, matrices = {}, 0  # Layer matrices drawn so far: the next one's key index.
  for path, p in params_lib.present(config).items():
    shape = params_lib.shape_of(p, config)
    if path == "embed":
      flat[path] = jax.random.normal(jax.random.fold_in(key, 0), shape, dtype) * 0.02
    elif p.n_in is None:
      flat[path] = (jnp.ones if path.endswith("scale") else jnp.zeros)(shape, dtype)
    elif p.per_layer:
      normal = lambda k, j=matrices, shape=shape: jax.random.normal(jax.random.fold_in(k, j),
                                                                    shape[1:], dtype)
      flat[path] = jax.vmap(normal)(layer_keys) / math.sqrt(math.prod(shape[1:1 + p.n_in]))
      matrices += 1
    else:  # The LM head.
      flat[path] = (jax.random.normal(jax.random.fold_in(key, 2), shape, dtype)
                    / math.sqrt(math.prod(shape[:p.n_in])))
  return params_lib.unflatten(flat)


def abstract_params(config: ModelConfig, dtype=jnp.float32) -> Params:
  """`jax.ShapeDtypeStruct` leaves with the structure of `init_params`."""
  return params_lib.unflatten({path: jax.ShapeDtypeStruct(params_lib.shape_of(p, config), dtype)
                               for path, p in params_lib.present(config).items()})


def positions_from_mask(attention_mask_BxT):
  """Left padding: each real token's position counts only the real tokens before it."""
  return jnp.maximum(jnp.cumsum(attention_mask_BxT.astype(jnp.int32), axis=-1) - 1, 0)


def forward(config: ModelConfig, params: Params, tokens_BxT, positions_BxT, kv_mask_BxS,
            cache: KVCache | None = None, cache_index=0, *, remat: bool = False,
            segments: attention.Segments | None = None):
  """Final-norm hidden states of a chunk of tokens, writing its K/V into `cache`.

  With a cache, the chunk occupies slots [cache_index, cache_index + T); a query
  at slot s attends to the slots s' <= s whose `kv_mask_BxS` is true (mask out
  left padding there). Without a cache, S == T and the chunk attends to itself.
  `remat=True` recomputes each layer in the backward pass (training memory).
  Attention runs in query blocks (`attention.attend`): no T x S mask or score
  matrix of the whole chunk is ever materialised. `segments` (no cache): each row
  holds packed sequences, which see only themselves (`attention.Segments`).
  Returns (hidden_BxTxD, cache).
  """
  if segments is not None and cache is not None:
    raise ValueError("packed segments attend within the chunk: no cache")
  x_BxTxD = jnp.take(params["embed"], tokens_BxT, axis=0)
  sin_BxTxDh, cos_BxTxDh = rope_tables(config, positions_BxT)
  query_slot_T = cache_index + jnp.arange(tokens_BxT.shape[1])

  # The cache rides in the scan carry so that each layer's in-place write of its
  # new slots stays in place; scanning it as xs/ys would copy it every call.
  def body(carry, xs):
    x_BxTxD, cache = carry
    w, i = xs

    def attend(q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh):
      k_new_BxKxDhxT = k_BxTxKxDh.transpose(0, 2, 3, 1)
      v_new_BxKxTxDh = v_BxTxKxDh.transpose(0, 2, 1, 3)
      if cache is None:  # Plain forward: the keys are this chunk.
        k_BxKxDhxS, v_BxKxSxDh, new_cache = k_new_BxKxDhxT, v_new_BxKxTxDh, None
      else:
        # Write only the T new slots of this layer, in place, then read the layer back.
        k_all, v_all = cache
        k_all = jax.lax.dynamic_update_slice(
            k_all, k_new_BxKxDhxT[None].astype(k_all.dtype), (i, 0, 0, 0, cache_index))
        v_all = jax.lax.dynamic_update_slice(
            v_all, v_new_BxKxTxDh[None].astype(v_all.dtype), (i, 0, 0, cache_index, 0))
        new_cache, k_BxKxDhxS, v_BxKxSxDh = KVCache(k_all, v_all), k_all[i], v_all[i]
      out_BxTxHxDh = attention.attend(q_BxTxHxDh, k_BxKxDhxS, v_BxKxSxDh, kv_mask_BxS,
                                      query_slot_T, segments=segments)
      return out_BxTxHxDh, new_cache

    # Broadcast over heads here, inside the layer, where it fuses into the rotation.
    sin_BxTx1xDh, cos_BxTx1xDh = sin_BxTxDh[:, :, None], cos_BxTxDh[:, :, None]
    return layer(config, w, x_BxTxD, sin_BxTx1xDh, cos_BxTx1xDh, attend), None

  if remat:
    # Keep only each layer's input for the backward pass and recompute the rest:
    # activation memory then grows with layers x B x T x D, not with the attention
    # scores and MLP hidden units of every layer.
    body = jax.checkpoint(body, prevent_cse=False)
  layer_ids = jnp.arange(config.num_layers)
  (x_BxTxD, cache), _ = jax.lax.scan(body, (x_BxTxD, cache), (params["layers"], layer_ids))
  return rms_norm(x_BxTxD, params["final_norm"]["scale"], config.rms_norm_eps), cache


def forward_shared_prompts(config: ModelConfig, params: Params, prompt_tokens_UxP, prompt_mask_UxP,
                           prompt_index_B, tokens_BxC, mask_BxC, *, remat: bool = False):
  """Final-norm hidden states of completions whose rows share prompts; each prompt runs once.

  Row b is prompt `prompt_index_B[b]` (left-padded, U x P) followed by its completion
  (right-padded, B x C), and gets what `forward` of that concatenated row would give at
  its completion positions: the completion attends to its prompt's keys and values, which
  every row of the prompt reads (and, in the backward pass, sums its gradient into). A GRPO
  group's G samples thus cost one prompt forward instead of G. Returns
  (last_prompt_hidden_UxD, hidden_BxCxD); the first is what predicts a completion's first token.
  """
  p, c = prompt_tokens_UxP.shape[1], tokens_BxC.shape[1]
  embed = lambda tokens: jnp.take(params["embed"], tokens, axis=0)
  n_prompt_B = prompt_mask_UxP.astype(jnp.int32).sum(-1)[prompt_index_B]
  completion_positions_BxC = jnp.maximum(
      n_prompt_B[:, None] + jnp.cumsum(mask_BxC.astype(jnp.int32), axis=-1) - 1, 0)
  sin_p, cos_p = (t[:, :, None] for t in rope_tables(config, positions_from_mask(prompt_mask_UxP)))
  sin_c, cos_c = (t[:, :, None] for t in rope_tables(config, completion_positions_BxC))
  # Slots as in the concatenated row: the prompt at 0..P-1, the completion at P..P+C-1.
  kv_valid_BxS = jnp.concatenate([prompt_mask_UxP[prompt_index_B], mask_BxC], axis=1)

  def body(carry, w):
    xp_UxPxD, xc_BxCxD = carry

    def attend_prompt(q_UxPxHxDh, k_UxPxKxDh, v_UxPxKxDh):
      k_UxKxDhxP, v_UxKxPxDh = k_UxPxKxDh.transpose(0, 2, 3, 1), v_UxPxKxDh.transpose(0, 2, 1, 3)
      out = attention.attend(q_UxPxHxDh, k_UxKxDhxP, v_UxKxPxDh, prompt_mask_UxP, jnp.arange(p))
      return out, (k_UxKxDhxP, v_UxKxPxDh)

    xp_UxPxD, (k_UxKxDhxP, v_UxKxPxDh) = layer(config, w, xp_UxPxD, sin_p, cos_p, attend_prompt)

    def attend_completion(q_BxCxHxDh, k_BxCxKxDh, v_BxCxKxDh):
      k_BxKxDhxS = jnp.concatenate([k_UxKxDhxP[prompt_index_B],
                                    k_BxCxKxDh.transpose(0, 2, 3, 1)], axis=-1)
      v_BxKxSxDh = jnp.concatenate([v_UxKxPxDh[prompt_index_B],
                                    v_BxCxKxDh.transpose(0, 2, 1, 3)], axis=-2)
      return attention.attend(q_BxCxHxDh, k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS,
                              p + jnp.arange(c)), None

    xc_BxCxD, _ = layer(config, w, xc_BxCxD, sin_c, cos_c, attend_completion)
    return (xp_UxPxD, xc_BxCxD), None

  if remat:  # As in `forward`.
    body = jax.checkpoint(body, prevent_cse=False)
  (xp_UxPxD, xc_BxCxD), _ = jax.lax.scan(body, (embed(prompt_tokens_UxP), embed(tokens_BxC)),
                                         params["layers"])
  norm = lambda x: rms_norm(x, params["final_norm"]["scale"], config.rms_norm_eps)
  return norm(xp_UxPxD[:, -1]), norm(xc_BxCxD)


def unembed(config: ModelConfig, params: Params, hidden_BxTxD):
  """Float32 logits from final-norm hidden states."""
  kernel_DxV = params["embed"].T if config.tie_word_embeddings else params["lm_head"]
  return jnp.einsum("btd,dv->btv", hidden_BxTxD, kernel_DxV, preferred_element_type=jnp.float32)


def apply(config: ModelConfig, params: Params, tokens_BxT, attention_mask_BxT=None):
  """Float32 logits for a (left-)padded batch; positions count only real tokens."""
  if attention_mask_BxT is None:
    attention_mask_BxT = jnp.ones(tokens_BxT.shape, jnp.int32)
  positions_BxT = positions_from_mask(attention_mask_BxT)
  hidden_BxTxD, _ = forward(config, params, tokens_BxT, positions_BxT, attention_mask_BxT)
  return unembed(config, params, hidden_BxTxD)
