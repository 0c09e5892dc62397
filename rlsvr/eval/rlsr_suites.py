"""RLSR evaluation: Countdown and Integration Bee accuracy, and the generator-verifier gap.

Datasets:
  countdown              TinyZero test file (default), "generate", "hub" or a JSONL path;
                         accuracy by the formal check (`countdown.check`)
  integration_bee        Integration Bee base set (base-set.json), indefinite and definite
  integration_bee_hard   the hard set (hard-set.json)
                         accuracy by the formal verifier (`integration.check_answers`)

With `gap` on, each problem also yields two candidate answers, one correct and
one incorrect: Countdown's correct one from a brute-force solver, the
Integration Bee's from the official key (kept only when the verifier accepts
it); the incorrect one perturbs the correct one (a number, an operator, a
factor or a term) until the verifier rejects it. The model then judges every
candidate with the RLSR judge prompt; its verification accuracy on this
balanced set stands next to its generation accuracy on the same problems (the
RLSR paper's Figure 4), both with standard errors. A judge reply without a
verdict counts as wrong.
"""
from __future__ import annotations

import itertools
import random
import re
from fractions import Fraction
from typing import Any, Sequence

from rlsvr.data import sources
from rlsvr.eval.runner import mean_stderr, percent_summary

DATASETS = ("countdown", "integration_bee", "integration_bee_hard")
_INTEGRATION_FILES = {"integration_bee": "integration_bee/base-set.json",
                      "integration_bee_hard": "integration_bee/hard-set.json"}


# ---------------------------------------------------------------- problems


def load_countdown(spec: str = "", *, limit: int = 0, seed: int = 0) -> list[tuple[str, Any]]:
  """(id, CountdownProblem) pairs from `spec`: "", "generate", "hub" or a JSONL path."""
  from rlsvr.envs.self_judge import countdown  # noqa: PLC0415

  if spec == "generate":
    problems = countdown.generate(limit or 100, seed=seed)
  elif spec == "hub":
    try:
      problems = countdown.load_hub(split="train", limit=limit or None)
    except Exception as e:  # noqa: BLE001  (datasets raises many types)
      raise sources.DataError(f"cannot load hub {countdown.HUB_DATASET} ({type(e).__name__}); "
                           "offline? use a local TinyZero JSONL file") from None
  else:
    path = spec or sources.shared_file("countdown/countdown_tinyzero_test.jsonl")
    problems = countdown.load_jsonl(str(path))
  problems = problems[:limit] if limit else problems
  return [(f"{i}", p) for i, p in enumerate(problems)]


def load_integration(name: str, spec: str = "", *, limit: int = 0) -> list[dict[str, Any]]:
  """Integration Bee rows {id, latex, answer, source} (the benchmark's JSON layout)."""
  rows = sources.load_rows(name, spec, local=_INTEGRATION_FILES.get(name), hub=None, limit=limit)
  return [dict(id=str(r.get("id", i)), latex=str(sources.first_field(r, ("problem", "latex"), name)),
               answer=r.get("answer"), source=r.get("source", "")) for i, r in enumerate(rows)]


def solve_countdown(nums: Sequence[int], target: int) -> str | None:
  """An expression reaching `target` with every number once (exhaustive search), or None."""
  def search(pool: list[tuple[Fraction, str]]) -> str | None:
    if len(pool) == 1:
      return pool[0][1] if pool[0][0] == target else None
    for i, j in itertools.permutations(range(len(pool)), 2):
      (a, ea), (b, eb) = pool[i], pool[j]
      rest = [p for k, p in enumerate(pool) if k not in (i, j)]
      options = [(a + b, "+"), (a - b, "-"), (a * b, "*")] + ([(a / b, "/")] if b else [])
      for value, op in options:
        found = search(rest + [(value, f"({ea} {op} {eb})")])
        if found:
          return found
    return None

  found = search([(Fraction(n), str(n)) for n in nums])
  return found[1:-1] if found and found.startswith("(") else found


def _countdown_perturbations(expr: str, rng: random.Random) -> list[str]:
  out = []
  numbers = list(re.finditer(r"\d+", expr))
  for m in numbers:
    out.append(expr[:m.start()] + str(int(m.group()) + rng.choice([1, 2, 3])) + expr[m.end():])
  for m in re.finditer(r"[-+*/]", expr):
    for op in "+-*/":
      if op != m.group():
        out.append(expr[:m.start()] + op + expr[m.end():])
  rng.shuffle(out)
  return out


# ---------------------------------------------------------------- tasks


