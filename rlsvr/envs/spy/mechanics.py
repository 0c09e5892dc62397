"""Spy-game mechanics: truncation, masking, public outputs, votes, rewards, phases, seats.

Everything here is pure host-side Python on strings and small lists, so the
notebooks and the tests can call it directly. Conventions:

- Players are numbered 1..n everywhere (prompts, votes, `spy`); lists indexed
  by player hold player k at index k - 1.
- Model outputs are hostile: parsing scans each string once (no regex that
  can backtrack), and never evaluates anything.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Literal, Sequence

import numpy as np

Vote = int | Literal["N/A"] | None
ABSTAIN = "N/A"
PHASES = ("clue", "decision")
TRAINING_PHASES = ("interactive", "clue", "decision")
DETECTION_MODES = ("paper", "released")

_WORD_RE = re.compile(r"\S+")
# Tokens of the box scanner: a box opening, or any brace.
_BRACE_RE = re.compile(r"\\boxed\{|[{}]")
_ASCII_INT_RE = re.compile(r"[0-9]+")
# Longer digit strings cannot be a player number; bounding them also keeps
# int() away from CPython's huge-integer conversion limit.
_MAX_VOTE_DIGITS = 6


def truncate_words(text: str, max_words: int) -> str:
  """The prefix of `text` up to the end of its `max_words`-th word.

  Words are maximal runs of non-whitespace; the original spacing and line
  breaks inside the prefix are kept, trailing text after the last kept word is
  dropped. A text with at most `max_words` words is returned unchanged.
  """
  if max_words < 1:
    raise ValueError(f"max_words must be >= 1, got {max_words}")
  for i, match in enumerate(_WORD_RE.finditer(text), start=1):
    if i == max_words:
      return text[:match.end()]
  return text


@dataclasses.dataclass(frozen=True)
class MaskedText:
  """A text with one contiguous span replaced by `*` (see `mask_span`).

  `text` has the same length as the input; `text[start:start + length]` is the
  masked span, all `*`.
  """

  text: str
  start: int
  length: int


def span_length(num_chars: int, fraction: float) -> int:
  """Masked span length: max(1, round(num_chars * fraction)), at most num_chars."""
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"mask fraction must be in [0, 1], got {fraction}")
  if num_chars == 0:
    return 0
  # Python's round (half to even), as the released code rounds.
  return min(num_chars, max(1, round(num_chars * fraction)))


def mask_span(text: str, fraction: float, seed: int | np.random.Generator) -> MaskedText:
  """Replaces one contiguous character span of `text` with as many `*`.

  The span has `span_length(len(text), fraction)` characters and starts
  uniformly in [0, len - span]. `seed` is an int or a numpy Generator (which
  advances). An empty text is returned unchanged with a zero-length span.
  """
  length = span_length(len(text), fraction)
  rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
  start = int(rng.integers(0, len(text) - length + 1)) if length else 0
  masked = text[:start] + "*" * length + text[start + length:]
  return MaskedText(text=masked, start=start, length=length)


def find_boxes(text: str) -> list[str]:
  """Contents of the complete top-level `\\boxed{...}` in `text`, in order.

  One linear scan with a brace stack: braces inside a box nest, a box left
  open (e.g. cut off by the length limit) is not complete and is dropped, and
  a box inside another box belongs to the outer box's content.
  """
  boxes = []
  # Stack of (is_box_opening, content start); only box depth matters for output.
  stack: list[tuple[bool, int]] = []
  box_depth = 0
  for match in _BRACE_RE.finditer(text):
    token = match.group()
    if token == "}":
      if not stack:
        continue
      is_box, start = stack.pop()
      if is_box:
        box_depth -= 1
        if box_depth == 0:
          boxes.append(text[start:match.start()])
    else:
      is_box = token != "{"
      stack.append((is_box, match.end()))
      box_depth += is_box
  return boxes


@dataclasses.dataclass(frozen=True)
class VoteParse:
  """A parsed detector response: the vote and a human-readable status.

  `status` is "vote", "abstain" or "invalid: <why>"; `box` is the chosen
  box's content (whitespace removed), or None when there was no complete box.
  """

  vote: Vote
  status: str
  box: str | None


def parse_vote_detail(text: str, num_players: int, pick: str = "last") -> VoteParse:
  """Like `parse_vote`, with the reason for an invalid vote."""
  if pick not in ("last", "first"):
    raise ValueError(f"pick must be 'last' or 'first', got {pick!r}")
  boxes = find_boxes(text)
  if not boxes:
    return VoteParse(None, "invalid: no complete \\boxed{}", None)
  box = "".join(boxes[-1 if pick == "last" else 0].split())
  if box.upper() in ("N/A", "NA"):
    return VoteParse(ABSTAIN, "abstain", box)
  if not _ASCII_INT_RE.fullmatch(box):
    return VoteParse(None, "invalid: box is not a player number", box)
  digits = box.lstrip("0")
  player = int(digits) if digits and len(digits) <= _MAX_VOTE_DIGITS else 0
  if not 1 <= player <= num_players:
    return VoteParse(None, f"invalid: not a player in 1..{num_players}", box)
  return VoteParse(player, "vote", box)


def parse_vote(text: str, num_players: int, pick: str = "last") -> Vote:
  """The vote in a detector response.

  Reads the last complete `\\boxed{...}` (`pick="first"`: the first) with all
  whitespace removed: `N/A` or `NA` in any case is an abstention (returns
  "N/A"); ASCII digits naming a player in 1..num_players are a vote (returns
  the int, leading zeros allowed); anything else, including no complete box,
  full-width digits or several numbers, is invalid (returns None).
  """
  return parse_vote_detail(text, num_players, pick).vote


def _is_player(vote: Vote, num_players: int) -> bool:
  return isinstance(vote, int) and not isinstance(vote, bool) and 1 <= vote <= num_players


def vote_counts(votes: Iterable[Vote], num_players: int) -> list[int]:
  """Valid votes per player (index k - 1 for player k); others count for none."""
  counts = [0] * num_players
  for vote in votes:
    if _is_player(vote, num_players):
      counts[vote - 1] += 1
  return counts


def spy_caught(votes: Iterable[Vote], spy: int, num_players: int) -> bool:
  """The vote's verdict: the spy got strictly more valid votes than every other player (a
  tie for the most is no catch, and neither is a game without valid votes)."""
  counts = vote_counts(votes, num_players)
  return counts[spy - 1] > max(c for k, c in enumerate(counts) if k != spy - 1)


def performance_rewards(
    votes: Iterable[Vote],
    spy: int,
    num_players: int,
    beta: float = 0.1,
    lam: float = 0.1,
) -> list[float]:
  """Raw performance rewards r_P of one game, player k at index k - 1.

  With valid-vote counts m, civilians' mean count c and Δ = m_spy - c, the spy
  gets -β·Δ and civilian j gets β·Δ/(n-1) - λ·(m_j - c). Abstentions and
  invalid votes count for nobody. The rewards sum to zero. `spy` is 1-based.
  """
  if num_players < 2:
    raise ValueError(f"a game needs at least 2 players, got {num_players}")
  if not 1 <= spy <= num_players:
    raise ValueError(f"spy must be a player in 1..{num_players}, got {spy}")
  counts = vote_counts(votes, num_players)
  civilians = [k for k in range(num_players) if k != spy - 1]
  civ_mean = sum(counts[k] for k in civilians) / len(civilians)
  delta = counts[spy - 1] - civ_mean
  rewards = [0.0] * num_players
  rewards[spy - 1] = -beta * delta
  for k in civilians:
    rewards[k] = beta * delta / len(civilians) - lam * (counts[k] - civ_mean)
  return rewards


def most_voted(votes: Iterable[Vote], num_players: int) -> int:
  """The player with the most valid votes, ties (and no votes) to the lowest id."""
  counts = vote_counts(votes, num_players)
  return counts.index(max(counts)) + 1


def detection_reward(vote: Vote, spy: int, mode: str = "paper") -> float:
  """A detector's reward for one vote (as `parse_vote` returns it).

  `paper`: 1 for a vote for the spy, else 0. `released`: the released code's
  shaping 0.3·(2·fmt_ok - 1) + 1.2·a + 0.99·[a > 0] with a = 1 (spy), -0.5
  (abstention), -1 (wrong player or invalid); fmt_ok means a vote or an
  abstention was parsed. Values: spy 2.49, N/A -0.3, wrong -0.9, invalid -1.5.
  """
  hit = isinstance(vote, int) and not isinstance(vote, bool) and vote == spy
  if mode == "paper":
    return 1.0 if hit else 0.0
  if mode == "released":
    fmt_ok = vote is not None
    a = 1.0 if hit else (-0.5 if vote == ABSTAIN else -1.0)
    return 0.3 * (2 * fmt_ok - 1) + 1.2 * a + 0.99 * (a > 0)
  raise ValueError(f"detection reward mode must be one of {DETECTION_MODES}, got {mode!r}")


def phase_at(step: int, training_phase: str, cycle_length: int = 1) -> str:
  """The phase trained at `step` (steps start at 1): "clue" or "decision".

  `interactive` alternates: with pos = (step - 1) mod (2·cycle_length), the
  first `cycle_length` steps of each period train the decision phase, the
  next `cycle_length` the clue phase.
  """
  if step < 1:
    raise ValueError(f"steps start at 1, got {step}")
  if cycle_length < 1:
    raise ValueError(f"cycle_length must be >= 1, got {cycle_length}")
  if training_phase in PHASES:
    return training_phase
  if training_phase != "interactive":
    raise ValueError(f"training_phase must be one of {TRAINING_PHASES}, got {training_phase!r}")
  pos = (step - 1) % (2 * cycle_length)
  return "decision" if pos < cycle_length else "clue"


@dataclasses.dataclass(frozen=True)
class PublicOutput:
  """What the other players and the detectors see of one player's output."""

  text: str
  ok: bool
  status: str


