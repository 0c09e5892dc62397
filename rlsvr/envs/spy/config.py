"""Configuration of the spy game: one frozen dataclass with per-task defaults."""
from __future__ import annotations

import dataclasses
from typing import Any

from rlsvr.envs.spy import mechanics

TASKS = ("summarisation", "writing", "math", "facts")
VARIANTS = ("parallel", "sequential", "no_spy")
DETECTOR_ORDERS = ("same", "rotated")
SPY_SEATS = ("independent", "stratified")
DETECTOR_GROUPS = ("game", "prompt")
_TASK_ALIASES = {"summarization": "summarisation", "summary": "summarisation",
                 "story": "writing", "creative_writing": "writing"}

# Per task: players, detectors per game, mask fraction, truncation in words (DESIGN.md).
_TASK_DEFAULTS = {
    "summarisation": dict(num_players=4, rollout_n=8, mask_fraction=0.2, truncate_words=16000),
    "writing": dict(num_players=5, rollout_n=8, mask_fraction=0.2, truncate_words=128),
    "math": dict(num_players=5, rollout_n=4, mask_fraction=0.4, truncate_words=1000),
    # Not in the paper: summarisation of a ~25-word fact sheet (`rlsvr.data.bundled`), the
    # game at a size a small model plays on a CPU; the summarisation game's players and mask.
    "facts": dict(num_players=4, rollout_n=8, mask_fraction=0.2, truncate_words=200),
}


def canonical_task(task: str) -> str:
  """The canonical task name ("summarisation", "writing", "math")."""
  name = _TASK_ALIASES.get(task, task)
  if name not in TASKS:
    raise ValueError(f"unknown spy task {task!r}; expected one of {TASKS}")
  return name


