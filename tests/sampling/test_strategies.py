"""Next-token math: truncation against a sort-based reference, frequencies, logprobs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.sampling import strategies
from rlsvr.sampling.strategies import SamplingParams

sample = jax.jit(strategies.sample)


def reference_probs(logits_V, temperature, top_p, top_k):
  """HF's order (temperature, top-k, top-p) with a float64 sort; ties kept at the boundary."""
  z = np.asarray(logits_V, np.float64) / temperature
  q = np.exp(z - z.max())
  q /= q.sum()
  keep = np.ones_like(q, bool)
  if top_k:
    keep &= q >= np.sort(q)[::-1][top_k - 1]
  if top_p < 1:
    kept = np.where(keep, q, 0.0)
    desc = np.sort(kept)[::-1] / kept.sum()
    boundary = desc[np.argmax(np.cumsum(desc) >= top_p)]
    keep &= kept / kept.sum() >= boundary
  out = np.where(keep, q, 0.0)
  return out / out.sum()


@pytest.mark.parametrize("top_p,top_k", [(1.0, 7), (0.9, 0), (0.5, 0), (0.8, 40), (0.3, 3)])
def test_truncation_mask_matches_sort_reference(top_p, top_k):
  logits = jax.random.normal(jax.random.key(top_k), (64, 1000)) * 2.5
  probs = jax.nn.softmax(logits, axis=-1)
  mask = np.asarray(jax.jit(strategies.truncation_mask)(probs.T, top_p, top_k)).T
  for row in range(64):
    ref = reference_probs(np.asarray(logits[row]), 1.0, top_p, top_k) > 0
    np.testing.assert_array_equal(mask[row], ref)
  assert 0 < mask.sum(-1).min() and mask.sum(-1).max() < 1000  # It truncated something.


def test_ties_at_the_boundary_are_all_kept():
  logits = jnp.log(jnp.array([[0.4, 0.2, 0.2, 0.1, 0.1]]))
  probs_VxB = jax.nn.softmax(logits).T
  assert np.asarray(strategies.truncation_mask(probs_VxB, 1.0, 2)).T.tolist() == [
      [True, True, True, False, False]]
  assert np.asarray(strategies.truncation_mask(probs_VxB, 0.5, 0)).T.tolist() == [
      [True, True, True, False, False]]


# Ten likely tokens spread over three 128-token blocks of a 300-token vocabulary, the
# rest nearly impossible: exercises both levels of the inverse-CDF draw.
_SUPPORT = np.array([0, 5, 127, 128, 129, 200, 255, 256, 298, 299])
_STUB_V = np.full(300, -30.0, np.float32)
_STUB_V[_SUPPORT] = np.log(np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], np.float32))


@pytest.mark.parametrize("temperature,top_p,top_k", [
    (1.0, 1.0, 0), (0.5, 1.0, 0), (2.0, 1.0, 4), (1.0, 0.6, 0), (0.7, 0.7, 6)])
def test_frequencies_match_target_distribution(temperature, top_p, top_k):
  n = 20000
  params = SamplingParams.make(temperature, top_p, top_k)
  tokens, logprobs = sample(jax.random.key(7), jnp.tile(_STUB_V, (n, 1)), params)
  tokens, logprobs = np.asarray(tokens), np.asarray(logprobs)
  target = reference_probs(_STUB_V, temperature, top_p, top_k)
  counts = np.bincount(tokens, minlength=300)
  support = target > 1e-9
  assert counts[~support].sum() == 0
  chi2 = ((counts[support] - n * target[support]) ** 2 / (n * target[support])).sum()
  p_value = float(jax.scipy.stats.chi2.sf(chi2, support.sum() - 1))
  assert p_value > 1e-3, (chi2, counts[support], n * target[support])
  # Every reported logprob is that of the tempered, truncated, renormalised distribution.
  np.testing.assert_allclose(logprobs, np.log(target[tokens]), atol=1e-5)


def test_greedy_is_argmax_with_model_logprob():
  logits = jax.random.normal(jax.random.key(0), (32, 300)) * 3
  tokens, logprobs = sample(jax.random.key(1), logits, SamplingParams.make(temperature=0.0))
  np.testing.assert_array_equal(tokens, np.argmax(logits, -1))
  np.testing.assert_allclose(logprobs, jax.nn.log_softmax(logits).max(-1), atol=1e-6)


@pytest.mark.parametrize("temperature,top_p,top_k", [
    (0.0, 1.0, 0), (0.8, 1.0, 0), (1.3, 1.0, 5), (0.9, 0.7, 20)], ids=str)
def test_log_probs_agrees_with_sampled_logprobs(temperature, top_p, top_k):
  logits = jax.random.normal(jax.random.key(2), (32, 300)) * 3
  params = SamplingParams.make(temperature, top_p, top_k)
  tokens, logprobs = sample(jax.random.key(3), logits, params)
  table = np.asarray(jax.jit(strategies.log_probs)(logits, params))
  np.testing.assert_allclose(np.take_along_axis(table, np.asarray(tokens)[:, None], -1)[:, 0],
                             logprobs, atol=1e-5)
  np.testing.assert_allclose(np.exp(table).sum(-1), 1.0, atol=1e-5)


def test_changing_sampling_values_does_not_retrace():
  logits = jnp.zeros((32, 300))
  sample(jax.random.key(0), logits, SamplingParams.make(temperature=0.0))
  before = sample._cache_size()
  for kwargs in [dict(temperature=0.5), dict(top_k=3), dict(top_p=0.9)]:
    sample(jax.random.key(0), logits, SamplingParams.make(**kwargs))
  assert sample._cache_size() == before


@pytest.mark.parametrize("kwargs", [dict(temperature=-1.0), dict(top_p=0.0), dict(top_p=1.5),
                                    dict(top_k=-2)])
def test_invalid_values_are_refused(kwargs):
  with pytest.raises(ValueError):
    SamplingParams.make(**kwargs)
