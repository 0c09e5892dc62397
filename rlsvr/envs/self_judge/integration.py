"""Integration problems and their formal verifier.

`Problem.from_latex(r"\\int_0^1 x^2\\,dx")` parses a problem (integrand,
variable, optional bounds); `problem.verify(answer, fmt)` checks an answer
written as SymPy text (the policy's format) or LaTeX (official keys):

- indefinite: differentiate the answer and compare with the integrand at
  real points drawn from a seed that is a hash of the problem and the
  answer, with a relative tolerance; any constant (or `+ C`) is ignored;
- definite: compare the answer's value with the integral's value, computed
  once per problem by fixed-degree tanh-sinh quadrature on subintervals split
  at the integrand's jumps and kinks; when the quadrature's error estimate is
  poor the value is unknown and no answer verifies.

Decisions are bounded by sizes and operation counts (`numeric`), never by
the clock, so they are the same on every machine and under any load. Every
SymPy step still runs in a killable worker (`workers.WorkerPool`) whose time
limit is a safety net: a step that hits it gives the answer the verdict of
an unparseable one, with `timed_out` set. `\\log` means the natural log, as
in the Integration Bee (latex2sympy2 reads it as base 10); odd roots of
negative numbers are real, as contests mean. Sums and products in an
integrand are replaced by SymPy's closed form where it finds one. Other free
symbols of a problem (e.g. `b` in B066) are parameters, checked at fixed
values > 1.
"""
from __future__ import annotations

import dataclasses
import random
import re
import zlib
from typing import Any, Sequence

import mpmath
import sympy
from sympy.core.function import AppliedUndef

from rlsvr.envs.self_judge import numeric, safe_math, workers
from rlsvr.envs.self_judge.countdown import Verdict  # the same verdict shape for both tasks

MAX_LATEX_CHARS = 2000
_REL_TOL_DERIVATIVE = 1e-8
_REL_TOL_VALUE = 1e-6
# Comparisons are relative; this absolute floor only matters for values within ~1e-12 of
# zero (an integral that is exactly 0), where no relative test can pass.
_ABS_FLOOR = 1e-12
_NUM_POINTS = 6
_DIFF_DPS = 60
_DIFF_STEP = mpmath.mpf(10) ** -20
# Functions latex2sympy2 leaves undefined (from \text{...} or unknown macros).
_NAMED_FUNCTIONS = {"sech": sympy.sech, "csch": sympy.csch, "arcsinh": sympy.asinh,
                    "arccosh": sympy.acosh, "arctanh": sympy.atanh, "zeta": sympy.zeta,
                    "arsinh": sympy.asinh, "arcosh": sympy.acosh, "artanh": sympy.atanh}


# ---------------------------------------------------------------- LaTeX

_TOKEN_RE = re.compile(r"\\[A-Za-z]+|[A-Za-z0-9]")  # one LaTeX command, letter or digit


_ONE_LETTER_ARGUMENT = re.compile(
    r"\\((?:arc)?(?:sin|cos|tan|sec|csc|cot)h?|ln|log|exp)\s+([A-Za-z])(?![A-Za-z^_'(])")


def _brace_argument(text: str, pos: int) -> tuple[str, int]:
  """The argument starting at `pos` in braces (a `{...}` group is kept as is)."""
  while pos < len(text) and text[pos] == " ":
    pos += 1
  if pos >= len(text) or text[pos] == "{":
    return "", pos
  match = _TOKEN_RE.match(text, pos)
  if not match:
    return "", pos
  return "{" + match.group(0) + "}", match.end()


def normalize_latex(text: str) -> str:
  """Rewrites contest LaTeX into what latex2sympy2_extended reads as intended."""
  text = text.strip().strip("$")
  text = re.sub(r"\\[tdc]frac", r"\\frac", text)
  text = re.sub(r"\\(?:[Bb]igg?)[lr]?(?![A-Za-z])", "", text)
  # "\sec x\,(1 + x)" is sec(x) (1 + x), not sec(x (1 + x)): a one-letter argument is closed.
  text = re.sub(_ONE_LETTER_ARGUMENT, r"\\\1(\2)", text)
  text = re.sub(r"\\(?:,|!|;|:|displaystyle(?![A-Za-z]))", " ", text)
  text = re.sub(r"\\log(?![A-Za-z_])", r"\\ln", text)  # natural log, as the contests mean
  text = re.sub(r"\\operatorname\{(sech|csch)\}", r"\\text{\1}", text)
  text = re.sub(r"(\\quad|\\ )\s*\(.*\)\s*$", "", text)  # trailing conditions like "(n>1)"
  text = re.sub(r"\s*\+\s*C\s*$", "", text)
  text = re.sub(r"\^([A-Za-z0-9])", r"^{\1}", text)
  # Single-token arguments without braces: \frac12, \sqrt3, \sqrt\pi, \frac1x.
  out, pos = [], 0
  for match in re.finditer(r"\\(frac|sqrt|binom)(?![A-Za-z])", text):
    if match.start() < pos:
      continue
    out.append(text[pos:match.end()])
    pos = match.end()
    if match.group(1) == "sqrt" and text[pos:pos + 1] == "[":
      close = text.find("]", pos)
      if close < 0:
        continue  # malformed: left for latex2sympy2 to reject
      out.append(text[pos:close + 1])
      pos = close + 1
    for _ in range(1 if match.group(1) == "sqrt" else 2):
      arg, new_pos = _brace_argument(text, pos)
      if not arg:
        break
      out.append(arg)
      pos = new_pos
  out.append(text[pos:])
  return "".join(out)


