"""Integration problems and their formal verifier.

`Problem.from_latex(r"\\int_0^1 x^2\\,dx")` parses a problem (integrand,
variable, optional bounds); `problem.verify(answer, fmt)` checks an answer
written as SymPy text (the policy's format) or LaTeX (official keys):

- indefinite: differentiate the answer and compare with the integrand at
  real points drawn from a seed that is a hash of the problem and the
  answer, with a relative tolerance; any constant (or `+ C`) is ignored;
- definite: compare the answer's value with the integral's value, computed
  once per problem by `primitive.integral` (F(b) - F(a) when the integrand is
  the derivative of its polynomial part F), else by `tails.integral`
  (`quadrature`'s fixed-degree tanh-sinh on pieces split at jumps and kinks,
  fine float64 panels for fast oscillations, series for infinitely many of
  either toward an end); when none pins it down the value is unknown and no
  answer verifies.

Decisions are bounded by sizes and operation counts (`numeric`, `quadrature`), never by
the clock, so they are the same on every machine and under any load. Every
SymPy step still runs in a killable worker (`workers.WorkerPool`) whose time
limit is a safety net: a step that hits it gives the answer the verdict of
an unparseable one, with `timed_out` set. `\\log` means the natural log, as
in the Integration Bee (latex2sympy2 reads it as base 10); odd roots of
negative numbers are real, as contests mean. Sums and products in an
integrand are replaced by SymPy's closed form where it finds one. Other free
symbols of a problem (e.g. `b` in B066) are parameters, checked at fixed
values > 1 (odd integers where they bound a sum or product, as n in H069). A
Stieltjes integral `d(g(x))` is read as g'(x) dx, `\\{u\\}` as u - floor(u).
"""
from __future__ import annotations

import dataclasses
import random
import re
import zlib
from typing import Any, Sequence

import mpmath
import sympy

from rlsvr import workers
from rlsvr.envs.self_judge import numeric, primitive, quadrature, safe_math, tails
from rlsvr.envs.self_judge.quadrature import IntegralValue
from rlsvr.envs.self_judge.latex import closed_forms, latex_to_sympy
from rlsvr.envs.self_judge.tasks import Verdict

_REL_TOL_DERIVATIVE = 1e-8
_REL_TOL_VALUE = 1e-6
_ABS_FLOOR = quadrature.ABS_FLOOR
_NUM_POINTS = 6
_DIFF_DPS = 60
_DIFF_STEP = mpmath.mpf(10) ** -20
# ---------------------------------------------------------------- problems


@dataclasses.dataclass(frozen=True)
class Problem:
  """An integral: `integrand` d`variable`, over `bounds` when definite.

  `latex` is how it is shown to models; `reference` an optional known answer
  (LaTeX or SymPy text, as `reference_fmt` says).
  """

  integrand: sympy.Expr
  variable: sympy.Symbol
  bounds: tuple[sympy.Expr, sympy.Expr] | None = None
  latex: str = ""
  reference: str | None = None
  reference_fmt: str = "latex"

  @property
  def definite(self) -> bool:
    return self.bounds is not None

  @property
  def parameters(self) -> tuple[sympy.Symbol, ...]:
    symbols = set(self.integrand.free_symbols)
    for bound in self.bounds or ():
      symbols |= bound.free_symbols
    return tuple(sorted((s for s in symbols if s != self.variable), key=lambda s: s.name))

  def display(self) -> str:
    """The problem as LaTeX."""
    if self.latex:
      return self.latex
    limits = (self.variable, *self.bounds) if self.bounds else self.variable
    return sympy.latex(sympy.Integral(self.integrand, limits))

  @classmethod
  def from_latex(cls, latex: str, reference: str | None = None, *,
                 pool: workers.WorkerPool | None = None, timeout: float = 20.0) -> Problem:
    """Parses `\\int[_a^b] f \\, dx` (in a worker, under `timeout`); ValueError if impossible."""
    outcome = (pool or workers.default_pool()).run(_problem_from_latex, latex, timeout=timeout)
    if not outcome.ok:
      raise ValueError(f"cannot parse integral {latex[:80]!r}: {outcome.error}")
    integrand, variable, bounds = outcome.value
    return cls(integrand, variable, bounds, latex=latex, reference=reference)

  @classmethod
  def from_sympy(cls, integrand: str, variable: str = "x", bounds: tuple[str, str] | None = None,
                 reference: str | None = None) -> Problem:
    """A problem from SymPy-syntax text (our own generators), via the safe parser."""
    x = sympy.Symbol(variable, real=True)
    names = {variable: x}
    parse = lambda t: safe_math.parse_expression(t, names)  # noqa: E731
    limits = None if bounds is None else (parse(bounds[0]), parse(bounds[1]))
    return cls(parse(integrand), x, limits, reference=reference, reference_fmt="sympy")

  def verify(self, answer: str, fmt: str = "sympy", *,
             pool: workers.WorkerPool | None = None) -> bool:
    """True when `answer` is a correct antiderivative (indefinite) or value (definite)."""
    return check_answers([self], [answer], fmt, pool=pool)[0].correct


