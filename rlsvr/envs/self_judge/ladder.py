"""LADDER-style integration problems: graded variants of seed integrands, and a filter.

`generate_variants` builds variants of increasing difficulty from seed
integrands by SymPy transformations (level 1: scale and shift the variable;
level 2: add a second transformed seed; level 3: compose with an inner
function and multiply by its derivative, a u-substitution). It keeps a
variant only when SymPy finds an antiderivative, the antiderivative
differentiates back to the integrand, and it reads back through our safe
parser (so it is a valid answer in the policy's format).

`filter_solved` drops the problems a model already solves (pass@1 by the
formal verifier). Command line:

  python -m rlsvr.envs.self_judge.ladder generate --out problems.jsonl
  python -m rlsvr.envs.self_judge.ladder filter --problems problems.jsonl \\
      --model HF_DIR --out unsolved.jsonl
"""
from __future__ import annotations

import argparse
import json
import random
from typing import Any, Sequence

import sympy

from rlsvr.envs.base import SampleFn
from rlsvr import workers
from rlsvr.envs.self_judge import integration, safe_math, tasks
from rlsvr.model.tokenizer import encode_chat

SEEDS = ("x**2", "x**3 - x", "sin(x)", "cos(x)", "exp(x)", "1/x", "1/(1 + x**2)", "x*exp(x)",
         "log(x)", "sqrt(x)", "x*sin(x)", "cos(x)**2", "1/sqrt(1 - x**2)", "tan(x)")
_INNER = ("x**2", "sin(x)", "exp(x)", "x**3 + 1", "log(x)")


def _transform(seed: sympy.Expr, x: sympy.Symbol, level: int, rng: random.Random) -> sympy.Expr:
  a = sympy.Integer(rng.choice([2, 3, 5, -1, -2])) / rng.choice([1, 1, 2, 3])
  b = sympy.Integer(rng.randint(-3, 3))
  scaled = rng.choice([1, 2, 3, 4, -1]) * seed.xreplace({x: a * x + b})
  if level <= 1:
    return scaled
  if level == 2:
    other = safe_math.parse_expression(rng.choice(SEEDS), {"x": x})
    return scaled + rng.choice([1, 2, -1]) * other.xreplace({x: rng.choice([2, 3]) * x})
  inner = safe_math.parse_expression(rng.choice(_INNER), {"x": x})
  return seed.xreplace({x: inner}) * sympy.diff(inner, x)


def verified_antiderivative(integrand: sympy.Expr, x: sympy.Symbol) -> str | None:
  """SymPy-syntax antiderivative that differentiates back and that our parser reads, else None.

  Runs SymPy's `integrate`: call it in a worker (`WorkerPool.run`).
  """
  antiderivative = sympy.integrate(integrand, x)
  if antiderivative.has(sympy.Integral) or sympy.simplify(
      sympy.diff(antiderivative, x) - integrand) != 0:
    return None
  text = sympy.sstr(antiderivative)
  safe_math.parse_expression(text, {"x": x})  # raises if outside our answer grammar
  return text


def variant_candidates(seeds: Sequence[str], per_seed: int, levels: Sequence[int], seed: int,
                       x: sympy.Symbol) -> list[tuple[str, int, sympy.Expr]]:
  """Unverified (seed, level, integrand) variants; same arguments, same variants."""
  rng = random.Random(seed)
  candidates = []
  for text in seeds:
    base = safe_math.parse_expression(text, {"x": x})
    for level in levels:
      for _ in range(per_seed):
        candidates.append((text, level, _transform(base, x, level, rng)))
  return candidates


