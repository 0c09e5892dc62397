"""DAPO's dynamic sampling (verl `algorithm.filter_groups`): train only on groups with signal.

A group whose raw rewards are all equal gets advantage 0 and teaches nothing;
with `grpo.filter_groups` the trainer drops such groups and plays more rounds
(new games or problems from the item stream) until the batch holds as many
informative groups as one round trains, or `max_num_gen_batches` rounds were
played. Then it trains on the informative groups it has; when there are none
at all it trains on the first round's groups (every advantage 0, as without
filtering), so a step always makes its update.

Host side and environment-agnostic: it sees only `Trajectory` rows.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from rlsvr.rl.rollout import EpisodeBatch, Trajectory


@dataclasses.dataclass
class PlayedStep:
  """What one step played (all rounds) and what it trains on."""

  rows: list[Trajectory]  # The rows to build the batch from (kept groups, ids unique).
  played: list[Trajectory]  # Every row of every round (ids unique): rollout metrics.
  rounds: list[EpisodeBatch]  # Each round's environment output (records, metrics).
  metrics: dict[str, float]

  def record(self) -> EpisodeBatch:
    """What the rollout logs show: round 0's text and metrics, every round's records
    (tagged with their round when there were several)."""
    first = self.rounds[0]
    if len(self.rounds) == 1:
      return first
    return dataclasses.replace(first, records=[
        dict(rec, round=r) for r, episode in enumerate(self.rounds) for rec in episode.records])


def groups_of(rows: Sequence[Trajectory]) -> dict[int, list[Trajectory]]:
  """Rows by group id, in order of first appearance."""
  groups: dict[int, list[Trajectory]] = {}
  for row in rows:
    groups.setdefault(row.group_id, []).append(row)
  return groups


def is_informative(group: Sequence[Trajectory]) -> bool:
  """Two or more rows whose raw rewards are not all equal."""
  return len(group) > 1 and len({row.reward for row in group}) > 1


def play_filtered(play_round: Callable[[int], EpisodeBatch], max_rounds: int) -> PlayedStep:
  """Plays rounds 0, 1, ... with `play_round(round)` until enough informative trained groups.

  The target is the number of trained groups of round 0 (one step's batch).
  Group ids are offset per round so rounds never share a group.
  """
  if max_rounds < 1:
    raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
  rounds: list[EpisodeBatch] = []
  played: list[Trajectory] = []
  kept: list[list[Trajectory]] = []
  first_trained: list[list[Trajectory]] = []
  target = dropped = offset = 0
  for r in range(max_rounds):
    episode = play_round(r)
    rounds.append(episode)
    rows = [dataclasses.replace(t, group_id=t.group_id + offset) for t in episode.trajectories]
    offset = max([offset - 1, *(t.group_id for t in rows)]) + 1
    played += rows
    trained = [g for g in groups_of(rows).values() if any(t.trained for t in g)]
    if r == 0:
      target, first_trained = len(trained), trained
    for group in trained:
      if is_informative(group) and len(kept) < target:
        kept.append(group)
      else:
        dropped += 1
    if len(kept) >= target:
      break
  metrics = {"filter/rounds": float(len(rounds)), "filter/target_groups": float(target),
             "filter/groups_kept": float(len(kept)), "filter/groups_dropped": float(dropped),
             "filter/batch_full": float(len(kept) >= target)}
  chosen = kept or first_trained
  return PlayedStep([t for g in chosen for t in g], played, rounds, metrics)


def play_step(play_round: Callable[[int], EpisodeBatch], *, filter_groups: bool,
              max_rounds: int) -> PlayedStep:
  """One step's play: a single round, or `play_filtered` with `filter_groups`."""
  if filter_groups:
    return play_filtered(play_round, max_rounds)
  episode = play_round(0)
  return PlayedStep(episode.trajectories, episode.trajectories, [episode], {})