def problems_from_latex(latexes: Sequence[str], references: Sequence[str | None] | None = None, *,
                        pool: workers.WorkerPool | None = None,
                        timeout: float = 20.0) -> list[Problem | None]:
  """`Problem.from_latex` for many problems at once (spread over the pool); None if unparseable."""
  outcomes = (pool or workers.default_pool()).map(
      _problem_from_latex, [(latex,) for latex in latexes], timeout)
  references = references or [None] * len(latexes)
  return [Problem(*o.value, latex=latex, reference=ref) if o.ok else None
          for latex, ref, o in zip(latexes, references, outcomes)]


def prompt(problem: Problem) -> str:
  """The policy prompt: the answer is a SymPy expression inside `<answer>` tags."""
  kind = ("its exact value" if problem.definite else
          "an antiderivative (the constant of integration may be omitted)")
  return (f"Compute the integral ${problem.display()}$. Give {kind} as a SymPy expression, "
          "e.g. x**2/2 + log(x) or sqrt(pi)/2, inside <answer> </answer> tags. "
          "Show your work in <think> </think> tags first.")


# \int f\,d(g(x)), a Stieltjes integral with a differentiable g, is \int f g'(x)\,dx.
_STIELTJES = re.compile(r"(?<![A-Za-z\\])d\s*(?:\\left)?\((.+?)(?:\\right)?\)\s*$")


def _problem_from_latex(latex: str):
  x = sympy.Symbol("x", real=True)
  placeholder = sympy.Symbol("x")
  weight = sympy.Integer(1)
  if stieltjes := _STIELTJES.search(latex):
    g = latex_to_sympy(stieltjes.group(1), placeholder, trusted=True)
    if g.free_symbols != {placeholder}:
      raise ValueError("a Stieltjes integral d(g) with g not a function of x alone")
    latex, weight = latex[:stieltjes.start()] + r"\,dx", sympy.diff(g, placeholder)
  integral = latex_to_sympy(latex, placeholder, trusted=True)
  if not isinstance(integral, sympy.Integral) or len(integral.limits) != 1:
    raise ValueError("not a single integral")
  limit = integral.limits[0]
  variable = sympy.Symbol(limit[0].name, real=True) if limit[0] != placeholder else x
  integrand = closed_forms((integral.function * weight).xreplace({limit[0]: variable}))
  bounds = None
  if len(limit) == 3:
    bounds = (limit[1], limit[2])
  elif len(limit) != 1:
    raise ValueError("unsupported integral limits")
  return integrand, variable, bounds


# ---------------------------------------------------------------- verification (worker side)


def _parameter_values(problem: Problem) -> dict[sympy.Symbol, sympy.Expr]:
  # Fixed values > 1 so conditions like n > 1 hold and the value cache is consistent; a
  # parameter in the limits of a sum or product (n in prod_{k=1}^{n-1}) is an odd integer.
  counts = set().union(*[lo.free_symbols | hi.free_symbols
                         for node in problem.integrand.atoms(sympy.Sum, sympy.Product)
                         for _, lo, hi in node.limits])
  return {p: sympy.Integer(5 + 2 * k) if p in counts else sympy.Rational(13 + 4 * k, 10)
          for k, p in enumerate(problem.parameters)}


