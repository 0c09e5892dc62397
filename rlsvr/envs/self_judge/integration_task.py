"""Integration as an RLSR task (`tasks.Task`): LADDER variants or Integration Bee problems.

The problems and the formal verifier are `integration` (SymPy, run in the
killable worker pool); this module is the glue the environment sees. SymPy is
imported on first use, so naming the task (e.g. in a config check) stays cheap.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

from rlsvr.envs.self_judge import tasks
from rlsvr.envs.self_judge.tasks import Verdict


class IntegrationTask:
  """Integrals answered as SymPy text; the judge differentiates (or evaluates) and compares."""

  name = "integration"
  default_judge_template = "integration_1"
  judge_placeholders = ("problem",)
  judge_sections = ("indefinite", "definite")

  def load_problems(self, source: str, *, split: str, limit: int | None,
                    seed: int) -> list[Any]:
    """"ladder" (seeded variants), an Integration Bee JSON or a JSONL file of problem rows.

    Rows the parser cannot read (size limits, floors of integrals, ...) are skipped.
    """
    del split  # every source here is one file or one generator
    from rlsvr.envs.self_judge import ladder  # noqa: PLC0415

    if source == "ladder":
      rows = ladder.generate_variants(seed=seed, limit=limit)
    elif source.endswith(".json") and os.path.isfile(source):  # Integration Bee layout
      with open(source, encoding="utf-8") as f:
        rows = [{"latex": p["problem"], "answer": p.get("answer")}
                for p in json.load(f)["problems"]]
    elif os.path.isfile(source):
      with open(source, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    else:
      raise ValueError(f"data.source={source!r}: use 'ladder', an Integration Bee JSON or a "
                       "JSONL file")
    problems = []
    for row in rows[:limit]:
      try:
        problems.append(ladder.problem_from_row(row))
      except ValueError:
        continue
    return problems

  def as_problem(self, item: Any) -> Any:
    """A `Problem`, a LaTeX string, or a row with "latex" (or "problem") and "answer"."""
    from rlsvr.envs.self_judge import integration  # noqa: PLC0415

    if isinstance(item, integration.Problem):
      return item
    if isinstance(item, str):
      return integration.Problem.from_latex(item)
    return integration.Problem.from_latex(item.get("latex") or item["problem"], item.get("answer"))

  def policy_prompt(self, problem: Any) -> str:
    from rlsvr.envs.self_judge import integration  # noqa: PLC0415

    return integration.prompt(problem)

  def extract_answer(self, response: str) -> str | None:
    return tasks.extract_answer(response)

  def verify(self, problems: Sequence[Any], responses: Sequence[str], *, config: Any,
             pool: Any) -> list[Verdict]:
    from rlsvr.envs.self_judge import integration  # noqa: PLC0415

    return integration.check_answers(
        problems, [self.extract_answer(r) for r in responses], "sympy", pool=pool,
        time_limit=config.verifier_time_limit_s, integral_time_limit=config.integral_time_limit_s)

  def judge_fields(self, problem: Any) -> tuple[str, dict[str, str]]:
    return ("definite" if problem.definite else "indefinite"), dict(problem=problem.display())

  def record_facts(self, problem: Any) -> dict[str, Any]:
    return dict(latex=problem.display(), definite=problem.definite)

  def describe(self, problem: Any) -> str:
    return f"integral: {problem.display()}"


tasks.register_task(IntegrationTask())
