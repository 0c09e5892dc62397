"""Integration problems and their formal verifier.

`Problem.from_latex(r"\\int_0^1 x^2\\,dx")` parses a problem (integrand,
variable, optional bounds); `problem.verify(answer, fmt)` checks an answer
written as SymPy text (the policy's format) or LaTeX (official keys):

- indefinite: differentiate the answer and compare with the integrand, first
  by `simplify` under a time limit, then numerically at random real points
  with a relative tolerance; any constant (or `+ C`) is ignored;
- definite: compare the answer's value with the integral's value, computed
  once per problem by tanh-sinh quadrature on subintervals; when the
  quadrature's error estimate is poor the value is unknown and no answer
  verifies (oscillatory and floor-type integrands).

Every SymPy step runs in a killable worker (`workers.WorkerPool`); a step
past its limit counts as "not verified". `\\log` means the natural log, as in
the Integration Bee (latex2sympy2 reads it as base 10). Other free symbols of
a problem (e.g. `b` in B066) are parameters, checked at fixed values > 1.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Any, Sequence

import mpmath
import sympy
from sympy.core.function import AppliedUndef

from rlsvr.envs.self_judge import safe_math, workers
from rlsvr.envs.self_judge.countdown import Verdict  # the same verdict shape for both tasks

MAX_LATEX_CHARS = 2000
_REL_TOL_DERIVATIVE = 1e-8
_REL_TOL_VALUE = 1e-6
# Comparisons are relative; this absolute floor only matters for values within ~1e-12 of
# zero (an integral that is exactly 0), where no relative test can pass.
_ABS_FLOOR = 1e-12
_NUM_POINTS = 6
# Functions latex2sympy2 leaves undefined (from \text{...} or unknown macros).
_NAMED_FUNCTIONS = {"sech": sympy.sech, "csch": sympy.csch, "arcsinh": sympy.asinh,
                    "arccosh": sympy.acosh, "arctanh": sympy.atanh, "zeta": sympy.zeta,
                    "arsinh": sympy.asinh, "arcosh": sympy.acosh, "artanh": sympy.atanh}


# ---------------------------------------------------------------- LaTeX

_TOKEN_RE = re.compile(r"\\[A-Za-z]+|[A-Za-z0-9]")  # one LaTeX command, letter or digit


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
  if not trusted:
    safe_math.check_tree(expr, [variable, *parameters])
  return expr


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

  def verify(self, answer: str, fmt: str = "sympy", *, pool: workers.WorkerPool | None = None,
             symbolic_timeout: float = 2.0, numeric_timeout: float = 5.0) -> bool:
    """True when `answer` is a correct antiderivative (indefinite) or value (definite)."""
    return check_answers([self], [answer], fmt, pool=pool, symbolic_timeout=symbolic_timeout,
                         numeric_timeout=numeric_timeout)[0].correct


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
  integrand = integral.function.xreplace({limit[0]: variable})
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


def _number(value: Any) -> Any:
  """A finite SymPy or mpmath number as an mpmath complex (30 digits, no float overflow)."""
  try:
    with mpmath.workdps(30):
      if isinstance(value, sympy.Expr):
        if not value.is_number:
          return None
        re_part, im_part = (sympy.Float(part, 30) for part in value.as_real_imag())
        z = mpmath.mpc(re_part._mpf_, im_part._mpf_)  # pylint: disable=protected-access
      else:
        z = mpmath.mpc(value)
  except (TypeError, ValueError, AttributeError, ArithmeticError):
    return None
  return z if mpmath.isfinite(z.real) and mpmath.isfinite(z.imag) else None


def _close(a: Any, b: Any, rel: float) -> bool:
  """|a - b| within `rel` of the larger magnitude: a 1% error fails at every scale."""
  return abs(a - b) <= max(rel * max(abs(a), abs(b)), _ABS_FLOOR)


def _symbolic_task(problem: Problem, answer: str, fmt: str) -> bool:
  """Whether diff(answer) - integrand simplifies to 0 (indefinite problems)."""
  antiderivative = parse_answer(problem, answer, fmt)
  return sympy.simplify(sympy.diff(antiderivative, problem.variable) - problem.integrand) == 0


def _numeric_task(problem: Problem, answer: str, fmt: str, seed: int) -> bool:
  """diff(answer) == integrand at random real points where the integrand is finite."""
  antiderivative = parse_answer(problem, answer, fmt)
  params = _parameter_values(problem)
  derivative = sympy.diff(antiderivative, problem.variable).xreplace(params)
  integrand = problem.integrand.xreplace(params)
  rng = random.Random(seed)
  real_pairs, complex_pairs = [], []
  for k in range(60):
    if len(real_pairs) >= _NUM_POINTS:
      break
    scale = (0.5, 2.0, 6.0)[k % 3]
    point = sympy.Float(rng.uniform(-scale, scale), 30)
    subs = {problem.variable: point}
    target = _number(integrand.evalf(30, subs=subs))
    if target is None:
      continue
    got = _number(derivative.evalf(30, subs=subs))
    pairs = real_pairs if abs(target.imag) <= 1e-12 * max(1, abs(target)) else complex_pairs
    pairs.append((target, got))
  pairs = real_pairs if len(real_pairs) >= 3 else real_pairs + complex_pairs
  if len(pairs) < 3:
    return False  # nowhere to compare: not verified
  return all(got is not None and _close(got, target, _REL_TOL_DERIVATIVE) for target, got in pairs)


def _quad_points(lower: Any, upper: Any) -> list[Any]:
  """Subdivision points: kinks and oscillations converge far better on short pieces."""
  inf = mpmath.inf
  if lower == -inf and upper == inf:
    return [-inf, -16, -4, -1, 0, 1, 4, 16, inf]
  if upper == inf:
    return [lower + d for d in (0, 1, 4, 16)] + [inf]
  if lower == -inf:
    return [-inf] + [upper - d for d in (16, 4, 1, 0)]
  return [lower + (upper - lower) * k / 16 for k in range(17)]


def _mp_bound(bound: sympy.Expr) -> Any:
  if bound in (sympy.oo, -sympy.oo):
    return mpmath.inf if bound == sympy.oo else -mpmath.inf
  return mpmath.mpf(str(sympy.re(bound).evalf(25)))


def _definite_value_task(problem: Problem) -> Any:
  """The integral's value by tanh-sinh quadrature; None when its error estimate is poor."""
  params = _parameter_values(problem)
  integrand = problem.integrand.xreplace(params)
  lower, upper = (_mp_bound(b.xreplace(params)) for b in problem.bounds)
  fn = sympy.lambdify(problem.variable, integrand, "mpmath")  # our problem data, not model text
  with mpmath.workdps(20):
    try:
      value, error = mpmath.quad(fn, _quad_points(lower, upper), error=True)
    except (ArithmeticError, ValueError, TypeError):
      return None
  z = _number(value)
  return z if z is not None and error <= max(1e-8 * abs(z), _ABS_FLOOR / 100) else None