def latex_to_sympy(text: str, variable: sympy.Symbol, parameters: Sequence[sympy.Symbol] = (),
                   trusted: bool = False) -> Any:
  """LaTeX to SymPy via latex2sympy2_extended, with our symbols and the natural log.

  Free symbols become `variable` or the `parameters` by name (`e` is Euler's
  number, `i` the imaginary unit); anything else is an error unless
  `trusted`, when it becomes a new positive parameter. Untrusted results must
  pass `safe_math.check_tree`. Run this inside a worker: parsing is not bounded.
  """
  from latex2sympy2_extended import latex2sympy  # pylint: disable=g-import-not-at-top

  if len(text) > MAX_LATEX_CHARS:
    raise safe_math.UnsafeExpression(f"LaTeX longer than {MAX_LATEX_CHARS} characters")
  expr = latex2sympy(normalize_latex(text))
  names = {variable.name: variable, **{p.name: p for p in parameters},
           "e": sympy.E, "i": sympy.I, "pi": sympy.pi}
  mapping = {}
  for symbol in expr.free_symbols:
    if symbol.name in names:
      mapping[symbol] = names[symbol.name]
    elif trusted and re.fullmatch(r"[A-Za-z]", symbol.name):
      mapping[symbol] = sympy.Symbol(symbol.name, positive=True)
    else:
      raise safe_math.UnsafeExpression(f"unknown symbol {symbol.name!r}")
  expr = expr.xreplace(mapping)
  for call in expr.atoms(AppliedUndef):
    name = re.sub(r"\\text\{(.*)\}|\\", r"\1", call.func.__name__)
    if name not in _NAMED_FUNCTIONS:
      raise safe_math.UnsafeExpression(f"unknown function {name!r}")
    expr = expr.xreplace({call: _NAMED_FUNCTIONS[name](*call.args)})
  # latex2sympy2 keeps log(a, b) unevaluated; log(a)/log(b) is what SymPy reasons about.
  expr = expr.replace(lambda n: isinstance(n, sympy.log) and len(n.args) == 2,
                      lambda n: sympy.log(n.args[0]) / sympy.log(n.args[1]))
  expr = real_odd_roots(expr)
  if not trusted:
    safe_math.check_tree(expr, [variable, *parameters])
  return expr


def real_odd_roots(expr: Any) -> Any:
  """`\\sqrt[3]{b}` and `b^{p/q}` (q odd) as real roots: sign(b)^p |b|^(p/q), as contests mean.

  SymPy's principal root of a negative number is complex (`(-8)**(1/3)` is
  1 + sqrt(3) i); a contest's cube root of -8 is -2.
  """
  def is_odd_root(node):
    return (node.is_Pow and node.exp.is_Rational and node.exp.q % 2 == 1 and node.exp.q > 1
            and node.base.is_nonnegative is not True)

  def real_root(node):
    magnitude = sympy.Abs(node.base) ** node.exp
    return sympy.sign(node.base) * magnitude if node.exp.p % 2 else magnitude
  return expr.replace(is_odd_root, real_root)


def closed_forms(expr: Any) -> Any:
  """Sums and products in `expr` replaced by SymPy's closed form where it finds one.

  A sum SymPy cannot close is retried term by term with sin/cos written as
  exponentials (`sin(k pi/2) x^k` is two geometric series). Where SymPy adds
  a convergence condition, the convergent branch is taken: a problem is posed
  where its series converges.
  """
  for node in sorted(expr.atoms(sympy.Sum, sympy.Product), key=sympy.count_ops):
    done = _convergent(node.doit())
    if done.has(sympy.Sum, sympy.Product) and isinstance(node, sympy.Sum) and len(
        node.limits) == 1:
      k = node.limits[0][0]
      terms = sympy.expand(node.function.rewrite([sympy.sin, sympy.cos], sympy.exp))
      done = _convergent(sympy.Add(*[
          sympy.Sum(sympy.powsimp(_as_powers(t, k), combine="base", force=True),
                    *node.limits).doit() for t in sympy.Add.make_args(terms)]))
    if not done.has(sympy.Sum, sympy.Product):
      expr = expr.xreplace({node: done})
  return expr


