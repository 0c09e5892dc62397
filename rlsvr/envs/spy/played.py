"""What a game holds while `game.SpyGame` plays it, and the rows it becomes.

  Game      one game: its document, the spy, every player turn and detector vote
  Turn      one player output (one round of one player)
  Detector  one detector's reply and its parsed vote
  Row       a trajectory of a game, the turn or detector it came from, its raw reward
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from rlsvr.envs.base import Completion, Trajectory
from rlsvr.envs.spy import mechanics


@dataclasses.dataclass(frozen=True)
class Turn:
  """One player output (one round of one player)."""

  round: int
  player: int
  prompt: str
  prompt_ids: list[int]
  completion: Completion
  text: str  # The reply, prefill included.
  public: mechanics.PublicOutput  # What the other players and the detectors see.


@dataclasses.dataclass(frozen=True)
class Detector:
  """One detector's vote on a game."""

  completion: Completion
  response: str  # The reply, prefill included.
  parsed: mechanics.VoteParse  # The vote as written: a position in `order`.
  prompt_ids: list[int]
  order: tuple[int, ...]  # order[k - 1]: the player shown as "Player k".

  @property
  def vote(self) -> mechanics.Vote:
    """The vote for a player (the position it names, mapped through `order`)."""
    vote = self.parsed.vote
    return self.order[vote - 1] if isinstance(vote, int) else vote


@dataclasses.dataclass
class Game:
  index: int
  item_id: str
  reference: str
  spy: int | None  # 1-based; the no-spy variant fills it in from the votes
  views: list[str | None]  # per player, index k - 1
  mask: mechanics.MaskedText | None
  turns: list[Turn] = dataclasses.field(default_factory=list)
  detection_prompt: str = ""  # The first detector's, for the record.
  detectors: list[Detector] = dataclasses.field(default_factory=list)

  def public_outputs(self, order: Sequence[int] = ()) -> list[tuple[int, int, str]]:
    """(round, player, public text) of every turn; with `order`, player order[k - 1] is
    shown as player k, and the turns are listed by round, then by shown number."""
    if not order:
      return [(t.round, t.player, t.public.text) for t in self.turns]
    shown = {player: k for k, player in enumerate(order, start=1)}
    return sorted((t.round, shown[t.player], t.public.text) for t in self.turns)

  def player_texts(self, num_players: int) -> list[str]:
    """Every player's public outputs over all rounds, one text per player (index k - 1)."""
    texts = [[] for _ in range(num_players)]
    for turn in self.turns:
      texts[turn.player - 1].append(turn.public.text)
    return ["\n".join(t) for t in texts]

  def votes(self) -> list[mechanics.Vote]:
    return [d.vote for d in self.detectors]


@dataclasses.dataclass(frozen=True)
class Row:
  """A trajectory of a game, the player turn or detector it came from, its raw reward."""

  game: Game
  source: Turn | Detector
  trajectory: Trajectory  # Its reward and baseline are set once the whole batch is known.
  raw_reward: float


def trajectory(*, prompt_ids: Sequence[int], completion: Completion, group: int, role: str,
               trained: bool, max_new_tokens: int, temperature: float | None) -> Trajectory:
  """The row of one completion, its reward and baseline still to be set; `temperature`
  is the one it was sampled at (None: the run's)."""
  return Trajectory(prompt_ids=list(prompt_ids), completion_ids=list(completion.ids),
                    logprobs=list(completion.logprobs), reward=0.0, group_id=group, role=role,
                    trained=trained, finish_reason=completion.finish_reason,
                    max_new_tokens=max_new_tokens, temperature=temperature,
                    allowed_ids=completion.allowed)
