"""Chunked token logprobs and entropies against the plain full-logits computation."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig
from rlsvr.rl import logprobs
from tests.rl.tiny import CONFIG, random_params



@pytest.fixture(scope="module")
def setup():
  params = random_params()
  rng = np.random.default_rng(0)
  tokens = rng.integers(1, CONFIG.vocab_size, size=(3, 21)).astype(np.int32)
  mask = np.ones((3, 21), np.int32)
  mask[1, :6] = 0  # left-padded prompt
  mask[2, 15:] = 0  # right-padded completion
  return params, tokens, mask


def reference(params, tokens, mask, temperature=1.0):
  """log_softmax of the full logits, gathered at the next token, shifted to align with it."""
  logits = qwen3.apply(CONFIG, params, tokens, mask) / temperature
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  picked = jnp.take_along_axis(logp_all[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)[:, :-1]
  zero = jnp.zeros((tokens.shape[0], 1))
  return jnp.concatenate([zero, picked], 1), jnp.concatenate([zero, entropy], 1)


def test_matches_full_logits(setup):
  params, tokens, mask = setup
  # 21 positions in chunks of 5: the last chunk is padded.
  fn = jax.jit(functools.partial(logprobs.token_logprobs, CONFIG, chunk=5, temperature=0.7))
  logp, ent = fn(params, tokens, mask)
  ref_fn = jax.jit(functools.partial(reference, temperature=0.7))
  ref_logp, ref_ent = ref_fn(params, tokens, mask)
  real = mask.astype(bool)
  np.testing.assert_allclose(np.asarray(logp)[real], np.asarray(ref_logp)[real], atol=2e-5)
  np.testing.assert_allclose(np.asarray(ent)[real], np.asarray(ref_ent)[real], atol=2e-5)
  assert np.all(np.asarray(logp)[:, 0] == 0.0) and np.all(np.asarray(ent)[:, 0] == 0.0)
  assert np.all(np.asarray(logp)[real] <= 0.0)


def test_each_row_is_scored_at_its_own_temperature(setup):
  """Rows sampled at different temperatures (the spy game's detectors and players) in
  one batch: row b's results are those of its own temperature alone."""
  params, tokens, mask = setup
  temperature_B = np.asarray([0.5, 1.0, 1.7], np.float32)
  fn = jax.jit(functools.partial(logprobs.token_logprobs, CONFIG, chunk=5))
  logp, ent = fn(params, tokens, mask, temperature=temperature_B)
  for b, temperature in enumerate(temperature_B):
    ref_logp, ref_ent = reference(params, tokens, mask, temperature=float(temperature))
    real = mask[b].astype(bool)
    np.testing.assert_allclose(np.asarray(logp)[b][real], np.asarray(ref_logp)[b][real],
                               atol=2e-5)
    np.testing.assert_allclose(np.asarray(ent)[b][real], np.asarray(ref_ent)[b][real],
                               atol=2e-5)


def test_constrained_positions_are_scored_over_their_allowed_tokens(setup):
  """A vote drawn from a few answers: at positions with allowed tokens, logp and entropy
  are those of the softmax over them alone; elsewhere, of the whole vocabulary. The
  gradient stays finite (masked slots must not leak nan through the unused branch)."""
  params, tokens, mask = setup
  c = 6  # The last 6 tokens of each row are its completion.
  rng = np.random.default_rng(1)
  allowed = np.full((3, c, 4), -1, np.int32)
  for b in range(3):
    for j in (0, 2, 3) if b != 1 else (5,):
      others = rng.choice(np.setdiff1d(np.arange(CONFIG.vocab_size), tokens[b, -c + j]), 2,
                          replace=False)
      allowed[b, j, :3] = [tokens[b, -c + j], *others]
  fn = jax.jit(functools.partial(logprobs.token_logprobs, CONFIG, chunk=5, completion_len=c,
                                 temperature=0.8))
  logp, ent = fn(params, tokens, mask, allowed_BxCxK=allowed)
  logits = np.asarray(qwen3.apply(CONFIG, params, tokens, mask), np.float64) / 0.8
  free_logp, free_ent = fn(params, tokens, mask)
  for b in range(3):
    for j in range(c):
      if mask[b, -c + j] == 0:
        continue
      ids = allowed[b, j][allowed[b, j] >= 0]
      if not len(ids):
        assert logp[b, j] == free_logp[b, j] and ent[b, j] == free_ent[b, j]
        continue
      z = logits[b, -c + j - 1, ids]
      log_q = z - np.log(np.exp(z - z.max()).sum()) - z.max()
      np.testing.assert_allclose(logp[b, j], log_q[0], atol=2e-5)
      np.testing.assert_allclose(ent[b, j], -(np.exp(log_q) * log_q).sum(), atol=2e-5)
  grads = jax.grad(lambda p: (fn(p, tokens, mask, allowed_BxCxK=allowed)[0] * mask[:, -c:]).sum())(
      params)
  assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))


def test_gradients_match_with_chunks_and_remat(setup):
  params, tokens, mask = setup
  weights = jnp.asarray(np.random.default_rng(1).normal(size=tokens.shape), jnp.float32) * mask

  def objective(p, chunk, remat):
    logp, ent = logprobs.token_logprobs(CONFIG, p, tokens, mask, chunk=chunk, remat=remat)
    return (weights * (logp + 0.1 * ent)).sum()

  def ref_objective(p):
    logp, ent = reference(p, tokens, mask)
    return (weights * (logp + 0.1 * ent)).sum()

  ref = jax.jit(jax.grad(ref_objective))(params)
  # Chunked unembedding and rematerialised layers at once: one compile on a slow machine.
  got_fn = jax.jit(functools.partial(jax.grad(objective), chunk=4, remat=True))
  got = got_fn(params)
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(ref)):
    # float32 recomputation reorders sums: compare relative to the largest entry.
    np.testing.assert_allclose(a, b, atol=1e-5 * np.abs(b).max(), err_msg=str(path))
    assert np.abs(b).max() > 0


def test_chunk_len_respects_budget():
  assert logprobs.chunk_len(2, 100, 50, budget_bytes=2 * 100 * 50 * 4) == 100
  # 151936-token vocabulary, 2048 positions, 4 rows: 256 MiB allows 110 positions -> 64.
  c = logprobs.chunk_len(4, 2048, 151936)
  assert c == 64 and 4 * c * 151936 * 4 <= logprobs.DEFAULT_LOGITS_BYTES
  assert logprobs.chunk_len(1, 4096, 10**9, budget_bytes=1) == 1


def test_chunking_bounds_compiled_memory():
  """The chunked backward never holds the (B, T, V) logits (measured: 8.8 MiB of temporaries
  against 37.7 MiB unchunked, for 16 MiB of logits)."""
  config = ModelConfig(vocab_size=8192, hidden_size=32, intermediate_size=64, num_layers=1,
                       num_heads=4, num_kv_heads=2, head_dim=8)
  params = qwen3.abstract_params(config)
  tokens = jax.ShapeDtypeStruct((2, 256), jnp.int32)

  def loss(p, t):
    return logprobs.token_logprobs(config, p, t, jnp.ones_like(t), chunk=16)[0].sum()

  compiled = jax.jit(jax.grad(loss)).lower(params, tokens).compile()
  full_logits = 2 * 256 * 8192 * 4
  assert compiled.memory_analysis().temp_size_in_bytes < full_logits
