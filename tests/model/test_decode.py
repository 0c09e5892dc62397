"""The unrolled decode step against the scanned `qwen3.forward`, one token at a time."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.model import decode, qwen3
from tests.model.hf_reference import left_padded, make_hf_model
from tests.model.test_qwen3 import LLAMA3_ROPE


@pytest.mark.parametrize("rows_per_prompt", [1, 3])
def test_decode_step_equals_forward_one_token_at_a_time(tiny_qwen3, rows_per_prompt):
  """Rows continuing a shared prompt prefix, each with its own tokens, equal a plain forward
  of (prompt + that row's tokens) with a cache of its own."""
  _, config, params = tiny_qwen3
  r, prompt_len, new_len = rows_per_prompt, 30, 70  # Two chunks of 35 generated slots.
  prompts, prompt_mask = left_padded([30, 17], config.vocab_size, seed=5)
  own, _ = left_padded([new_len] * 2 * r, config.vocab_size, seed=6)
  tokens = np.concatenate([np.repeat(prompts, r, axis=0), own], axis=1)  # Row b: prompt b // r.
  mask = np.concatenate([np.repeat(prompt_mask, r, axis=0), np.ones_like(own)], axis=1)
  positions = np.asarray(qwen3.positions_from_mask(mask))
  fwd = jax.jit(qwen3.forward, static_argnums=0)
  step = jax.jit(decode.decode_step, static_argnums=0)
  _, prefill = fwd(config, params, prompts, positions[::r, :prompt_len], prompt_mask,
                   qwen3.init_cache(config, 2, prompt_len), 0)
  cache = decode.from_stacked(prefill, new_len, batch=2 * r)
  assert cache.chunk_lens == (35, 35)
  _, ref_cache = fwd(config, params, tokens[:, :prompt_len], positions[:, :prompt_len], mask,
                     qwen3.init_cache(config, 2 * r, tokens.shape[1]), 0)
  weights = decode.decode_weights(config, params)
  for i in range(new_len):
    t = prompt_len + i
    args = (tokens[:, t:t + 1], positions[:, t:t + 1])
    # Alternate the two ways of passing the weights: both must give the same step.
    logits_VxB, cache = step(config, params, *args, prompt_mask.astype(bool), cache, i,
                             weights if i % 2 else None)
    h_ref, ref_cache = fwd(config, params, *args, mask, ref_cache, t)
    logits_ref = qwen3.unembed(config, params, h_ref)[:, 0]
    np.testing.assert_allclose(logits_VxB.T, logits_ref, atol=5e-5, rtol=0)
  assert np.abs(np.asarray(logits_ref)).max() > 0.1  # The comparison is not between near-zeros.
  for i in range(config.num_layers):
    np.testing.assert_allclose(np.concatenate(cache.k_BxKxDhxC[i], -1),
                               ref_cache.k_LxBxKxDhxS[i][..., prompt_len:], atol=1e-5)
    np.testing.assert_allclose(np.concatenate(cache.v_BxKxCxDh[i], -2),
                               ref_cache.v_LxBxKxSxDh[i][:, :, prompt_len:], atol=1e-5)


@pytest.mark.parametrize("model_type,overrides", [
    ("qwen3", dict(attention_bias=True, num_key_value_heads=1)),
    ("qwen2", dict(tie_word_embeddings=False)),
    ("llama", dict(attention_bias=True, mlp_bias=True, rope_parameters=LLAMA3_ROPE)),
], ids=["qwen3-biases-gqa4", "qwen2-qkv-bias", "llama3-all-biases"])
def test_decode_step_handles_every_architecture(model_type, overrides):
  """Biases, QK-norm on or off, GQA and RoPE scaling: the feature-major step reimplements
  each of them, so each is checked against the forward (which matches transformers)."""
  _, config, params = make_hf_model(model_type, **overrides)
  prompt_len, new_len = 9, 6
  tokens, mask = left_padded([prompt_len + new_len, 12], config.vocab_size, seed=7)
  positions = np.asarray(qwen3.positions_from_mask(mask))
  fwd = jax.jit(qwen3.forward, static_argnums=0)
  _, prefill = fwd(config, params, tokens[:, :prompt_len], positions[:, :prompt_len],
                   mask[:, :prompt_len], qwen3.init_cache(config, 2, prompt_len), 0)
  cache = decode.from_stacked(prefill, new_len, batch=2)
  ref_cache = qwen3.init_cache(config, 2, tokens.shape[1])
  _, ref_cache = fwd(config, params, tokens[:, :prompt_len], positions[:, :prompt_len], mask,
                     ref_cache, 0)
  step = jax.jit(decode.decode_step, static_argnums=0)
  for i in range(new_len):
    t = prompt_len + i
    args = (tokens[:, t:t + 1], positions[:, t:t + 1])
    logits_VxB, cache = step(config, params, *args, mask[:, :prompt_len].astype(bool), cache, i)
    h_ref, ref_cache = fwd(config, params, *args, mask, ref_cache, t)
    logits_ref = qwen3.unembed(config, params, h_ref)[:, 0]
    np.testing.assert_allclose(logits_VxB.T, logits_ref, atol=5e-5, rtol=0)
  assert np.abs(np.asarray(logits_ref)).max() > 0.1


def test_from_stacked_keeps_one_prefix_per_prompt_and_empty_row_slots(tiny_qwen3):
  _, config, _ = tiny_qwen3
  rng = np.random.default_rng(0)
  stacked = qwen3.KVCache(*(jnp.asarray(rng.normal(size=x.shape), jnp.bfloat16)
                            for x in qwen3.init_cache(config, batch=2, max_len=20)))
  cache = decode.from_stacked(stacked, new_len=70, batch=6)
  fresh = decode.init_cache(config, batch=6, new_len=70, dtype=jnp.bfloat16)
  assert cache.new_len == 70 and cache.chunk_lens == (35, 35)
  assert fresh.prefix_k_UxKxDhxP == () and len(cache.k_BxKxDhxC) == config.num_layers
  same_layout = lambda c: jax.tree.map(lambda x: (x.shape, x.dtype), (c.k_BxKxDhxC, c.v_BxKxCxDh))
  assert same_layout(cache) == same_layout(fresh)
  for i in range(config.num_layers):
    np.testing.assert_array_equal(cache.prefix_k_UxKxDhxP[i], stacked.k_LxBxKxDhxS[i])
    np.testing.assert_array_equal(cache.prefix_v_UxKxPxDh[i], stacked.v_LxBxKxSxDh[i])
    assert not any(np.asarray(x).any() for x in cache.k_BxKxDhxC[i] + cache.v_BxKxCxDh[i])
  with pytest.raises(ValueError, match="cannot continue"):
    decode.from_stacked(stacked, new_len=70, batch=3)


def test_decode_loop_copies_no_weights_or_cache(tiny_qwen3):
  """The point of the module: a compiled loop of steps reads weights and cache in place.

  A layer scan over stacked arrays (the old decode step) compiles to one copy of each
  layer's weights and cache per step; here nothing of that size is copied in the loop.
  """
  _, config, params = tiny_qwen3
  prompts, batch, new_len = 2, 4, 32

  def loop(params, cache):
    weights = decode.decode_weights(config, params)

    def body(i, carry):
      tok_B, cache = carry
      logits_VxB, cache = decode.decode_step(config, params, tok_B[:, None],
                                             jnp.full((batch, 1), i),
                                             jnp.ones((prompts, 16), bool), cache, i, weights)
      return jnp.argmax(logits_VxB, 0).astype(jnp.int32), cache

    return jax.lax.fori_loop(0, new_len, body, (jnp.zeros((batch,), jnp.int32), cache))

  cache = decode.from_stacked(qwen3.init_cache(config, prompts, 16), new_len, batch)
  hlo = jax.jit(loop, donate_argnums=1).lower(params, cache).compile().as_text()
  layer_weights = [x[0] for x in jax.tree.leaves(params["layers"]) if x.ndim > 2]
  smallest = min(x.size for x in jax.tree.leaves((layer_weights, cache)))
  in_loop = [line for line in hlo.splitlines() if "/while/body/" in line]
  assert len(in_loop) > 100  # The loop body was found.
  for line in in_loop:
    if any(f" {op}(" in line for op in ("copy", "slice", "dynamic-slice")) and "f32[" in line:
      shape = line.split("f32[")[1].split("]")[0]
      assert np.prod([int(d) for d in shape.split(",") if d]) < smallest, line
