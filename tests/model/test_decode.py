"""The unrolled decode step against the scanned `qwen3.forward`, one token at a time."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.model import decode, qwen3
from tests.model.hf_reference import left_padded


def test_decode_step_equals_forward_one_token_at_a_time(tiny_qwen3):
  _, config, params = tiny_qwen3
  tokens, mask = left_padded([40, 25], config.vocab_size, seed=5)
  prompt_len, max_len = 30, 96  # Three chunks: the steps cross from the first into the second.
  kv_mask = np.concatenate([mask, np.ones((2, max_len - mask.shape[1]), np.int64)], axis=1)
  positions = np.asarray(qwen3.positions_from_mask(mask))
  fwd = jax.jit(qwen3.forward, static_argnums=0)
  step = jax.jit(decode.decode_step, static_argnums=0)
  _, ref_cache = fwd(config, params, tokens[:, :prompt_len], positions[:, :prompt_len], kv_mask,
                     qwen3.init_cache(config, 2, max_len), 0)
  cache = decode.from_stacked(ref_cache)
  assert cache.chunk_lens == (32, 32, 32)
  layers = decode.unstack_layers(params)
  for t in range(prompt_len, tokens.shape[1]):
    args = (tokens[:, t:t + 1], positions[:, t:t + 1], kv_mask)
    # Alternate the two ways of passing the weights: both must give the same step.
    h, cache = step(config, params, *args, cache, t, layers if t % 2 else None)
    h_ref, ref_cache = fwd(config, params, *args, ref_cache, t)
    np.testing.assert_allclose(h, h_ref, atol=2e-5, rtol=0)
  assert np.abs(np.asarray(h_ref)).max() > 0.1  # The comparison is not between near-zeros.
  for i in range(config.num_layers):
    np.testing.assert_allclose(np.concatenate(cache.k_BxKxDhxC[i], -1), ref_cache.k_LxBxKxDhxS[i],
                               atol=1e-5)
    np.testing.assert_allclose(np.concatenate(cache.v_BxKxCxDh[i], -2), ref_cache.v_LxBxKxSxDh[i],
                               atol=1e-5)


def test_cache_layout_matches_the_stacked_cache(tiny_qwen3):
  _, config, _ = tiny_qwen3
  stacked = qwen3.init_cache(config, batch=3, max_len=20, dtype=jnp.bfloat16)
  cache = decode.init_cache(config, batch=3, max_len=20, dtype=jnp.bfloat16)
  assert cache.max_len == stacked.max_len == 20
  split = decode.from_stacked(stacked)
  assert len(cache.k_BxKxDhxC) == len(split.v_BxKxCxDh) == config.num_layers
  assert jax.tree.map(lambda x: (x.shape, x.dtype), cache) == jax.tree.map(
      lambda x: (x.shape, x.dtype), split)


def test_from_stacked_adds_empty_decode_slots_and_picks_rows(tiny_qwen3):
  _, config, _ = tiny_qwen3
  rng = np.random.default_rng(0)
  stacked = qwen3.KVCache(*(jnp.asarray(rng.normal(size=x.shape), jnp.float32)
                            for x in qwen3.init_cache(config, batch=2, max_len=20)))
  rows = np.array([1, 1, 0])
  cache = decode.from_stacked(stacked, max_len=70, rows_B=rows)
  assert cache.max_len == 70 and cache.chunk_lens == (35, 35)
  for i in range(config.num_layers):
    k = np.concatenate(cache.k_BxKxDhxC[i], -1)
    v = np.concatenate(cache.v_BxKxCxDh[i], -2)
    np.testing.assert_array_equal(k[..., :20], np.asarray(stacked.k_LxBxKxDhxS[i])[rows])
    np.testing.assert_array_equal(v[:, :, :20], np.asarray(stacked.v_LxBxKxSxDh[i])[rows])
    assert not k[..., 20:].any() and not v[:, :, 20:].any()
  with pytest.raises(ValueError, match="shorter"):
    decode.from_stacked(stacked, max_len=19)


def test_decode_loop_copies_no_weights_or_cache(tiny_qwen3):
  """The point of the module: a compiled loop of steps reads weights and cache in place.

  A layer scan over stacked arrays (the old decode step) compiles to one copy of each
  layer's weights and cache per step; here nothing of that size is copied in the loop.
  """
  _, config, params = tiny_qwen3
  batch, max_len = 2, 32

  def loop(params, cache):
    layers = decode.unstack_layers(params)

    def body(i, carry):
      tok_B, cache = carry
      h, cache = decode.decode_step(config, params, tok_B[:, None], jnp.full((batch, 1), i),
                                    jnp.ones((batch, max_len), bool), cache, i, layers)
      return jnp.argmax(qwen3.unembed(config, params, h)[:, 0], -1).astype(jnp.int32), cache

    return jax.lax.fori_loop(0, max_len, body, (jnp.zeros((batch,), jnp.int32), cache))

  cache = decode.init_cache(config, batch, max_len)
  hlo = jax.jit(loop, donate_argnums=1).lower(params, cache).compile().as_text()
  layer_weights = [x[0] for x in jax.tree.leaves(params["layers"]) if x.ndim > 2]
  smallest = min(x.size for x in jax.tree.leaves((layer_weights, cache)))
  in_loop = [line for line in hlo.splitlines() if "/while/body/" in line]
  assert len(in_loop) > 100  # The loop body was found.
  for line in in_loop:
    if any(f" {op}(" in line for op in ("copy", "slice", "dynamic-slice")) and "f32[" in line:
      shape = line.split("f32[")[1].split("]")[0]
      assert np.prod([int(d) for d in shape.split(",") if d]) < smallest, line