def public_output(text: str, task: str) -> PublicOutput:
  """Extracts the public part of a player's output.

  Summaries and stories: everything after "Answer:" on the first line that
  starts with it (leading spaces allowed), stripped. Math: the content of the
  first complete `\\boxed{...}`. When the format is missing the public text
  is empty, so the detectors see a player who gave no answer.
  """
  if task == "math":
    boxes = find_boxes(text)
    if not boxes:
      return PublicOutput("", False, "no complete \\boxed{}")
    return PublicOutput(boxes[0].strip(), True, "ok")
  offset = 0
  for line in text.splitlines(keepends=True):
    stripped = line.lstrip()
    if stripped.startswith("Answer:"):
      rest = stripped[len("Answer:"):] + text[offset + len(line):]
      return PublicOutput(rest.strip(), True, "ok")
    offset += len(line)
  return PublicOutput("", False, "no line starting with 'Answer:'")


def role_means(rewards: Sequence[float], roles: Sequence[str]) -> dict[str, float]:
  """Mean reward per role."""
  sums: dict[str, list[float]] = {}
  for reward, role in zip(rewards, roles, strict=True):
    sums.setdefault(role, []).append(reward)
  return {role: float(np.mean(values)) for role, values in sums.items()}


BASELINE_ORDERS = ("pre_update", "released")


