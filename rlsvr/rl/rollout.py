"""What an environment hands the trainer: played rows and a step's account of them.

The types live with the update, not with the environments, so `rlsvr.rl`
imports nothing from `rlsvr.envs` (environments depend on the trainer's
types, never the other way round).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence


@dataclasses.dataclass
class Trajectory:
  """One (prompt, completion) pair with its scalar reward.

  `reward` is the raw reward; `baseline` is subtracted from it before group
  normalisation (e.g. the spy game's role EMAs; 0 for plain GRPO). `group_id`
  ties together the rows whose rewards are normalised against each other (GRPO
  groups); `role` names the row's part in the episode ("spy", "civilian",
  "detector", "policy", ...), used for role baselines and metrics; `trained` is
  False for rows that were played but not trained on this step (e.g. the
  detectors during a clue phase). `max_new_tokens` is the generation budget the
  completion was sampled under (DAPO's overlong shaping measures against it).
  `temperature` is the one it was sampled at, when it is not the run's
  (`GRPOConfig.temperature`): the update scores each row under the distribution
  it was drawn from (0, greedy, is scored at 1). `allowed_ids`, for a constrained
  completion (a vote drawn from a few answers), holds the tokens its sampler could
  draw at each position (`Completion.allowed`); the update normalises each
  token's probability over those alone, as the sampler drew it.
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
  max_new_tokens: int | None = None
  temperature: float | None = None
  allowed_ids: Sequence[Sequence[int]] | None = None


@dataclasses.dataclass
class EpisodeBatch:
  """What one `Environment.play_episodes` (so one `Experiment.play_round`) call returns."""

  trajectories: list[Trajectory]
  metrics: dict[str, float]
  # Human-readable account of (at least) one whole episode, appended to rollouts.txt.
  record_text: str
  # Machine-readable facts of every episode, one dict per episode (rollouts JSONL).
  records: list[dict[str, Any]]
  # Step labels for the console and metrics.jsonl (e.g. the spy game's training phase).
  labels: dict[str, str] = dataclasses.field(default_factory=dict)
