"""Per-token log-probabilities and entropies of a token batch under the model.

The full logits tensor (B, T, V) in float32 is the largest activation of a
training step at real vocabularies (151936 x 2048 x 4 B = 1.2 GiB per
sequence for Qwen3), so the unembedding runs over chunks of the sequence
inside a `lax.scan` whose body is rematerialised: only one chunk's logits
exist at a time, forward and backward.

Alignment: `logp_BxT[:, t]` is log p(tokens[t] | tokens[<t]), the convention
of the batch (sampler logprobs sit at the positions of the tokens they
sampled). Position 0 predicts nothing and gets 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from rlsvr.model import qwen3
from rlsvr.model.attention import Segments
from rlsvr.model.config import ModelConfig

# Largest float32 logits chunk kept alive at once (per device batch, all rows).
DEFAULT_LOGITS_BYTES = 256 * 2**20


def chunk_len(batch: int, seq_len: int, vocab: int, budget_bytes: int = DEFAULT_LOGITS_BYTES) -> int:
  """Sequence chunk so that batch x chunk x vocab float32 logits fit in `budget_bytes`."""
  per_position = batch * vocab * 4
  if per_position * seq_len <= budget_bytes:
    return seq_len
  chunk = 1
  while chunk * 2 * per_position <= budget_bytes and chunk * 2 < seq_len:
    chunk *= 2
  return chunk


def _next_token_stats(config: ModelConfig, params, hidden_BxCxD, targets_BxC, temperature,
                      allowed_BxCxK=None):
  # A scalar, or one temperature per row (`temperature_B`: rows sampled at different ones).
  logits_BxCxV = qwen3.unembed(config, params, hidden_BxCxD) / jnp.reshape(temperature,
                                                                            (-1, 1, 1))
  lse_BxC = jax.nn.logsumexp(logits_BxCxV, axis=-1)
  picked_BxC = jnp.take_along_axis(logits_BxCxV, targets_BxC[..., None], axis=-1)[..., 0]
  # verl's entropy_from_logits, logsumexp(z) - sum(softmax(z) * z), reusing the logsumexp.
  probs_BxCxV = jnp.exp(logits_BxCxV - lse_BxC[..., None])
  entropy_BxC = lse_BxC - jnp.sum(probs_BxCxV * logits_BxCxV, axis=-1)
  if allowed_BxCxK is not None:
    # Constrained positions: the distribution over their allowed tokens, as sampled.
    valid_BxCxK = allowed_BxCxK >= 0
    z_BxCxK = jnp.take_along_axis(logits_BxCxV, jnp.maximum(allowed_BxCxK, 0), axis=-1)
    # A finite floor, not -inf: unconstrained positions take the other branch, and a
    # where() passes 0 * (their gradient) back, which must not be 0 * nan.
    z_BxCxK = jnp.where(valid_BxCxK, z_BxCxK, -1e9)
    lse_r_BxC = jax.nn.logsumexp(z_BxCxK, axis=-1)
    probs_BxCxK = jnp.exp(z_BxCxK - lse_r_BxC[..., None])
    entropy_r_BxC = lse_r_BxC - jnp.sum(jnp.where(valid_BxCxK, probs_BxCxK * z_BxCxK, 0), -1)
    constrained_BxC = valid_BxCxK.any(-1)
    lse_BxC = jnp.where(constrained_BxC, lse_r_BxC, lse_BxC)
    entropy_BxC = jnp.where(constrained_BxC, entropy_r_BxC, entropy_BxC)
  return picked_BxC - lse_BxC, entropy_BxC


def logprobs_from_hidden(config: ModelConfig, params, hidden_BxTxD, tokens_BxT, *,
                         temperature: float = 1.0, chunk: int | None = None,
                         allowed_BxTxK=None):
  """(logp_BxT, entropy_BxT) from final hidden states, chunked over the sequence.

  `entropy_BxT[:, t]` is the entropy of the distribution that `tokens[:, t]`
  was drawn from (aligned like `logp_BxT`); both are 0 at t = 0. Where
  `allowed_BxTxK[:, t]` lists tokens (-1 pads; all -1: unrestricted), that distribution is
  the model's restricted to them (a constrained choice, `rlsvr.sampling.choices`).
  """
  b, t, d = hidden_BxTxD.shape
  chunk = chunk or chunk_len(b, t, config.vocab_size)
  n_chunks = -(-t // chunk)
  pad = n_chunks * chunk - t

  def chunked(x_BxT, fill=0):
    # Hidden state t predicts token t + 1: targets move one to the left (the last is a
    # dummy, dropped below); then the sequence is cut into chunks, scanned over.
    x_BxT = jnp.roll(x_BxT, -1, axis=1)
    x_BxT = jnp.pad(x_BxT, ((0, 0), (0, pad), *[(0, 0)] * (x_BxT.ndim - 2)),
                    constant_values=fill)
    return x_BxT.reshape(b, n_chunks, chunk, *x_BxT.shape[2:]).swapaxes(0, 1)

  hidden_BxTxD = jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0)))
  hidden_NxBxCxD = hidden_BxTxD.reshape(b, n_chunks, chunk, d).swapaxes(0, 1)
  xs = (hidden_NxBxCxD, chunked(tokens_BxT))
  if allowed_BxTxK is not None:
    xs += (chunked(allowed_BxTxK, fill=-1),)

  def body(_, xs):
    return None, _next_token_stats(config, params, *xs[:2], temperature, *xs[2:])

  if n_chunks > 1:
    # Remat: the backward pass recomputes each chunk's logits instead of storing them all.
    # One chunk (within the budget by `chunk_len`) is kept: recomputing it would cost a
    # whole extra unembedding matmul, a visible share of an update (bench/train_step.py).
    body = jax.checkpoint(body)

  _, (logp_NxBxC, entropy_NxBxC) = jax.lax.scan(body, None, xs)

  def realign(x_NxBxC):
    next_BxT = x_NxBxC.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
    return jnp.concatenate([jnp.zeros((b, 1), next_BxT.dtype), next_BxT[:, :-1]], axis=1)

  return realign(logp_NxBxC), realign(entropy_NxBxC)


def token_logprobs(config: ModelConfig, params, tokens_BxT, attention_mask_BxT, *,
                   temperature: float = 1.0, chunk: int | None = None, remat: bool = False,
                   completion_len: int | None = None, allowed_BxCxK=None):
  """(logp, entropy) of `tokens_BxT` under the model, float32.

  `attention_mask_BxT` marks real tokens (left-padded prompts, right-padded
  completions); positions count real tokens only. Logits are divided by
  `temperature` first, as verl does, so that the result matches the sampler's
  logprobs at the same temperature: a scalar, or one per row (B,), in every function
  here. `chunk` is the sequence chunk of the unembedding (default: `chunk_len`);
  `remat` recomputes the layers in the backward pass. With `completion_len` C, only
  the last C tokens are scored and the results are B x C: the prompt's logits are
  never computed; `allowed_BxCxK` (with it) restricts constrained positions'
  distributions (`logprobs_from_hidden`).
  """
  positions_BxT = qwen3.positions_from_mask(attention_mask_BxT)
  hidden_BxTxD, _ = qwen3.forward(config, params, tokens_BxT, positions_BxT, attention_mask_BxT,
                                  remat=remat)
  if completion_len is None:
    if allowed_BxCxK is not None:
      raise ValueError("allowed_BxCxK needs completion_len")
    return logprobs_from_hidden(config, params, hidden_BxTxD, tokens_BxT,
                                temperature=temperature, chunk=chunk)
  # Window of C + 1 positions: its first hidden state predicts the first scored token.
  start = tokens_BxT.shape[1] - completion_len - 1
  logp, entropy = logprobs_from_hidden(config, params, hidden_BxTxD[:, start:],
                                       tokens_BxT[:, start:], temperature=temperature,
                                       chunk=chunk, allowed_BxTxK=_window(allowed_BxCxK))
  return logp[:, 1:], entropy[:, 1:]


def _window(allowed_BxCxK):
  """allowed_BxCxK aligned with a scoring window's tokens (its first is the prompt's)."""
  if allowed_BxCxK is None:
    return None
  return jnp.pad(allowed_BxCxK, ((0, 0), (1, 0), (0, 0)), constant_values=-1)


def shared_prompt_logprobs(config: ModelConfig, params, prompt_tokens_UxP, prompt_mask_UxP,
                           prompt_index_B, tokens_BxC, mask_BxC, *, temperature: float = 1.0,
                           chunk: int | None = None, remat: bool = False, allowed_BxCxK=None):
  """(logp_BxC, entropy_BxC) of completions whose rows share prompts (`qwen3.forward_shared_prompts`):
  what `token_logprobs(..., completion_len=C)` gives for the rows laid out whole."""
  last_prompt_UxD, hidden_BxCxD = qwen3.forward_shared_prompts(
      config, params, prompt_tokens_UxP, prompt_mask_UxP, prompt_index_B, tokens_BxC, mask_BxC,
      remat=remat)
  # Window of C + 1 positions, as in `token_logprobs`: the prompt's last state predicts c0.
  hidden_BxWxD = jnp.concatenate([last_prompt_UxD[prompt_index_B][:, None], hidden_BxCxD], 1)
  tokens_BxW = jnp.concatenate([prompt_tokens_UxP[prompt_index_B, -1:], tokens_BxC], 1)
  logp, entropy = logprobs_from_hidden(config, params, hidden_BxWxD, tokens_BxW,
                                       temperature=temperature, chunk=chunk,
                                       allowed_BxTxK=_window(allowed_BxCxK))
  return logp[:, 1:], entropy[:, 1:]


def packed_logprobs(config: ModelConfig, params, tokens_NxL, positions_NxL, segment_NxL,
                    branch_NxL, score_hidden_S, score_token_S, score_row_S, score_col_S, *,
                    rows: int, cols: int, temperature: float = 1.0, chunk: int | None = None,
                    remat: bool = False, allowed_BxCxK=None):
  """(logp_BxC, entropy_BxC), B x C = `rows` x `cols`, of completions packed into buffers
  (`rlsvr.rl.packing`): what `token_logprobs(..., completion_len=C)` gives for the rows
  laid out whole, 0 beyond each row's tokens."""
  hidden_NxLxD, _ = qwen3.forward(config, params, tokens_NxL, positions_NxL, segment_NxL != 0,
                                  remat=remat, segments=Segments(segment_NxL, branch_NxL))
  # Only the completion tokens are unembedded (the largest activation), however unequal
  # the rows' lengths: each is scored from the hidden state before it, in its buffer.
  hidden_SxD = hidden_NxLxD.reshape(-1, hidden_NxLxD.shape[-1])[score_hidden_S]
  row_S = jnp.minimum(score_row_S, rows - 1)  # Padding entries: any row, dropped below.
  temperature_S = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (rows,))[row_S]
  allowed_SxK = None if allowed_BxCxK is None else allowed_BxCxK[row_S, score_col_S]
  # `chunk` counts sequence positions per row elsewhere: the same logits memory here.
  logp_S, entropy_S = _scattered_stats(config, params, hidden_SxD, score_token_S, temperature_S,
                                       allowed_SxK, chunk=chunk and chunk * rows)

  def to_rows(x_S):
    return jnp.zeros((rows, cols), x_S.dtype).at[score_row_S, score_col_S].set(x_S, mode="drop")

  return to_rows(logp_S), to_rows(entropy_S)


