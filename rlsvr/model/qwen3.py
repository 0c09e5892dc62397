"""Qwen3 (and Llama / Qwen2) decoder in Flax NNX, with a KV-cache forward.

The modules define the math; the public entry points are pure functions over
a params pytree (a nested dict of arrays), so weights are always arguments of
jitted functions and never constants baked into a compiled program:

  apply(config, params, tokens_BxT, attention_mask_BxT) -> logits_BxTxV
  forward(config, params, tokens_BxT, positions_BxT, kv_mask_BxS, cache, cache_index)
      -> (hidden_BxTxD, cache)            # prefill (and any chunk) with a cache
  unembed(config, params, hidden_BxTxD) -> logits (float32)

The one-token step of decode loops lives in `rlsvr.model.decode` (same math,
laid out differently for speed).

Layers are stacked along a leading axis and run under `lax.scan`, so compile
time does not grow with depth. Attention keeps GQA KV heads un-repeated: queries
are grouped as (kv_head, group) and contracted against the shared K/V.

Shape suffixes: B batch, T query tokens, S key slots (cache length), D hidden,
H query heads, K KV heads, G = H/K groups, Dh head_dim, F MLP hidden, V vocab,
L layers.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlsvr.model import attention
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


def _normal(rngs: nnx.Rngs, shape, dtype, fan_in: int):
  return jax.random.normal(rngs.params(), shape, dtype) / math.sqrt(fan_in)


def rms_norm(x, scale, eps: float, axis: int = -1):
  """RMSNorm as HF computes it: normalise over `axis` in fp32, cast back, then scale
  (`scale` broadcast against x; the decode step's features come first)."""
  x32 = x.astype(jnp.float32)
  y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axis, keepdims=True) + eps)
  return scale * y.astype(x.dtype)


class RMSNorm(nnx.Module):
  """`rms_norm` over the last axis, with a learned scale."""

  def __init__(self, dim: int, eps: float, dtype):
    self.scale = nnx.Param(jnp.ones((dim,), dtype))
    self.eps = eps

  def __call__(self, x):
    return rms_norm(x, self.scale[...], self.eps)


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


def apply_rope(x_BxTxNxDh, sin_BxTxDh, cos_BxTxDh):
  return rotate(x_BxTxNxDh, sin_BxTxDh[:, :, None, :], cos_BxTxDh[:, :, None, :])