class _Countdown:
  """Countdown problems, prompts, checks and gap candidates."""

  def __init__(self, ctx, name: str):
    c = ctx.c
    self.problems = dict(load_countdown(c.data.get(name, ""), limit=c.limit, seed=c.seed))
    self.template = c.judge.template

  def prompt(self, pid: str) -> str:
    from rlsvr.envs.self_judge import countdown  # noqa: PLC0415

    return countdown.prompt(self.problems[pid])

  def check(self, pids: Sequence[str], responses: Sequence[str]) -> list[Any]:
    from rlsvr.envs.self_judge import countdown  # noqa: PLC0415

    return [countdown.check(r, self.problems[p].nums, self.problems[p].target)
            for p, r in zip(pids, responses)]

  def facts(self, pid: str) -> dict[str, Any]:
    p = self.problems[pid]
    return dict(nums=list(p.nums), target=p.target)

  def candidates(self, pids: Sequence[str], seed: int) -> list[tuple[str, str, bool]]:
    out = []
    for pid in pids:
      p = self.problems[pid]
      good = p.solution or solve_countdown(p.nums, p.target)
      if good is None:
        continue
      bad = next((cand for cand in _countdown_perturbations(good, random.Random(f"{seed}-{pid}"))
                  if not self.check([pid], [f"<answer>{cand}</answer>"])[0].correct), None)
      if bad is not None:
        out += [(pid, good, True), (pid, bad, False)]
    return out

  def judge_prompt(self, pid: str, answer: str) -> str:
    from rlsvr.envs.self_judge import judge  # noqa: PLC0415

    return judge.countdown_prompt(self.problems[pid], answer, self.template)


def _reference_as_sympy(problem) -> str:
  """The official LaTeX key as SymPy text (worker side)."""
  import sympy  # noqa: PLC0415

  from rlsvr.envs.self_judge import integration  # noqa: PLC0415

  return sympy.sstr(integration.parse_answer(problem, str(problem.reference), "latex"))


class _Integration:
  """Integration Bee problems (parsed in workers), prompts, checks and gap candidates."""

  def __init__(self, ctx, name: str):
    from rlsvr import workers  # noqa: PLC0415
    from rlsvr.envs.self_judge import integration  # noqa: PLC0415

    c = ctx.c
    self.rows = {r["id"]: r for r in load_integration(name, c.data.get(name, ""), limit=c.limit)}
    self.pool = workers.default_pool()
    self.c = c
    parsed = integration.problems_from_latex(
        [r["latex"] for r in self.rows.values()],
        [None if r["answer"] is None else str(r["answer"]) for r in self.rows.values()],
        pool=self.pool, timeout=c.scoring_timeout_s)
    self.problems = {pid: p for pid, p in zip(self.rows, parsed) if p is not None}
    self.unparseable = [pid for pid, p in zip(self.rows, parsed) if p is None]

  def prompt(self, pid: str) -> str:
    from rlsvr.envs.self_judge import integration  # noqa: PLC0415

    return integration.prompt(self.problems[pid])

  def check(self, pids: Sequence[str], responses: Sequence[str], fmt: str = "sympy") -> list[Any]:
    from rlsvr.envs.self_judge import countdown, integration  # noqa: PLC0415

    answers = [countdown.extract_answer(r) for r in responses]
    answers = [a.strip() if a is not None else None for a in answers]
    return integration.check_answers([self.problems[p] for p in pids], answers, fmt,
                                     pool=self.pool, time_limit=self.c.scoring_timeout_s)

  def facts(self, pid: str) -> dict[str, Any]:
    return dict(latex=self.rows[pid]["latex"], definite=self.problems[pid].definite,
                source=self.rows[pid]["source"])

  def candidates(self, pids: Sequence[str], seed: int) -> list[tuple[str, str, bool]]:
    pids = [p for p in pids if self.problems[p].reference]
    outcomes = self.pool.map(_reference_as_sympy, [(self.problems[p],) for p in pids],
                             self.c.scoring_timeout_s)
    refs = {p: o.value for p, o in zip(pids, outcomes) if o.ok}
    good = [p for p, v in zip(refs, self.check(list(refs), [f"<answer>{a}</answer>"
                                                            for a in refs.values()])) if v.correct]
    tries = {}
    for pid in good:
      a, x = refs[pid], self.problems[pid].variable.name
      options = [f"2*({a})", f"-({a})", f"({a}) + 1"] if self.problems[pid].definite else [
          f"({a}) + {x}", f"2*({a})", f"-({a})"]
      random.Random(f"{seed}-{pid}").shuffle(options)
      tries[pid] = options
    out = []
    bad: dict[str, str] = {}
    for k in range(3):  # verify one perturbation per problem per round, in batches
      todo = [p for p in good if p not in bad]
      verdicts = self.check(todo, [f"<answer>{tries[p][k]}</answer>" for p in todo])
      bad.update({p: tries[p][k] for p, v in zip(todo, verdicts) if v.format_ok and not v.correct})
    for pid in good:
      if pid in bad:
        out += [(pid, refs[pid], True), (pid, bad[pid], False)]
    return out

  def judge_prompt(self, pid: str, answer: str) -> str:
    from rlsvr.envs.self_judge import judge  # noqa: PLC0415

    problem = self.problems[pid]
    return judge.integration_prompt(problem.display(), answer, problem.definite)