def parse_answer(problem: Problem, answer: str, fmt: str) -> sympy.Expr:
  """An answer as SymPy; `C` (the constant of integration) is dropped."""
  if fmt == "sympy":
    names = {problem.variable.name: problem.variable, "C": sympy.Integer(0),
             **{p.name: p for p in problem.parameters}}
    return safe_math.parse_expression(answer, names)
  if fmt == "latex":
    text = answer.split("=")[0]  # official keys may add "= <another form>"
    return latex_to_sympy(text, problem.variable, problem.parameters)
  raise ValueError(f"unknown answer format {fmt!r}")


def _close(a: Any, b: Any, rel: float, floor: float = _ABS_FLOOR) -> bool:
  """|a - b| within `rel` of the larger magnitude: a 1% error fails at every scale."""
  return abs(a - b) <= max(rel * max(abs(a), abs(b)), floor)


def _points_seed(problem: Problem, answer: str) -> int:
  # From the content, not the batch position: one answer gets one verdict everywhere.
  return zlib.crc32(f"{problem.integrand}|{problem.variable}|{answer}".encode())


def _numeric_task(problem: Problem, answer: str, fmt: str) -> str:
  """"ok"/"wrong"/"too large": F' == integrand at seeded real points (indefinite problems).

  F' is a central difference at `_DIFF_DPS` digits with step `_DIFF_STEP`
  (error ~1e-40 for smooth F): no symbolic derivative, whose size and
  unevaluated parts (derivatives of Abs or re of complex functions) depend on
  how SymPy rewrites the answer. Deterministic: fixed points, precision and
  operation counts.
  """
  params = _parameter_values(problem)
  antiderivative = parse_answer(problem, answer, fmt).xreplace(params)
  integrand = problem.integrand.xreplace(params)
  x = problem.variable
  rng = random.Random(_points_seed(problem, answer))

  real_pairs, complex_pairs = [], []
  try:
    with mpmath.workdps(_DIFF_DPS):
      for k in range(60):
        if len(real_pairs) >= _NUM_POINTS:
          break
        scale = (0.5, 2.0, 6.0)[k % 3]
        point = mpmath.mpf(rng.uniform(-scale, scale))
        try:
          target = numeric.evaluate(integrand, {x: point})
        except (numeric.NotNumeric, ArithmeticError, ValueError):
          continue  # the integrand is undefined here: another point
        if target is None:
          continue
        pairs = real_pairs if abs(target.imag) <= 1e-12 * max(1, abs(target)) else complex_pairs
        got = numeric.derivative(antiderivative, x, point, dps=_DIFF_DPS, step=_DIFF_STEP)
        pairs.append((target, got))
  except numeric.OperationLimit:
    return "too large"
  pairs = real_pairs if len(real_pairs) >= 3 else real_pairs + complex_pairs
  if len(pairs) < 3:
    return "wrong"  # nowhere to compare: not verified
  ok = all(got is not None and _close(got, target, _REL_TOL_DERIVATIVE) for target, got in pairs)
  return "ok" if ok else "wrong"


def _mp_bound(bound: sympy.Expr) -> Any:
  if bound in (sympy.oo, -sympy.oo):
    return mpmath.inf if bound == sympy.oo else -mpmath.inf
  with mpmath.workdps(50):
    return mpmath.mpf(str(sympy.re(bound).evalf(50)))


def _definite_value_task(problem: Problem) -> IntegralValue | None:
  params = _parameter_values(problem)
  lower, upper = (_mp_bound(b.xreplace(params)) for b in problem.bounds)
  integrand = problem.integrand.xreplace(params)
  return (primitive.integral(integrand, problem.variable, lower, upper)
          or tails.integral(integrand, problem.variable, lower, upper))


def _value_task(problem: Problem, answer: str, fmt: str, value: IntegralValue) -> str:
  expr = parse_answer(problem, answer, fmt).xreplace(_parameter_values(problem))
  try:
    got = numeric.evaluate(expr, {})
  except numeric.OperationLimit:
    return "too large"
  except (numeric.NotNumeric, ArithmeticError, ValueError):
    return "wrong"
  return "ok" if got is not None and _close(got, value.value, _REL_TOL_VALUE,
                                             value.tolerance) else "wrong"