def _as_powers(term: Any, k: sympy.Symbol) -> Any:
  """exp(c k) as exp(c)**k, so that x**k exp(i pi k/2) combines into (i x)**k."""
  def linear_in_k(node):
    return (isinstance(node, sympy.exp) and node.args[0].has(k)
            and not sympy.expand(node.args[0] / k).has(k))
  return term.replace(linear_in_k, lambda n: sympy.exp(sympy.expand(n.args[0] / k)) ** k)


def _convergent(expr: Any) -> Any:
  def convergent_branch(node):
    return next((e for e, _ in node.args if not e.has(sympy.Sum, sympy.Product)), node)
  return expr.replace(lambda n: isinstance(n, sympy.Piecewise), convergent_branch)


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


def _problem_from_latex(latex: str):
  x = sympy.Symbol("x", real=True)
  placeholder = sympy.Symbol("x")
  integral = latex_to_sympy(latex, placeholder, trusted=True)
  if not isinstance(integral, sympy.Integral) or len(integral.limits) != 1:
    raise ValueError("not a single integral")
  limit = integral.limits[0]
  variable = sympy.Symbol(limit[0].name, real=True) if limit[0] != placeholder else x
  integrand = closed_forms(integral.function.xreplace({limit[0]: variable}))
  bounds = None
  if len(limit) == 3:
    bounds = (limit[1], limit[2])
  elif len(limit) != 1:
    raise ValueError("unsupported integral limits")
  return integrand, variable, bounds


# ---------------------------------------------------------------- verification (worker side)


def _parameter_values(problem: Problem) -> dict[sympy.Symbol, sympy.Expr]:
  # Fixed values > 1 so conditions like n > 1 hold and the value cache is consistent.
  return {p: sympy.Rational(13 + 4 * k, 10) for k, p in enumerate(problem.parameters)}


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

  def derivative(t):
    try:
      ends = [numeric.evaluate(antiderivative, {x: t + d}, dps=_DIFF_DPS)
              for d in (_DIFF_STEP, -_DIFF_STEP)]
    except (numeric.NotNumeric, ArithmeticError, ValueError):
      return None
    return None if None in ends else (ends[0] - ends[1]) / (2 * _DIFF_STEP)

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
        pairs.append((target, derivative(point)))
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


@dataclasses.dataclass(frozen=True)
class IntegralValue:
  """A definite integral's value, its quadrature error estimate and the integral of |f|."""

  value: Any
  error: Any
  scale: Any

  @property
  def tolerance(self) -> Any:
    """The absolute slack of a comparison: near zero, what the quadrature can tell apart."""
    return max(_ABS_FLOOR, 10 * self.error, 1e-10 * self.scale)


def _definite_value_task(problem: Problem) -> IntegralValue | None:
  """The integral by fixed-degree quadrature, split at jumps; None when its error is poor.

  Retried at 40 digits when 20 leave the error estimate poor (cancellation
  near a singular point): more work, the same answer on every machine.
  """
  params = _parameter_values(problem)
  integrand = problem.integrand.xreplace(params)
  lower, upper = (_mp_bound(b.xreplace(params)) for b in problem.bounds)
  x = problem.variable
  if integrand.has(sympy.Sum, sympy.Product):  # lambdify cannot print them; ours adds them up
    def fn(t):
      z = numeric.evaluate(integrand, {x: t}, dps=mpmath.mp.dps)
      if z is None:
        raise ArithmeticError("not finite")
      return z
  else:
    fn = sympy.lambdify(x, integrand, "mpmath")  # our problem data, not model text
  try:
    points = numeric.integration_points(integrand, x, lower, upper, fn)
  except (ArithmeticError, ValueError, TypeError, numeric.NotNumeric, numeric.OperationLimit):
    return None
  if not numeric.trustworthy(fn, points):
    return None
  for dps in (20, 40):
    try:
      value, error = numeric.definite_integral(fn, points, dps)
      scale, scale_error = numeric.definite_integral(lambda t: abs(fn(t)), points, dps)
    except (ArithmeticError, ValueError, TypeError, numeric.NotNumeric, numeric.OperationLimit):
      return None
    with mpmath.workdps(30):
      z = _finite_mpc(value)
    if z is None or not mpmath.isfinite(scale):
      return None
    # The integral of |f| must be as well known as the value, and no smaller than |value|.
    consistent = scale_error <= 1e-6 * scale and abs(z) <= scale * (1 + 1e-9)
    # Known to 1e-8 of the value, or (an integral near 0) to 1e-11 of the integral of |f|.
    if consistent and error <= max(1e-8 * abs(z), 1e-11 * scale):
      return IntegralValue(z, error, scale)
  return None


def _finite_mpc(value: Any) -> Any:
  z = mpmath.mpc(value)
  return z if mpmath.isfinite(z.real) and mpmath.isfinite(z.imag) else None


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