class RoleBaselines:
  """Per-role EMA baselines: b <- m·b + (1 - m)·mean(role rewards in the batch).

  `for_batch` gives the baselines a batch's rewards are centred on and folds
  the batch in. Order `pre_update` (default, as SPIRAL's role baselines)
  subtracts the EMA from before this batch, so a reward is never centred on
  itself; `released` (the released SpyRL code) folds the batch in first and
  subtracts the updated EMA. A role starts at 0. The state is a plain dict for
  checkpoints.
  """

  def __init__(self, momentum: float = 0.9, order: str = "pre_update"):
    if not 0.0 <= momentum <= 1.0:
      raise ValueError(f"baseline momentum must be in [0, 1], got {momentum}")
    if order not in BASELINE_ORDERS:
      raise ValueError(f"baseline order must be one of {BASELINE_ORDERS}, got {order!r}")
    self.momentum = momentum
    self.order = order
    self.values: dict[str, float] = {}

  def update(self, rewards: Sequence[float], roles: Sequence[str]) -> dict[str, float]:
    """Folds one batch in; returns the updated baselines of every role seen."""
    for role, mean in role_means(rewards, roles).items():
      old = self.values.get(role, 0.0)
      self.values[role] = self.momentum * old + (1.0 - self.momentum) * mean
    return dict(self.values)

  def current(self, roles: Sequence[str]) -> dict[str, float]:
    """The baseline of each role in `roles` before any batch of this step is folded in."""
    return {role: self.values.get(role, 0.0) for role in roles}

  def for_batch(self, rewards: Sequence[float], roles: Sequence[str]) -> dict[str, float]:
    """The baseline of each role in `roles` for this batch (by `order`); folds it in."""
    before = self.current(roles)
    after = self.update(rewards, roles)
    return before if self.order == "pre_update" else {role: after[role] for role in roles}

  def state_dict(self) -> dict[str, float]:
    return dict(self.values)

  def load_state_dict(self, state: dict[str, float]) -> None:
    self.values = {str(k): float(v) for k, v in state.items()}


def stratified_seats(count: int, num_players: int, rng: np.random.Generator) -> list[int]:
  """Spy seats (1-based) of `count` games: every seat equally often, the remainder at
  distinct seats, in a random order (`SpyGameConfig.spy_seats`)."""
  full, rest = divmod(count, num_players)
  seats = np.arange(1, num_players + 1)
  drawn = np.concatenate([np.tile(seats, full), rng.choice(seats, rest, replace=False)])
  return [int(s) for s in rng.permutation(drawn)]


def rotated_order(num_players: int, shift: int) -> tuple[int, ...]:
  """The players in the order shown as 1..n, rotated by `shift` (mod n)."""
  return tuple((k + shift) % num_players + 1 for k in range(num_players))
