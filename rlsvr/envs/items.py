"""The seeded, resumable stream of source items every environment draws from."""
from __future__ import annotations

import itertools
from typing import Any, Iterator, Sequence

import numpy as np

from rlsvr import seeding


class ItemStream:
  """An endless, seeded stream of source items (reshuffled every pass), `per_step` at a time.

  The stream depends only on the seed, and `consumed` (checkpointed) counts the
  items drawn so far, so a resumed run `seek`s there and continues with the
  items an uninterrupted run would use, also when a step drew extra rounds
  (`grpo.filter_groups`).
  """

  def __init__(self, items: Sequence[Any], per_step: int, seed: int):
    if not items:
      raise ValueError("the data source gave no items")
    self.per_step = per_step
    self.consumed = 0
    self._stream = self._cycle(list(items), np.random.default_rng(seed))

  @staticmethod
  def _cycle(items, rng) -> Iterator[Any]:
    while True:
      for i in rng.permutation(len(items)):
        yield items[i]

  def seek(self, consumed: int) -> None:
    """Continues the stream after its first `consumed` items (from a fresh stream)."""
    if self.consumed:
      raise ValueError("seek works on a fresh stream only")
    next(itertools.islice(self._stream, consumed, consumed), None)  # consume
    self.consumed = consumed

  def next_step(self) -> list[Any]:
    self.consumed += self.per_step
    return list(itertools.islice(self._stream, self.per_step))


def round_rng(seed: int, step: int, round_: int) -> np.random.Generator:
  """The host RNG of one round of one step (games' roles, masks, ...)."""
  return seeding.rng(seed, "round", step, round_)


class StreamExperiment:
  """An `Experiment` base for environments that draw `items` and hold no extra models.

  Subclasses set `self.items` (an `ItemStream`), optionally `self.env` (an object with
  `state_dict` / `load_state_dict`, checkpointed with the stream), and implement `play_round`.
  """

  items: ItemStream
  env: Any = None

  def state_dict(self) -> dict[str, Any]:
    state = {"items_consumed": self.items.consumed}
    return state if self.env is None else {**state, "env": dict(self.env.state_dict())}

  def load_state_dict(self, state, step: int) -> None:
    if self.env is not None:
      self.env.load_state_dict(state["env"])
    self.items.seek(state["items_consumed"])

  def model_state(self, step: int) -> dict[str, Any]:
    return {}

  def load_model_state(self, params) -> None:
    pass