def _parse_task(problem: Problem, answer: str, fmt: str) -> bool:
  parse_answer(problem, answer, fmt)
  return True


# ---------------------------------------------------------------- verification (parent side)

_VALUES: dict[Problem, IntegralValue | None] = {}


def definite_value(problem: Problem, *, pool: workers.WorkerPool | None = None,
                   time_limit: float = 300.0) -> IntegralValue | None:
  """The value of a definite problem (None if the quadrature cannot pin it down); cached."""
  return definite_values([problem], pool=pool, time_limit=time_limit)[0]


def definite_values(problems: Sequence[Problem], *, pool: workers.WorkerPool | None = None,
                    time_limit: float = 300.0) -> list[IntegralValue | None]:
  """`definite_value` for many problems, the new ones computed in parallel over the pool.

  The work is bounded by the quadrature's fixed degree and subdivision;
  `time_limit` is a safety net (a problem that hits it stays unknown and is
  retried next time).
  """
  todo = list(dict.fromkeys(p for p in problems if p not in _VALUES))
  outcomes = (pool or workers.default_pool()).map(_definite_value_task, [(p,) for p in todo],
                                                  time_limit)
  for problem, outcome in zip(todo, outcomes):
    if outcome.status != "timeout":
      _VALUES[problem] = outcome.value if outcome.ok else None
  return [_VALUES.get(p) for p in problems]


def check_answers(problems: Sequence[Problem], answers: Sequence[str | None], fmt: str = "sympy",
                  *, pool: workers.WorkerPool | None = None, time_limit: float = 30.0,
                  integral_time_limit: float = 300.0) -> list[Verdict]:
  """Formal verdicts for (problem, answer) pairs, batched over the worker pool.

  `format_ok`: the answer parses (None: no answer). `correct`: verified.
  Every decision is bounded by sizes and operation counts, so it is the same
  on any machine and under any load. `time_limit` (per answer and stage) is
  only a safety net: an answer that hits it gets `timed_out=True` and the
  verdict of an unparseable answer (no format bonus, not correct), whichever
  stage it hit.
  """
  pool = pool or workers.default_pool()
  definite_values([p for p in problems if p.definite], pool=pool, time_limit=integral_time_limit)
  todo = [i for i, a in enumerate(answers) if a is not None]
  parsed = pool.map(_parse_task, [(problems[i], answers[i], fmt) for i in todo], time_limit)
  verdicts = [Verdict(False, False, "no answer") for _ in answers]

  def timed_out(i: int, stage: str) -> Verdict:
    return Verdict(False, False, f"{stage}: timed out", answers[i], timed_out=True)

  for i, outcome in zip(todo, parsed):
    verdicts[i] = (timed_out(i, "parse") if outcome.status == "timeout" else
                   Verdict(outcome.ok, False, "parsed" if outcome.ok else
                           f"unparseable: {outcome.error}", answers[i]))
  ok = [i for i in todo if verdicts[i].format_ok]

  def settle(indices, fn, make_args, stage):
    outcomes = pool.map(fn, [make_args(i) for i in indices], time_limit)
    for i, outcome in zip(indices, outcomes):
      if outcome.status == "timeout":
        verdicts[i] = timed_out(i, stage)
      else:
        verdicts[i] = Verdict(True, outcome.ok and outcome.value == "ok",
                              f"{stage}: {outcome.value if outcome.ok else outcome.error}",
                              answers[i])

  definite = [i for i in ok if problems[i].definite]
  for i in definite:
    if _VALUES.get(problems[i]) is None:
      verdicts[i] = Verdict(True, False, "integral value unknown", answers[i])
  settle([i for i in definite if _VALUES.get(problems[i]) is not None], _value_task,
         lambda i: (problems[i], answers[i], fmt, _VALUES[problems[i]]), "value")
  settle([i for i in ok if not problems[i].definite], _numeric_task,
         lambda i: (problems[i], answers[i], fmt), "numeric")
  return verdicts