def _value_task(problem: Problem, answer: str, fmt: str, value: Any) -> bool:
  got = _number(parse_answer(problem, answer, fmt).xreplace(_parameter_values(problem)).evalf(30))
  return got is not None and _close(got, value, _REL_TOL_VALUE)


def _parse_task(problem: Problem, answer: str, fmt: str) -> bool:
  parse_answer(problem, answer, fmt)
  return True


# ---------------------------------------------------------------- verification (parent side)

_VALUES: dict[Problem, Any] = {}


def definite_value(problem: Problem, *, pool: workers.WorkerPool | None = None,
                   timeout: float = 10.0) -> Any:
  """The value of a definite problem (None if unknown: no reliable quadrature in time); cached."""
  if problem not in _VALUES:
    outcome = (pool or workers.default_pool()).run(_definite_value_task, problem, timeout=timeout)
    if outcome.status == "timeout":
      return None  # not cached: a later call may have more time
    _VALUES[problem] = outcome.value if outcome.ok else None
  return _VALUES[problem]


def check_answers(problems: Sequence[Problem], answers: Sequence[str | None], fmt: str = "sympy",
                  *, pool: workers.WorkerPool | None = None, symbolic_timeout: float = 2.0,
                  numeric_timeout: float = 5.0, seed: int = 0) -> list[Verdict]:
  """Formal verdicts for (problem, answer) pairs, batched over the worker pool.

  `format_ok`: the answer parses (None: no answer). `correct`: verified
  within the time limits. Timeouts and errors count as not verified.
  """
  pool = pool or workers.default_pool()
  for problem in {p for p in problems if p.definite}:
    definite_value(problem, pool=pool, timeout=numeric_timeout)
  todo = [i for i, a in enumerate(answers) if a is not None]
  parsed = pool.map(_parse_task, [(problems[i], answers[i], fmt) for i in todo], numeric_timeout)
  verdicts = [Verdict(False, False, "no answer") for _ in answers]
  for i, outcome in zip(todo, parsed):
    verdicts[i] = Verdict(outcome.ok, False, "parsed" if outcome.ok else
                          f"unparseable: {outcome.error}", answers[i])
  ok = [i for i in todo if verdicts[i].format_ok]

  def settle(indices, fn, make_args, timeout, stage):
    outcomes = pool.map(fn, [make_args(i) for i in indices], timeout)
    for i, outcome in zip(indices, outcomes):
      reason = {"ok": f"{stage}: {'ok' if outcome.value else 'wrong'}",
                "timeout": f"{stage}: timed out"}.get(outcome.status, f"{stage}: {outcome.error}")
      verdicts[i] = Verdict(True, bool(outcome.ok and outcome.value), reason, answers[i])

  definite = [i for i in ok if problems[i].definite]
  for i in definite:
    if _VALUES.get(problems[i]) is None:
      verdicts[i] = Verdict(True, False, "integral value unknown", answers[i])
  settle([i for i in definite if _VALUES.get(problems[i]) is not None], _value_task,
         lambda i: (problems[i], answers[i], fmt, _VALUES[problems[i]]), numeric_timeout, "value")
  indefinite = [i for i in ok if not problems[i].definite]
  settle(indefinite, _symbolic_task, lambda i: (problems[i], answers[i], fmt), symbolic_timeout,
         "symbolic")
  settle([i for i in indefinite if not verdicts[i].correct], _numeric_task,
         lambda i: (problems[i], answers[i], fmt, seed + i), numeric_timeout, "numeric")
  return verdicts
