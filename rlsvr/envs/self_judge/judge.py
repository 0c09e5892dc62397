"""The LLM judge: verdict parsing, the judge-weights schedule, prompt shortcuts.

The judge answers `\\boxed{1}` (correct) or `\\boxed{0}` (incorrect); the last
box counts. Anything else is a parse failure, which the environment counts
and scores as 0. The prompts are data (`templates`, `prompts/*.txt`); Countdown
has four of increasing strictness (DESIGN.md, "RLSR"): 1 checks the value and
where the numbers come from, 2 adds operator legality, 3 spells out "each
number appears, exactly once", 4 lists every condition, requires all of them
and forbids an equation.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from rlsvr.envs.self_judge import tasks, templates

_BOX_RE = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")


@functools.lru_cache(maxsize=None)
def _builtin_template(name: str, task: str) -> templates.JudgeTemplate:
  return templates.load_template(name, tasks.get_task(task))  # read once per process


def countdown_prompt(problem: Any, answer: str, template: int = 4) -> str:
  """The judge prompt for a Countdown answer, strictness `template`: prompts/countdown_<n>.txt."""
  return _builtin_template(f"countdown_{template}", "countdown").prompt(problem, answer)


def integration_prompt(problem_latex: str, answer: str, definite: bool) -> str:
  """The judge prompt for an integration answer: differentiate (or evaluate) and compare."""
  values = {"problem": problem_latex, templates.ANSWER: answer}
  return _builtin_template("", "integration").render(
      "definite" if definite else "indefinite", values)


def parse_verdict(response: str) -> int | None:
  """1 or 0 from the last `\\boxed{}` of a judge response; None when it is neither."""
  boxes = _BOX_RE.findall(response)
  if not boxes:
    return None
  return {"1": 1, "0": 0}.get(boxes[-1])


# ---------------------------------------------------------------- judge weights

JUDGE_MODES = ("fixed", "delayed", "online")
INITIAL, POLICY, KEEP = "initial", "policy", "keep"


@dataclasses.dataclass(frozen=True)
class JudgeSchedule:
  """Which weights the judge uses at each training step (steps count from 1).

  `weights_at(step)` tells the trainer what to do before the judge samples:
  "initial" (use the judge's initial weights), "policy" (copy the policy's
  current weights into the judge now) or "keep" (keep the judge's weights
  from the last copy).

  - fixed: always "initial".
  - delayed: "initial" before step `delay_steps`, "policy" at it, "keep"
    after; with `repeat`, "policy" again at every multiple of `delay_steps`.
  - online: always "policy" (the judge is the current policy).
  """

  mode: str = "fixed"
  delay_steps: int = 50
  repeat: bool = False

  def __post_init__(self):
    if self.mode not in JUDGE_MODES:
      raise ValueError(f"judge schedule mode must be one of {JUDGE_MODES}, got {self.mode!r}")
    if self.delay_steps < 1:
      raise ValueError("judge schedule delay_steps must be >= 1")

  @classmethod
  def from_config(cls, config: Any) -> JudgeSchedule:
    """From an object with `judge_weights`, `judge_delay_steps` and `judge_repeat`."""
    return cls(config.judge_weights, config.judge_delay_steps, config.judge_repeat)

  def weights_at(self, step: int) -> str:
    if step < 1:
      raise ValueError(f"steps count from 1, got {step}")
    if self.mode == "fixed":
      return INITIAL
    if self.mode == "online":
      return POLICY
    if step < self.delay_steps:
      return INITIAL
    if step == self.delay_steps or (self.repeat and step % self.delay_steps == 0):
      return POLICY
    return KEEP

  def judge_needs_checkpoint(self, step: int) -> bool:
    """Whether the judge's weights after step `step` differ from both its initial
    weights and the policy's, so the trainer must checkpoint them (delayed only)."""
    return self.mode == "delayed" and step >= self.delay_steps