def generate_variants(
    seeds: Sequence[str] = SEEDS,
    per_seed: int = 3,
    levels: Sequence[int] = (1, 2, 3),
    seed: int = 0,
    *,
    limit: int | None = None,
    pool: workers.WorkerPool | None = None,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
  """Verified variants: dicts with integrand, variable, reference, level and seed.

  `limit`: the first `limit` of the rows without it, found by verifying only as many
  candidates as that takes (each is a SymPy `integrate`: 0.1 s to `timeout` seconds).
  `timeout` bounds each `integrate` (seconds; data preparation, not a hot path).
  """
  x = sympy.Symbol("x", real=True)
  candidates = variant_candidates(seeds, per_seed, levels, seed, x)
  pool = pool or workers.default_pool()
  rows, seen, start = [], set(), 0
  while start < len(candidates) and (limit is None or len(rows) < limit):
    # Candidates in order, a batch at a time: a batch of what is still missing (most
    # candidates verify) keeps the pool's workers busy and stops soon after `limit`.
    end = len(candidates) if limit is None else start + max(limit - len(rows), 4)
    batch = candidates[start:end]
    outcomes = pool.map(verified_antiderivative, [(expr, x) for *_, expr in batch], timeout)
    for (text, level, expr), outcome in zip(batch, outcomes):
      key = sympy.srepr(expr)
      if outcome.ok and outcome.value is not None and key not in seen:
        seen.add(key)
        rows.append(dict(integrand=sympy.sstr(expr), variable="x", reference=outcome.value,
                         level=level, seed=text))
    start = end
  return rows[:limit]


def problem_from_row(row: dict[str, Any]) -> integration.Problem:
  """A problem from a JSONL row: {"integrand", "variable", "reference"} or {"latex", "answer"}."""
  if "latex" in row:
    return integration.Problem.from_latex(row["latex"], row.get("answer"))
  return integration.Problem.from_sympy(row["integrand"], row.get("variable", "x"),
                                        reference=row.get("reference"))


def filter_solved(
    problems: Sequence[integration.Problem],
    sample: SampleFn,
    tokenizer: Any,
    *,
    samples_per_problem: int = 1,
    max_pass_at_1: float = 0.5,
    max_new_tokens: int = 1024,
    pool: workers.WorkerPool | None = None,
    **sampling: Any,
) -> tuple[list[int], list[float]]:
  """Indices of the problems to keep (pass@1 below `max_pass_at_1`), and every pass@1.

  pass@1 is the formal verifier's mean over `samples_per_problem` answers; with
  one sample a problem is dropped exactly when its answer is correct.
  """
  prompts = []
  for problem in problems:
    prompts += [encode_chat(tokenizer, integration.prompt(problem))] * samples_per_problem
  completions = sample(prompts, max_new_tokens=max_new_tokens, **sampling)
  answers = [tasks.extract_answer(tokenizer.decode(list(c.ids), skip_special_tokens=True))
             for c in completions]
  verdicts = integration.check_answers(
      [p for p in problems for _ in range(samples_per_problem)], answers, "sympy", pool=pool)
  n = samples_per_problem
  pass_at_1 = [sum(v.correct for v in verdicts[k * n:(k + 1) * n]) / n
               for k in range(len(problems))]
  return [k for k, p in enumerate(pass_at_1) if p < max_pass_at_1], pass_at_1


def _model_sampler(model_dir: str, temperature: float):  # pragma: no cover - needs a model
  """(SampleFn, tokenizer) over a HF model directory, through our JAX sampler."""
  from rlsvr import sampling  # pylint: disable=g-import-not-at-top
  from rlsvr.model import hf, tokenizer as tok  # pylint: disable=g-import-not-at-top

  config, params = hf.load_pretrained(model_dir)
  tokenizer = tok.load_tokenizer(model_dir)
  calls = iter(range(1 << 30))  # a new seed per call

  def sample(prompts, max_new_tokens, **kwargs):
    return sampling.generate(config, params, prompts, max_new_tokens=max_new_tokens,
                             temperature=temperature, eos_ids=tok.stop_ids(config, tokenizer),
                             seed=next(calls), **kwargs)

  return sample, tokenizer


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  gen = sub.add_parser("generate", help="write verified LADDER variants as JSONL")
  gen.add_argument("--out", required=True)
  gen.add_argument("--per_seed", type=int, default=3)
  gen.add_argument("--seed", type=int, default=0)
  gen.add_argument("--seeds", default=";".join(SEEDS), help="seed integrands, ';'-separated")
  flt = sub.add_parser("filter", help="drop problems the model solves (pass@1)")
  flt.add_argument("--problems", required=True)
  flt.add_argument("--model", required=True)
  flt.add_argument("--out", required=True)
  flt.add_argument("--samples", type=int, default=1)
  flt.add_argument("--max_pass_at_1", type=float, default=0.5)
  flt.add_argument("--temperature", type=float, default=1.0)
  args = parser.parse_args(argv)
  if args.command == "generate":
    rows = generate_variants(args.seeds.split(";"), per_seed=args.per_seed, seed=args.seed)
  else:
    with open(args.problems, encoding="utf-8") as f:
      source = [json.loads(line) for line in f if line.strip()]
    sample, tokenizer = _model_sampler(args.model, args.temperature)
    keep, pass_at_1 = filter_solved([problem_from_row(r) for r in source], sample, tokenizer,
                                    samples_per_problem=args.samples,
                                    max_pass_at_1=args.max_pass_at_1)
    rows = [dict(source[k], pass_at_1=pass_at_1[k]) for k in keep]
  with open(args.out, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")
  print(f"wrote {len(rows)} problems to {args.out}")


if __name__ == "__main__":
  main()