# ---------------------------------------------------------------- evaluation


def _generation(ctx, name: str, task) -> tuple[list[dict[str, Any]], str]:
  n = ctx.c.samples

  def run_batch(pids: list[str]) -> list[dict[str, Any]]:
    texts = ctx.generate([task.prompt(p) for p in pids for _ in range(n)], seed=len(pids))
    verdicts = task.check([p for p in pids for _ in range(n)], texts)
    records = []
    for i, pid in enumerate(pids):
      samples = [dict(response=t, answer=v.expression, format_ok=v.format_ok, correct=v.correct,
                      reason=v.reason, timed_out=v.timed_out)
                 for t, v in zip(texts[i * n:(i + 1) * n], verdicts[i * n:(i + 1) * n])]
      records.append(dict(id=pid, **task.facts(pid), samples=samples,
                          score=sum(s["correct"] for s in samples) / n))
    return records

  pids = list(task.problems)
  return ctx.map(name, pids, pids, run_batch)


def _gap(ctx, name: str, task, scores: dict[str, float]) -> tuple[dict[str, float], str]:
  c = ctx.c
  pids = list(task.problems)[:c.gap_limit or None]
  candidates = task.candidates(pids, c.seed)
  from rlsvr.envs.self_judge import judge  # noqa: PLC0415

  def run_batch(batch: list[tuple[str, str, bool]]) -> list[dict[str, Any]]:
    replies = ctx.generate([task.judge_prompt(p, a) for p, a, _ in batch], role="judge",
                           max_new_tokens=c.judge.max_new_tokens,
                           temperature=c.judge.temperature)
    return [dict(id=p, answer=a, truth=t, judge_response=r, judge_says=judge.parse_verdict(r))
            for (p, a, t), r in zip(batch, replies)]

  keys = [f"{p}-{'correct' if t else 'incorrect'}" for p, _, t in candidates]
  records, path = ctx.map(f"{name}-gap", candidates, keys, run_batch)
  right = [float(r["judge_says"] == int(r["truth"])) for r in records]
  problems = sorted({r["id"] for r in records})
  verify, verify_se = mean_stderr([100 * v for v in right])
  gen, gen_se = mean_stderr([100 * scores[p] for p in problems])
  metrics = {"gap/verify_accuracy": verify, "gap/verify_accuracy_stderr": verify_se,
             "gap/gen_accuracy": gen, "gap/gen_accuracy_stderr": gen_se,
             "gap/verify_minus_gen": verify - gen,
             "gap/judge_parse_failures": float(sum(r["judge_says"] is None for r in records)),
             "gap/problems": float(len(problems)), "gap/candidates": float(len(records))}
  for label, truth in (("tpr", True), ("tnr", False)):
    hits = [v for v, r in zip(right, records) if r["truth"] is truth]
    if hits:
      metrics[f"gap/verify_{label}"] = 100 * sum(hits) / len(hits)
  return metrics, path


def evaluate(ctx) -> dict[str, Any]:
  """Every dataset of `ctx.c.datasets`: accuracy, and with `ctx.c.gap` the gap."""
  c = ctx.c
  results = {}
  for name in [d.strip() for d in c.datasets.split(",") if d.strip()]:
    if name not in DATASETS:
      raise ValueError(f"unknown RLSR dataset {name!r}; known: {DATASETS}")
    task = _Countdown(ctx, name) if name == "countdown" else _Integration(ctx, name)
    records, path = _generation(ctx, name, task)
    metrics = percent_summary("accuracy", [r["score"] for r in records])
    metrics["format_rate"] = 100.0 * sum(s["format_ok"] for r in records for s in r["samples"]) / (
        max(1, sum(len(r["samples"]) for r in records)))
    if name != "countdown":
      metrics["verifier_timeouts"] = float(sum(s.get("timed_out", False) for r in records
                                               for s in r["samples"]))
      metrics["unparseable_problems"] = float(len(task.unparseable))
      for kind, definite in (("definite", True), ("indefinite", False)):
        scores = [r["score"] for r in records if r["definite"] is definite]
        if scores:
          metrics[f"accuracy_{kind}"] = 100.0 * sum(scores) / len(scores)
    result = dict(headline="accuracy", metrics=metrics, records=path)
    if c.gap:
      gap_metrics, result["gap_records"] = _gap(ctx, name, task,
                                                {r["id"]: r["score"] for r in records})
      metrics.update(gap_metrics)
    results[name] = result
  return results