class Attention(nnx.Module):
  """Grouped-query attention with optional QK-norm and biases."""

  def __init__(self, config: ModelConfig, dtype, rngs: nnx.Rngs):
    d, h, k, dh = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
    self.config = config
    self.q_proj = nnx.Param(_normal(rngs, (d, h, dh), dtype, d))
    self.k_proj = nnx.Param(_normal(rngs, (d, k, dh), dtype, d))
    self.v_proj = nnx.Param(_normal(rngs, (d, k, dh), dtype, d))
    self.o_proj = nnx.Param(_normal(rngs, (h, dh, d), dtype, h * dh))
    if config.qkv_bias:
      self.q_bias = nnx.Param(jnp.zeros((h, dh), dtype))
      self.k_bias = nnx.Param(jnp.zeros((k, dh), dtype))
      self.v_bias = nnx.Param(jnp.zeros((k, dh), dtype))
    if config.o_bias:
      self.o_bias = nnx.Param(jnp.zeros((d,), dtype))
    if config.qk_norm:
      self.q_norm = RMSNorm(dh, config.rms_norm_eps, dtype)
      self.k_norm = RMSNorm(dh, config.rms_norm_eps, dtype)

  def qkv(self, x_BxTxD, sin, cos):
    """Projected queries, keys and values, with biases, QK-norm and RoPE applied."""
    cfg = self.config
    q_BxTxHxDh = jnp.einsum("btd,dhk->bthk", x_BxTxD, self.q_proj[...])
    k_BxTxKxDh = jnp.einsum("btd,dhk->bthk", x_BxTxD, self.k_proj[...])
    v_BxTxKxDh = jnp.einsum("btd,dhk->bthk", x_BxTxD, self.v_proj[...])
    if cfg.qkv_bias:
      q_BxTxHxDh += self.q_bias[...]
      k_BxTxKxDh += self.k_bias[...]
      v_BxTxKxDh += self.v_bias[...]
    if cfg.qk_norm:
      q_BxTxHxDh = self.q_norm(q_BxTxHxDh)
      k_BxTxKxDh = self.k_norm(k_BxTxKxDh)
    return apply_rope(q_BxTxHxDh, sin, cos), apply_rope(k_BxTxKxDh, sin, cos), v_BxTxKxDh

  def output(self, out_BxTxHxDh, dtype):
    y_BxTxD = jnp.einsum("bthk,hkd->btd", out_BxTxHxDh.astype(dtype), self.o_proj[...])
    if self.config.o_bias:
      y_BxTxD += self.o_bias[...]
    return y_BxTxD

  def __call__(self, x_BxTxD, sin, cos, kv_valid_BxS, cache: KVCache | None, layer, cache_index):
    """Returns (y_BxTxD, cache); with a cache, writes this chunk's K/V of `layer` first."""
    q_BxTxHxDh, k_BxTxKxDh, v_BxTxKxDh = self.qkv(x_BxTxD, sin, cos)

    k_new_BxKxDhxT = k_BxTxKxDh.transpose(0, 2, 3, 1)
    v_new_BxKxTxDh = v_BxTxKxDh.transpose(0, 2, 1, 3)
    if cache is None:  # Plain forward: the keys are this chunk.
      k_BxKxDhxS, v_BxKxSxDh = k_new_BxKxDhxT, v_new_BxKxTxDh
    else:
      # Write only the T new slots of this layer, in place, then read the layer back.
      k_all, v_all = cache
      k_all = jax.lax.dynamic_update_slice(
          k_all, k_new_BxKxDhxT[None].astype(k_all.dtype), (layer, 0, 0, 0, cache_index))
      v_all = jax.lax.dynamic_update_slice(
          v_all, v_new_BxKxTxDh[None].astype(v_all.dtype), (layer, 0, 0, cache_index, 0))
      cache = KVCache(k_all, v_all)
      k_BxKxDhxS, v_BxKxSxDh = k_all[layer], v_all[layer]

    out_BxTxHxDh = attention.attend(q_BxTxHxDh, k_BxKxDhxS, v_BxKxSxDh, kv_valid_BxS,
                                   cache_index + jnp.arange(x_BxTxD.shape[1]))
    return self.output(out_BxTxHxDh, x_BxTxD.dtype), cache


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, config: ModelConfig, dtype, rngs: nnx.Rngs):
    d, f = config.hidden_size, config.intermediate_size
    self.mlp_bias = config.mlp_bias
    self.gate_proj = nnx.Param(_normal(rngs, (d, f), dtype, d))
    self.up_proj = nnx.Param(_normal(rngs, (d, f), dtype, d))
    self.down_proj = nnx.Param(_normal(rngs, (f, d), dtype, f))
    if config.mlp_bias:
      self.gate_bias = nnx.Param(jnp.zeros((f,), dtype))
      self.up_bias = nnx.Param(jnp.zeros((f,), dtype))
      self.down_bias = nnx.Param(jnp.zeros((d,), dtype))

  def __call__(self, x_BxTxD):
    gate_BxTxF = x_BxTxD @ self.gate_proj[...]
    up_BxTxF = x_BxTxD @ self.up_proj[...]
    if self.mlp_bias:
      gate_BxTxF += self.gate_bias[...]
      up_BxTxF += self.up_bias[...]
    y_BxTxD = (jax.nn.silu(gate_BxTxF) * up_BxTxF) @ self.down_proj[...]
    if self.mlp_bias:
      y_BxTxD += self.down_bias[...]
    return y_BxTxD


class Block(nnx.Module):
  """Pre-norm decoder layer."""

  def __init__(self, config: ModelConfig, dtype, rngs: nnx.Rngs):
    self.input_norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
    self.attn = Attention(config, dtype, rngs)
    self.post_attn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
    self.mlp = MLP(config, dtype, rngs)

  def __call__(self, x_BxTxD, sin, cos, kv_valid_BxS, cache, layer, cache_index):
    h_BxTxD, cache = self.attn(self.input_norm(x_BxTxD), sin, cos, kv_valid_BxS, cache, layer,
                               cache_index)
    x_BxTxD = x_BxTxD + h_BxTxD
    x_BxTxD = x_BxTxD + self.mlp(self.post_attn_norm(x_BxTxD))
    return x_BxTxD, cache


