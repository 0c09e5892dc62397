"""Blocked attention equals the plain computation, values and gradients, in less memory."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.model.attention import attend


def _inputs(b=2, t=37, s=37, h=4, k=2, dh=8, offset=0, seed=0):
  rng = np.random.default_rng(seed)
  q = jnp.asarray(rng.normal(size=(b, t, h, dh)), jnp.float32)
  keys = jnp.asarray(rng.normal(size=(b, k, dh, s)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(b, k, s, dh)), jnp.float32)
  valid = jnp.asarray(np.arange(s)[None, :] >= np.array([[0], [5]])[:b])  # row 1: 5 pads
  return q, keys, values, valid, offset + jnp.arange(t)


def _reference(q, keys, values, valid, slots):
  """Per query row, per head, written out with numpy: softmax over visible slots."""
  q, keys, values, valid = map(np.asarray, (q, keys, values, valid))
  b, t, h, dh = q.shape
  group = h // keys.shape[1]
  out = np.zeros_like(q)
  for i in range(b):
    for j in range(t):
      visible = valid[i] & (np.arange(keys.shape[-1]) <= int(slots[j]))
      for head in range(h):
        kv = head // group
        logits = q[i, j, head] @ keys[i, kv] / np.sqrt(dh)
        if visible.any():
          p = np.exp(np.where(visible, logits - logits[visible].max(), -np.inf))
          out[i, j, head] = (p / p.sum()) @ values[i, kv]
  return out


@pytest.mark.parametrize("block", [None, 8, 16, 37, 64])
def test_matches_the_written_out_softmax(block):
  q, keys, values, valid, slots = _inputs()
  out = np.asarray(attend(q, keys, values, valid, slots, block=block))
  want = _reference(q, keys, values, valid, slots)
  real = np.asarray(valid)[:, :, None, None]  # padding queries attend to nothing: unchecked
  np.testing.assert_allclose(np.where(real, out, 0), np.where(real, want, 0), atol=2e-5)


def test_chunk_of_a_longer_cache():
  """Queries at slots 10..19 of a 32-slot cache (a prefill chunk): later slots unseen."""
  q, keys, values, valid, slots = _inputs(t=10, s=32, offset=10)
  out = np.asarray(attend(q, keys, values, valid, slots, block=4))
  np.testing.assert_allclose(out, _reference(q, keys, values, valid, slots), atol=2e-5)


def test_gradients_equal_unblocked():
  q, keys, values, valid, slots = _inputs()
  loss = lambda block: lambda q, k, v: jnp.sum(
      jnp.sin(attend(q, k, v, valid, slots, block=block)) * valid[:, :, None, None])
  g_plain = jax.grad(loss(None), argnums=(0, 1, 2))(q, keys, values)
  g_block = jax.grad(loss(8), argnums=(0, 1, 2))(q, keys, values)
  for a, b in zip(g_block, g_plain):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_blocks_bound_the_backward_pass_memory():
  """XLA's own buffer accounting for value-and-grad at T = S = 2048: the scores of every
  query (2 x 4 x 2048 x 2048 floats = 128 MiB, probabilities alike) vs one block's."""
  q, keys, values, valid, slots = _inputs(b=2, t=2048, s=2048, h=4, k=2, dh=16)

  def temp_bytes(block):
    f = jax.jit(jax.value_and_grad(
        lambda q, k, v: jnp.sum(attend(q, k, v, valid, slots, block=block)), argnums=(0, 1, 2)))
    return f.lower(q, keys, values).compile().memory_analysis().temp_size_in_bytes

  plain, blocked = temp_bytes(None), temp_bytes(256)
  assert plain > 128 * 2**20
  assert blocked < plain / 4, (blocked, plain)