@dataclasses.dataclass(frozen=True)
class SpyGameConfig:
  """How a spy game is played and rewarded.

  Attributes:
    task: "summarisation", "writing", "math" or "facts" (summarising a short
      fact sheet: the summarisation game for small models).
    num_players: players per game (n), numbered 1..n.
    rollout_n: detectors per game; they all judge the same game.
    detector_orders: "same" (the paper: every detector reads the players as 1..n)
      or "rotated": detector r reads the same outputs with the players' order
      rotated by r mod n and renumbered 1..n (its vote is mapped back), so in
      a group of a multiple of n detectors the spy sits at every position
      equally often and a preference for a position earns nothing. Not in the
      paper: off by default.
    detector_groups: which detectors' votes are normalised together: "game" (DESIGN.md:
      a game's detectors form one group) or "prompt": the detectors that read the same
      prompt, one group per order under rotated orders (GRPO's group: completions of one
      prompt). Per prompt, an order whose vote rarely names the spy is scaled by its own
      spread, so its lesson is not drowned by the orders the vote already gets right;
      on the main job it did not help (docs/results.md, spy game). The same groups as
      "game" with the paper's one order. Not in the paper: off by default.
    spy_seats: "independent" (the paper: each game seats its spy at random) or
      "stratified": the games played together seat their spies at every seat
      equally often (in a random order, the remainder at distinct seats), so each
      game's spy seat stays uniform while a step's games cancel a preference for
      a position as rotated orders do, with one prompt per game instead of n
      (docs/results.md, spy game). The parallel game only. Not in the paper.
    mask_fraction: share of the spy's characters masked (stated in prompts).
    truncate_words: inputs are cut to their first this-many words.
    rounds: how many times every player writes (later rounds see earlier ones).
    variant: "parallel" (seeded spy), "sequential" (players see earlier
      outputs, the spy speaks last) or "no_spy" (nobody is masked; the most
      voted player takes the spy's reward; clue phase only).
    spy_view: "masked" (the spy gets the masked input) or "none" (the spy gets
      no input; the sequential variant's writing and math setting).
    vote_pick: which box of a detector response is its vote: "last" or "first".
    detection_reward: "paper" (1 for the spy) or "released" (the shaping).
    beta, lam: performance-reward coefficients β and λ.
    baseline_momentum: momentum of the per-role EMA reward baselines.
    baseline_order: "pre_update" (subtract the EMA from before this step) or
      "released" (fold the step in first, then subtract: the released code).
    training_phase: "interactive", "clue" or "decision".
    cycle_length: steps per phase when interactive.
    joint: train players and detectors every step, whatever the phase.
    player_max_new_tokens, detector_max_new_tokens: per-phase length limits.
    answer_prefill: start every reply with its format marker (players `Answer:`,
      math players `\\boxed{Problem:`, fact-sheet players `Answer: Name:`,
      detectors `\\boxed{`), placed after the
      chat template's assistant header. For models too small to follow the
      format (the CPU default); the marker is prompt, not trained on, and the
      parsers read marker + completion. Not in the paper: off by default.
    constrained_vote: a detector's reply is `\\boxed{` and then one of `1}` ..
      `n}`, `N/A}`, drawn by the sampler from the model's distribution
      restricted to these answers (`rlsvr.sampling.choices`); the prompt lists
      them and asks for no reasoning. For models too small to write a valid vote
      (the CPU default); not in the paper: off by default.
    vote_abstain: whether `N/A}` is one of the constrained vote's answers (and the
      prompt offers it). An abstention scores 0, as a miss does, so the expected
      policy gradient raises each number's logit in proportion to its probability
      while abstentions fade: the vote's preferred position sharpens, whatever the
      outputs say. Without it, a vote for a fixed position gets zero expected
      gradient under rotated orders (docs/results.md, spy game). Needs
      constrained_vote (a free vote may always write N/A).
    sampling: extra keyword arguments passed to every `sample` call
      (temperature, top_p, ...). A dict, so the config is not hashable.
    detector_temperature: the detectors' sampling temperature, when it is not
      `sampling`'s (None). A constrained vote is one draw from a few answers: at
      a low temperature the position the model prefers takes nearly all votes
      and GRPO's gradient sharpens it further, while the players write better
      there (docs/results.md, spy game). Each row's temperature goes to the
      update (`Trajectory.temperature`). Not in the paper: unset by default.
    player_stop_strings: the players' outputs (and the plain task prompt's) end
      right after the first of these (the sampler's `stop_strings`), e.g. `("\\n",)`
      for a one-line answer. Not in the paper: none by default.
  """

  task: str = "summarisation"
  num_players: int = 4
  rollout_n: int = 8
  detector_orders: str = "same"
  detector_groups: str = "game"
  spy_seats: str = "independent"
  mask_fraction: float = 0.2
  truncate_words: int = 16000
  rounds: int = 1
  variant: str = "parallel"
  spy_view: str = "masked"
  vote_pick: str = "last"
  detection_reward: str = "paper"
  beta: float = 0.1
  lam: float = 0.1
  baseline_momentum: float = 0.9
  baseline_order: str = "pre_update"
  training_phase: str = "interactive"
  cycle_length: int = 1
  joint: bool = False
  player_max_new_tokens: int = 4096
  detector_max_new_tokens: int = 4096
  answer_prefill: bool = False
  constrained_vote: bool = False
  vote_abstain: bool = True
  sampling: dict[str, Any] = dataclasses.field(default_factory=dict)
  detector_temperature: float | None = None
  player_stop_strings: tuple[str, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "task", canonical_task(self.task))
    if isinstance(self.player_stop_strings, list):  # From a JSON or YAML config.
      object.__setattr__(self, "player_stop_strings", tuple(self.player_stop_strings))
    checks = [
        (self.variant in VARIANTS, f"variant must be one of {VARIANTS}"),
        (self.spy_view in ("masked", "none"), "spy_view must be 'masked' or 'none'"),
        (self.detector_orders in DETECTOR_ORDERS,
         f"detector_orders must be one of {DETECTOR_ORDERS}"),
        (self.detector_groups in DETECTOR_GROUPS,
         f"detector_groups must be one of {DETECTOR_GROUPS}"),
        (self.spy_seats in SPY_SEATS, f"spy_seats must be one of {SPY_SEATS}"),
        (self.spy_seats == "independent" or self.variant == "parallel",
         "spy_seats='stratified' is for the parallel game (the sequential spy sits last)"),
        (self.num_players >= 2, "num_players must be >= 2"),
        (self.rollout_n >= 1, "rollout_n must be >= 1"),
        (self.rounds >= 1, "rounds must be >= 1"),
        (0.0 <= self.mask_fraction <= 1.0, "mask_fraction must be in [0, 1]"),
        (self.truncate_words >= 1, "truncate_words must be >= 1"),
        (self.vote_pick in ("last", "first"), "vote_pick must be 'last' or 'first'"),
        (self.detection_reward in mechanics.DETECTION_MODES,
         f"detection_reward must be one of {mechanics.DETECTION_MODES}"),
        (self.training_phase in mechanics.TRAINING_PHASES,
         f"training_phase must be one of {mechanics.TRAINING_PHASES}"),
        (self.cycle_length >= 1, "cycle_length must be >= 1"),
        (self.vote_abstain or self.constrained_vote,
         "vote_abstain=False needs constrained_vote (a free vote may always write N/A)"),
        (self.detector_temperature is None or self.detector_temperature >= 0,
         "detector_temperature must be >= 0"),
        (isinstance(self.player_stop_strings, tuple)
         and all(isinstance(x, str) and x for x in self.player_stop_strings),
         "player_stop_strings must be a tuple of non-empty strings"),
        (0.0 <= self.baseline_momentum <= 1.0, "baseline_momentum must be in [0, 1]"),
        (self.baseline_order in mechanics.BASELINE_ORDERS,
         f"baseline_order must be one of {mechanics.BASELINE_ORDERS}"),
        (self.variant != "no_spy" or (self.training_phase == "clue" and not self.joint),
         "the no_spy ablation trains the clue phase only (training_phase='clue', joint=False)"),
    ]
    for ok, message in checks:
      if not ok:
        raise ValueError(f"SpyGameConfig: {message}")

  def sampling_of(self, role: str) -> dict[str, Any]:
    """The sampling arguments of `role`'s calls ("player" or "detector")."""
    if role == "detector" and self.detector_temperature is not None:
      return {**self.sampling, "temperature": self.detector_temperature}
    if role == "player" and self.player_stop_strings:
      return {**self.sampling, "stop_strings": self.player_stop_strings}
    return dict(self.sampling)

  @classmethod
  def for_task(cls, task: str, variant: str = "parallel", **overrides: Any) -> SpyGameConfig:
    """DESIGN.md defaults for `task` and `variant`, then `overrides`.

    Sequential is the two-player game: summarisation masks 50%, writing and
    math give the spy no input. The no-spy ablation trains the clue phase.
    """
    task = canonical_task(task)
    fields: dict[str, Any] = dict(task=task, variant=variant, **_TASK_DEFAULTS[task])
    if variant == "sequential":
      fields["num_players"] = 2
      if task in ("summarisation", "facts"):
        fields["mask_fraction"] = 0.5
      else:
        fields["spy_view"] = "none"
    elif variant == "no_spy":
      fields["training_phase"] = "clue"
    fields.update(overrides)
    return cls(**fields)
