"""Constrained choice: a completion that must be one of a few token sequences.

A small model asked for a vote (`\\boxed{3}`) or a verdict (`\\boxed{1}`) mostly
writes something unparseable, and a game whose votes are all invalid has no
reward to learn from. With `choices`, the sampler draws the completion from the
model's distribution restricted, token by token, to the continuations of the
given sequences (a token trie, as transformers' `prefix_allowed_tokens_fn`
would): at each step the logits of every token that continues no choice from the
row's trie node are set to -inf, and a row that completes a choice is done
(finish reason "stop"). Temperature, top-k and top-p then apply to the
restricted distribution, and the reported logprob is that of the token under
it. Each completion says which tokens were allowed at each of its positions
(`Completion.allowed`, `allowed_at`), and the update scores it under the same
restricted distribution (`rlsvr.rl.logprobs`): trained against the whole
vocabulary, a vote's negative advantages moved the valid answers' mass to
tokens the sampler never draws, until the sampler's and the trainer's
log-probs differed by 10 nats a token and the gradient norm grew a
hundredfold (docs/results.md, spy game).

The trie travels as one dense table, `next_SxV[node, token]` = the node after
`token` (-1: not allowed), plus `final_S`; S (nodes) is padded to a power of two
so calls with different choice sets of similar size share one compiled program.
A call without choices passes a one-node table and every row starts free (-1).
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import numpy as np

FREE = -1  # A row's node when it is not constrained (or has completed its choice).


class ChoiceTable(NamedTuple):
  """The token trie of a choice set, as device-ready tables."""

  next_SxV: np.ndarray  # int32, node after a token; -1 where the token continues no choice
  final_S: np.ndarray  # bool, a choice ends at this node


def table(choices: Sequence[Sequence[int]], vocab_size: int) -> ChoiceTable:
  """The trie of `choices` (token-id sequences); node 0 is the root.

  Raises ValueError for an empty set, an empty choice, an id outside the
  vocabulary, or a choice that is a proper prefix of another (the shorter would
  always end the row first, so the longer could never be drawn).
  """
  seqs = [tuple(int(t) for t in c) for c in choices]
  if not seqs:
    raise ValueError("choices must hold at least one token sequence")
  if any(not s for s in seqs):
    raise ValueError("every choice needs at least one token")
  if any(not 0 <= t < vocab_size for s in seqs for t in s):
    raise ValueError(f"choice token ids must be in [0, {vocab_size})")
  children: list[dict[int, int]] = [{}]
  final = [False]
  for seq in dict.fromkeys(seqs):
    node = 0
    for token in seq:
      if final[node]:
        raise ValueError(f"choice {list(seq)} extends a shorter choice; no choice may be a "
                         "prefix of another")
      if token not in children[node]:
        children[node][token] = len(children)
        children.append({})
        final.append(False)
      node = children[node][token]
    if children[node]:
      raise ValueError(f"choice {list(seq)} is a prefix of a longer choice; no choice may be "
                       "a prefix of another")
    final[node] = True
  size = 1 << (len(children) - 1).bit_length()
  next_SxV = np.full((size, vocab_size), FREE, np.int32)
  for node, edges in enumerate(children):
    for token, child in edges.items():
      next_SxV[node, token] = child
  final_S = np.zeros(size, bool)
  final_S[:len(final)] = final
  return ChoiceTable(next_SxV, final_S)


def unconstrained(vocab_size: int) -> ChoiceTable:
  """The one-node table of a call without choices (its rows start and stay FREE)."""
  return ChoiceTable(np.full((1, vocab_size), FREE, np.int32), np.zeros(1, bool))


def longest(choices: Sequence[Sequence[int]]) -> int:
  return max((len(c) for c in choices), default=0)


def allowed_at(choices: Sequence[Sequence[int]], ids: Sequence[int]) -> tuple[tuple[int, ...], ...]:
  """The tokens a constrained call could draw at each position of `ids` (one of `choices`):
  the sorted children of the trie node that the tokens before it reach."""
  children = _children(tuple(tuple(int(t) for t in c) for c in choices))
  ids = tuple(int(t) for t in ids)
  out = []
  for j in range(len(ids)):
    allowed = children.get(ids[:j], ())
    if ids[j] not in allowed:
      raise ValueError(f"{list(ids)} is not one of the choices")
    out.append(allowed)
  return tuple(out)


@functools.lru_cache(maxsize=16)
def _children(choices: tuple[tuple[int, ...], ...]) -> dict[tuple[int, ...], tuple[int, ...]]:
  """Prefix -> the sorted tokens that continue it; built once per choice set, not once
  per completion (the sampler labels every row of a call)."""
  children: dict[tuple[int, ...], set[int]] = {}
  for choice in choices:
    for j, token in enumerate(choice):
      children.setdefault(choice[:j], set()).add(token)
  return {prefix: tuple(sorted(tokens)) for prefix, tokens in children.items()}
