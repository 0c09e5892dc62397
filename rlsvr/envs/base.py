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

import dataclasses
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

# The sampler owns the type; re-exported so environments import it from here.
from rlsvr.sampling.completion import Completion  # noqa: F401


class SampleFn(Protocol):
  """Samples one completion per prompt (lists of token ids), in order."""

  def __call__(self, prompts: Sequence[Sequence[int]], **sampling: Any) -> list[Completion]:
    ...


@dataclasses.dataclass
class Trajectory:
  """One (prompt, completion) pair with its scalar reward.

  `reward` is the raw reward; `baseline` is subtracted from it before group
  normalisation (e.g. the spy game's role EMAs; 0 for plain GRPO). `group_id` ties together the rows whose rewards are normalised against each
  other (GRPO groups); `role` names the row's part in the episode ("spy",
  "civilian", "detector", "policy", ...), used for role baselines and metrics;
  `trained` is False for rows that were played but not trained on this step
  (e.g. the detectors during a clue phase).
  """

  prompt_ids: list[int]
  completion_ids: list[int]
  logprobs: list[float]
  reward: float
  group_id: int
  role: str
  trained: bool = True
  finish_reason: str = "length"
  baseline: float = 0.0


@dataclasses.dataclass
class EpisodeBatch:
  """What one `Environment.play` call returns for one training step."""

  trajectories: list[Trajectory]
  metrics: dict[str, float]
  # Human-readable account of (at least) one whole episode, appended to rollouts.txt.
  record_text: str
  # Machine-readable facts of every episode, one dict per episode (rollouts JSONL).
  records: list[dict[str, Any]]


class Environment(Protocol):
  """Plays whole episodes on a batch of source items."""

  def play(
      self,
      items: Sequence[Any],
      sample: SampleFn,
      rng: np.random.Generator,
      step: int,
  ) -> EpisodeBatch:
    ...

  def state_dict(self) -> Mapping[str, Any]:
    """Environment state the trainer checkpoints (e.g. role baselines)."""
    ...

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    ...


SampleCallable = Callable[..., list[Completion]]
