"""The LLM judge: prompts, verdict parsing and the judge-weights schedule.

The judge answers `\\boxed{1}` (correct) or `\\boxed{0}` (incorrect); the last
box counts. Anything else is a parse failure, which the environment counts
and scores as 0. Countdown has four templates of increasing strictness
(DESIGN.md, "RLSR"): 1 checks the value and where the numbers come from,
2 adds operator legality, 3 spells out "each number appears, exactly once",
4 lists every condition, requires all of them and forbids an equation.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from rlsvr.envs.self_judge.countdown import CountdownProblem

_BOX_RE = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_VERDICT_INSTRUCTION = ("Think briefly, then give your verdict as \\boxed{1} if the answer is "
                        "correct or \\boxed{0} if it is not.")

_COUNTDOWN_CHECKS = {
    1: ["it evaluates to the target {target}",
        "its numbers come from the given numbers [{nums}]"],
    2: ["it evaluates to the target {target}",
        "its numbers come from the given numbers [{nums}]",
        "it uses only +, -, *, / and parentheses"],
    3: ["it evaluates to the target {target}",
        "each of the given numbers [{nums}] appears, exactly once, and no other number appears",
        "it uses only +, -, *, / and parentheses"],
    4: ["it is a single arithmetic expression, not an equation: it contains no '=' sign",
        "it uses only the operators +, -, *, / and parentheses: no exponents, no other symbols",
        "each of the given numbers [{nums}] appears exactly once: none missing, none repeated, "
        "no number that is not given",
        "computed exactly, it evaluates to the target {target}"],
}
TEMPLATES = tuple(sorted(_COUNTDOWN_CHECKS))


def countdown_prompt(problem: CountdownProblem, answer: str, template: int = 1) -> str:
  """The judge prompt for a Countdown answer, strictness `template` in 1..4."""
  if template not in _COUNTDOWN_CHECKS:
    raise ValueError(f"countdown judge template must be one of {TEMPLATES}, got {template}")
  nums = ", ".join(str(n) for n in problem.nums)
  checks = [c.format(target=problem.target, nums=nums) for c in _COUNTDOWN_CHECKS[template]]
  lead = ("The answer is correct only if ALL of the following conditions hold; if any one "
          "fails, it is incorrect:" if template == 4 else "The answer is correct if:")
  listed = "\n".join(f"{k}. {c}" for k, c in enumerate(checks, 1))
  return (f"You are the judge of a Countdown answer. Using the numbers [{nums}], the task was to "
          f"write an arithmetic expression that equals {problem.target}.\n\n"
          f"Candidate answer:\n{answer}\n\n{lead}\n{listed}\n\n{_VERDICT_INSTRUCTION}")


def integration_prompt(problem_latex: str, answer: str, definite: bool) -> str:
  """The judge prompt for an integration answer: differentiate and compare."""
  if definite:
    how = ("Evaluate the integral yourself (or check the candidate value by a reliable method) "
           "and compare the values.")
  else:
    how = ("Differentiate the candidate antiderivative and compare the result with the "
           "integrand; ignore any constant of integration.")
  return (f"You are the judge of an integration answer.\n\nProblem: ${problem_latex}$\n\n"
          f"Candidate answer (SymPy syntax):\n{answer}\n\n{how}\n\n{_VERDICT_INSTRUCTION}")


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
