"""The next-token math of sampling: temperature, top-k, top-p.

Inside the compiled decode loop every way of sampling is the same three traced
scalars, `SamplingParams(temperature, top_p, top_k)`, so switching between them
never recompiles.

The distribution actually sampled from, given float32 logits z:

  temperature == 0   greedy: argmax z. The reported logprob is the model's own
                     log_softmax(z) (a point mass would report 0, which is useless
                     as an "old" logprob for the trainer).
  otherwise          q = softmax(z / temperature), then
    top_k > 0        keep the tokens whose q is >= the k-th largest q,
    top_p < 1        then keep the smallest set of largest-q tokens whose mass is
                     >= top_p times the mass kept so far (HF's order: top-k, then
                     top-p on the renormalised survivors),
                     and sample from q restricted to the kept set, renormalised.
                     The logprob is that of the renormalised, truncated q.

Tokens tied with the boundary value are all kept (a sort-based implementation
would break ties by index); at least one token is always kept.

Why no sort: on XLA:CPU `jnp.sort` and `lax.top_k` both sort the whole vocabulary,
which costs more than a whole decode step. Both truncations are instead a threshold
found by bisection over the int32 bit patterns of the (non-negative) probabilities,
which order like the floats: 31 masked reductions give the exact threshold, an order
of magnitude cheaper than the sort. Each truncation runs under `lax.cond`, so plain
sampling pays nothing.

Drawing the token: jax.random.categorical (Gumbel-max) needs a random number per
vocabulary entry; an inverse-CDF draw over 128-token blocks (block sums, pick a
block, then a token inside it) needs one uniform per row, and is much cheaper at
large batches.

Layout: the math runs on logits laid out [vocab, batch] (`sample_vocab_first`), the
layout in which the decode loop's unembedding is one matrix-times-activations
matmul; reductions then run over the leading axis, vectorised across the batch.
`sample` and `log_probs` take the usual [batch, vocab].
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

_BLOCK = 128  # Vocabulary block of the two-level inverse-CDF draw.
_BISECT_STEPS = 31  # Non-negative float32 bit patterns span [0, 2**31).


class SamplingParams(NamedTuple):
  """Temperature, top-p and top-k as scalar arrays, traced inside the decode loop."""

  temperature: jax.Array | float
  top_p: jax.Array | float
  top_k: jax.Array | int

  @classmethod
  def make(cls, temperature=1.0, top_p=1.0, top_k=0) -> "SamplingParams":
    if temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    return cls(jnp.float32(temperature), jnp.float32(top_p), jnp.int32(top_k))


def _bisect_threshold(bits_VxB, lo_B, satisfied):
  """Largest int threshold t >= lo with `satisfied(bits >= t)`, per column.

  `satisfied(mask_VxB) -> bool_B` must be monotone (true for every t below the
  answer) and true at `lo_B`.
  """
  hi_B = jnp.max(bits_VxB, axis=0)

  def body(_, carry):
    lo, hi = carry
    mid = lo + (hi - lo + 1) // 2
    ok = satisfied(bits_VxB >= mid)
    return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid - 1)

  lo_B, _ = jax.lax.fori_loop(0, _BISECT_STEPS, body, (lo_B, jnp.maximum(hi_B, lo_B)))
  return lo_B


def truncation_mask(probs_VxB, top_p, top_k):
  """Boolean mask of the tokens that top-k then top-p keep (see the module doc)."""
  bits_VxB = jax.lax.bitcast_convert_type(probs_VxB, jnp.int32)
  vocab, batch = probs_VxB.shape
  zero_B = jnp.zeros((batch,), jnp.int32)

  def top_k_threshold(_):
    return _bisect_threshold(bits_VxB, zero_B,
                             lambda keep: jnp.sum(keep, axis=0, dtype=jnp.int32) >= top_k)

  tk_B = jax.lax.cond((top_k > 0) & (top_k < vocab), top_k_threshold, lambda _: zero_B, None)

  def top_p_threshold(_):
    kept_mass_B = jnp.sum(jnp.where(bits_VxB >= tk_B, probs_VxB, 0.0), axis=0)
    target_B = top_p * kept_mass_B
    return _bisect_threshold(
        bits_VxB, tk_B, lambda keep: jnp.sum(jnp.where(keep, probs_VxB, 0.0), 0) >= target_B)

  t_B = jax.lax.cond(top_p < 1.0, top_p_threshold, lambda _: tk_B, None)
  return bits_VxB >= t_B


def _draw(key, weights_VxB):
  """One index per column with probability proportional to `weights_VxB` (>= 0).

  Two-level inverse CDF: choose a block by its summed weight, then a token in it.
  Index i is drawn iff cdf[i-1] < u <= cdf[i] with u in (0, total], so a
  zero-weight token is never drawn.
  """
  v, b = weights_VxB.shape
  padded = -(-v // _BLOCK) * _BLOCK
  w_NxCxB = jnp.pad(weights_VxB, ((0, padded - v), (0, 0))).reshape(-1, _BLOCK, b)
  cdf_NxB = jnp.cumsum(jnp.sum(w_NxCxB, axis=1), axis=0)
  u_B = (1.0 - jax.random.uniform(key, (b,))) * cdf_NxB[-1]
  block_B = jnp.minimum(jnp.sum(cdf_NxB < u_B, axis=0), cdf_NxB.shape[0] - 1)
  before_B = jnp.where(block_B > 0,
                       jnp.take_along_axis(cdf_NxB, jnp.maximum(block_B - 1, 0)[None], 0)[0],
                       0.0)
  w_CxB = jnp.take_along_axis(w_NxCxB, block_B[None, None], axis=0)[0]
  cdf_CxB = before_B + jnp.cumsum(w_CxB, axis=0)
  # Rounding can leave u a hair above the block's last cdf: take its last nonzero token.
  inner_B = jnp.sum(cdf_CxB < u_B, axis=0)
  last_nonzero_B = _BLOCK - 1 - jnp.argmax((w_CxB > 0)[::-1], axis=0)
  inner_B = jnp.minimum(inner_B, last_nonzero_B)
  return block_B * _BLOCK + inner_B


def _greedy(logits_VxB):
  """(argmax, log_softmax at it): the first index of the max, found by a plain min-reduce
  (XLA:CPU's argmax is a slower two-operand reduce); its logprob is -log(sum(exp(z - max)))."""
  v = logits_VxB.shape[0]
  max_B = jnp.max(logits_VxB, axis=0)
  index_VxB = jax.lax.broadcasted_iota(jnp.int32, logits_VxB.shape, 0)
  # A NaN row has no index equal to its max: it gets the last token, not one out of range.
  tokens_B = jnp.min(jnp.where(logits_VxB == max_B, index_VxB, v - 1), axis=0)
  return tokens_B, -jnp.log(jnp.sum(jnp.exp(logits_VxB - max_B), axis=0))


def _truncated(logits_VxB, params: SamplingParams):
  """(scaled logits minus their max, kept weights, log of the kept mass)."""
  z_VxB = logits_VxB / params.temperature
  z_VxB = z_VxB - jnp.max(z_VxB, axis=0)
  probs_VxB = jax.nn.softmax(z_VxB, axis=0)
  keep_VxB = truncation_mask(probs_VxB, params.top_p, params.top_k)
  weights_VxB = jnp.where(keep_VxB, jnp.exp(z_VxB), 0.0)
  return z_VxB, weights_VxB, jnp.log(jnp.sum(weights_VxB, axis=0))


def sample_vocab_first(key, logits_VxB, params: SamplingParams):
  """`sample` on logits laid out [vocab, batch], as the decode loop keeps them."""
  logits_VxB = logits_VxB.astype(jnp.float32)

  def stochastic(_):
    z_VxB, weights_VxB, log_mass_B = _truncated(logits_VxB, params)
    tokens_B = _draw(key, weights_VxB).astype(jnp.int32)
    return tokens_B, jnp.take_along_axis(z_VxB, tokens_B[None], 0)[0] - log_mass_B

  return jax.lax.cond(params.temperature == 0, lambda _: _greedy(logits_VxB), stochastic, None)


def sample(key, logits_BxV, params: SamplingParams):
  """(tokens_B int32, logprobs_B float32) drawn from the distribution the module doc defines."""
  return sample_vocab_first(key, logits_BxV.T, params)


def log_probs(logits_BxV, params: SamplingParams):
  """Full log-distribution (-inf outside the kept set) that `sample` draws from.

  For greedy it is the model's log_softmax, matching the logprob `sample` reports.
  Used to score given tokens (tests, teacher forcing).
  """
  logits_VxB = logits_BxV.astype(jnp.float32).T

  def stochastic(_):
    z_VxB, weights_VxB, log_mass_B = _truncated(logits_VxB, params)
    return jnp.where(weights_VxB > 0, z_VxB - log_mass_B, -jnp.inf)

  log_probs_VxB = jax.lax.cond(params.temperature == 0,
                               lambda _: jax.nn.log_softmax(logits_VxB, 0), stochastic, None)
  return log_probs_VxB.T