def _scattered_stats(config: ModelConfig, params, hidden_SxD, targets_S, temperature_S,
                     allowed_SxK=None, *, chunk: int | None = None):
  """(logp_S, entropy_S) of each target token from the hidden state that predicts it, at
  its own temperature, chunked as `logprobs_from_hidden`."""
  s, d = hidden_SxD.shape
  chunk = min(chunk or chunk_len(1, s, config.vocab_size), s)
  n_chunks = -(-s // chunk)
  pad = n_chunks * chunk - s

  def chunked(x_S, fill=0):  # [n_chunks, chunk, 1, ...]: a chunk's positions are its rows.
    x_S = jnp.pad(x_S, ((0, pad), *[(0, 0)] * (x_S.ndim - 1)), constant_values=fill)
    return x_S.reshape(n_chunks, chunk, 1, *x_S.shape[1:])

  xs = (chunked(hidden_SxD), chunked(targets_S), chunked(temperature_S, fill=1)[:, :, 0])
  if allowed_SxK is not None:
    xs += (chunked(allowed_SxK, fill=-1),)

  def body(_, xs):
    return None, _next_token_stats(config, params, *xs)

  if n_chunks > 1:
    body = jax.checkpoint(body)  # As in `logprobs_from_hidden`: one chunk's logits at a time.
  _, (logp_Nx1, entropy_Nx1) = jax.lax.scan(body, None, xs)
  return logp_Nx1.reshape(-1)[:s], entropy_Nx1.reshape(-1)[:s]
