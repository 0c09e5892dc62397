"""The environment protocol shared by the spy game and the self-judge tasks.

An environment turns a batch of source items into whole played episodes. It
owns every prompt, every parse and every reward; the trainer only sees
`Trajectory` rows, scalar metrics and a human-readable record, so it knows
nothing about spies or judges.

Sampling goes through a `SampleFn` so environments never touch model weights:
the trainer passes a closure over its sampler (the policy), and environments
that need a second model (a judge) receive a second `SampleFn`. Environments
batch their calls: one call per game phase for all games of the step.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import numpy as np

# Owned by the sampler and the update; re-exported so environments import them from here.
from rlsvr.rl.rollout import EpisodeBatch, Trajectory  # noqa: F401
from rlsvr.sampling.completion import Completion  # noqa: F401


class SampleFn(Protocol):
  """Samples one completion per prompt (lists of token ids), in order."""

  def __call__(self, prompts: Sequence[Sequence[int]], **sampling: Any) -> list[Completion]:
    ...


class Environment(Protocol):
  """Plays whole episodes on a batch of source items."""

  def play_episodes(
      self,
      items: Sequence[Any],
      sample: SampleFn,
      rng: np.random.Generator,
      step: int,
  ) -> EpisodeBatch:
    """Plays one episode (a game, a judged group, a prompt's group) per item."""
    ...

  def state_dict(self) -> Mapping[str, Any]:
    """Environment state the trainer checkpoints (e.g. role baselines)."""
    ...

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    ...