class Decoder(nnx.Module):
  """Token embedding, a stack of `Block`s (leading layer axis), final norm, LM head."""

  def __init__(self, config: ModelConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
    self.config = config
    d, v = config.hidden_size, config.vocab_size
    self.embed = nnx.Param(jax.random.normal(rngs.params(), (v, d), dtype) * 0.02)

    @nnx.split_rngs(splits=config.num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_layers(rngs):
      return Block(config, dtype, rngs)

    self.layers = make_layers(rngs)
    self.final_norm = RMSNorm(d, config.rms_norm_eps, dtype)
    if not config.tie_word_embeddings:
      self.lm_head = nnx.Param(_normal(rngs, (d, v), dtype, d))

  def __call__(self, tokens_BxT, positions_BxT, kv_valid_BxS, cache: KVCache | None,
               cache_index, remat: bool = False):
    x_BxTxD = jnp.take(self.embed[...], tokens_BxT, axis=0)
    sin, cos = rope_tables(self.config, positions_BxT)
    layer_def, layer_state = nnx.split(self.layers)

    # The cache rides in the scan carry so that each layer's in-place write of its
    # new slots stays in place; scanning it as xs/ys would copy it every call.
    def body(carry, xs):
      x, cache = carry
      state_l, layer = xs
      x, cache = nnx.merge(layer_def, state_l)(x, sin, cos, kv_valid_BxS, cache, layer,
                                               cache_index)
      return (x, cache), None

    if remat:
      # Keep only each layer's input for the backward pass and recompute the rest:
      # activation memory then grows with layers x B x T x D, not with the attention
      # scores and MLP hidden units of every layer.
      body = jax.checkpoint(body, prevent_cse=False)
    layer_ids = jnp.arange(self.config.num_layers)
    (x_BxTxD, cache), _ = jax.lax.scan(body, (x_BxTxD, cache), (layer_state, layer_ids))
    return self.final_norm(x_BxTxD), cache

  def unembed(self, h_BxTxD):
    kernel_DxV = self.embed[...].T if self.config.tie_word_embeddings else self.lm_head[...]
    return jnp.einsum("btd,dv->btv", h_BxTxD, kernel_DxV, preferred_element_type=jnp.float32)


# --------------------------------------------------------------------- functional API


@functools.lru_cache(maxsize=None)
def _graphdef(config: ModelConfig) -> nnx.GraphDef:
  """The module structure for `config`; no weights are allocated."""
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0))))
  return graphdef


def module(config: ModelConfig, params: Params) -> Decoder:
  return nnx.merge(_graphdef(config), params)


def init_params(config: ModelConfig, key: jax.Array, dtype=jnp.float32) -> Params:
  """Random weights (for tests and benchmarks) as a nested dict of arrays."""
  model = Decoder(config, dtype=dtype, rngs=nnx.Rngs(params=key))
  return nnx.state(model, nnx.Param).to_pure_dict()


def abstract_params(config: ModelConfig, dtype=jnp.float32) -> Params:
  """`jax.ShapeDtypeStruct` leaves with the structure of `init_params`."""
  return jax.eval_shape(lambda: init_params(config, jax.random.key(0), dtype))


def positions_from_mask(attention_mask_BxT):
  """Left padding: each real token's position counts only the real tokens before it."""
  return jnp.maximum(jnp.cumsum(attention_mask_BxT.astype(jnp.int32), axis=-1) - 1, 0)


def forward(config: ModelConfig, params: Params, tokens_BxT, positions_BxT, kv_mask_BxS,
            cache: KVCache | None = None, cache_index=0, *, remat: bool = False):
  """Final-norm hidden states of a chunk of tokens, writing its K/V into `cache`.

  With a cache, the chunk occupies slots [cache_index, cache_index + T); a query
  at slot s attends to the slots s' <= s whose `kv_mask_BxS` is true (mask out
  left padding there). Without a cache, S == T and the chunk attends to itself.
  `remat=True` recomputes each layer in the backward pass (training memory).
  Attention runs in query blocks (`attention.attend`): no T x S mask or score
  matrix of the whole chunk is ever materialised. Returns (hidden_BxTxD, cache).
  """
  return module(config, params)(tokens_BxT, positions_BxT, kv_mask_BxS, cache, cache_index,
                                 remat)


def unembed(config: ModelConfig, params: Params, hidden_BxTxD):
  """Float32 logits from final-norm hidden states."""
  return module(config, params).unembed(hidden_BxTxD)


def apply(config: ModelConfig, params: Params, tokens_BxT, attention_mask_BxT=None):
  """Float32 logits for a (left-)padded batch; positions count only real tokens."""
  if attention_mask_BxT is None:
    attention_mask_BxT = jnp.ones(tokens_BxT.shape, jnp.int32)
  positions_BxT = positions_from_mask(attention_mask_BxT)
  hidden_BxTxD, _ = forward(config, params, tokens_BxT, positions_BxT, attention_mask_BxT)
  return unembed(config, params, hidden_BxTxD)
