"""Numbers for the integration verifier, bounded by operation counts, not by the clock.

The verifier must decide the same on an idle and on a loaded machine, and
on every process of a multi-host run, so its work is bounded by sizes and
operation counts:

- `evaluate` computes a SymPy tree at one point in fixed-precision mpmath
  (`DPS` digits), one operation per node, at most `max_ops` operations.
  Values beyond 2**`MAX_BITS` in magnitude are "not finite" (None) instead
  of being computed, so no number or argument reduction grows without bound:
  `sin(exp(exp(exp(x))))` costs what `sin(x)` does. Arguments of functions that
  grow like an exponential (exp, gamma, erf of complex values...) are checked
  before the call.
- `definite_integral` integrates trusted problem data by tanh-sinh quadrature
  with a fixed degree, after splitting the interval where the integrand
  jumps or has a kink (floor, ceiling, sign, Abs, Max, Min of expressions
  that cross an integer or zero inside it).

No wall clock appears here; the worker pool's time limit is a last safety net
whose hits are counted (`verifier/timeouts`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import mpmath
import sympy

DPS = 30
MAX_BITS = 1 << 15  # |value| < 2**32768 (about 1e9864)
_LN_MAX = MAX_BITS * 0.69  # exp(z) stays below 2**MAX_BITS when re(z) < this
DEFAULT_MAX_OPS = 200_000


class NotNumeric(ValueError):
  """The tree holds something this evaluator does not compute (a symbol, an unevaluated sum)."""


class OperationLimit(ValueError):
  """More than `max_ops` node evaluations: a deterministic "too large"."""


def _finite(z: Any) -> Any:
  if z is None or not (mpmath.isfinite(z.real) and mpmath.isfinite(z.imag)):
    return None
  magnitude = max(abs(z.real), abs(z.imag))
  if magnitude and mpmath.mag(magnitude) > MAX_BITS:
    return None
  return z


def _real(z: Any) -> Any:
  if z.imag != 0:
    raise NotNumeric("a real-only function of a complex value")
  return z.real


def _bounded(fn: Callable[[Any], Any], limit: float, part: str = "abs") -> Callable[[Any], Any]:
  """`fn`, returning None (too large) when |z| (or |re z|, |im z|) exceeds `limit`."""
  def call(z):
    size = {"abs": abs(z), "re": z.real, "im": abs(z.imag)}[part]
    return None if size > limit else fn(z)
  return call


def _sign(z):
  return mpmath.mpc(0) if z == 0 else z / abs(z)


def _delta(z):
  if z == 0:
    raise NotNumeric("DiracDelta at its singular point")
  return mpmath.mpc(0)


def _exp(z):
  return None if z.real > _LN_MAX else mpmath.exp(z)


def _trig(fn):  # sin, cos... of a complex value grow like exp(|im z|)
  return _bounded(fn, _LN_MAX, "im")


_FUNCTIONS: dict[type, Callable[..., Any]] = {
    sympy.sin: _trig(mpmath.sin), sympy.cos: _trig(mpmath.cos), sympy.tan: _trig(mpmath.tan),
    sympy.cot: _trig(mpmath.cot), sympy.sec: _trig(mpmath.sec), sympy.csc: _trig(mpmath.csc),
    sympy.asin: mpmath.asin, sympy.acos: mpmath.acos, sympy.atan: mpmath.atan,
    sympy.acot: mpmath.acot, sympy.asec: mpmath.asec, sympy.acsc: mpmath.acsc,
    sympy.sinh: _bounded(mpmath.sinh, _LN_MAX), sympy.cosh: _bounded(mpmath.cosh, _LN_MAX),
    sympy.tanh: _bounded(mpmath.tanh, _LN_MAX), sympy.coth: _bounded(mpmath.coth, _LN_MAX),
    sympy.sech: _bounded(mpmath.sech, _LN_MAX), sympy.csch: _bounded(mpmath.csch, _LN_MAX),
    sympy.asinh: mpmath.asinh, sympy.acosh: mpmath.acosh, sympy.atanh: mpmath.atanh,
    sympy.acoth: mpmath.acoth, sympy.asech: mpmath.asech, sympy.acsch: mpmath.acsch,
    sympy.exp: _exp, sympy.log: lambda z: None if z == 0 else mpmath.log(z),
    sympy.Abs: lambda z: mpmath.mpc(abs(z)), sympy.sign: _sign,
    sympy.floor: lambda z: mpmath.mpc(mpmath.floor(_real(z))),
    sympy.ceiling: lambda z: mpmath.mpc(mpmath.ceil(_real(z))),
    sympy.frac: lambda z: mpmath.mpc(mpmath.frac(_real(z))),
    sympy.re: lambda z: mpmath.mpc(z.real), sympy.im: lambda z: mpmath.mpc(z.imag),
    sympy.erf: _bounded(mpmath.erf, 140), sympy.erfc: _bounded(mpmath.erfc, 140),
    sympy.erfi: _bounded(mpmath.erfi, 140), sympy.Ei: _bounded(mpmath.ei, _LN_MAX),
    sympy.Si: _bounded(mpmath.si, _LN_MAX), sympy.Ci: _bounded(mpmath.ci, _LN_MAX),
    sympy.li: _bounded(mpmath.li, 1e300), sympy.zeta: _bounded(mpmath.zeta, 1e6),
    sympy.gamma: _bounded(mpmath.gamma, 2500), sympy.loggamma: _bounded(mpmath.loggamma, 1e300),
    sympy.factorial: _bounded(mpmath.factorial, 2500),
    sympy.DiracDelta: _delta, sympy.Heaviside: lambda z: mpmath.mpc(
        1 if _real(z) > 0 else 0 if z.real < 0 else mpmath.mpf(1) / 2),
    sympy.polygamma: lambda n, z: None if abs(z) > 1e300 else mpmath.psi(int(_real(n)), z),
    sympy.Max: lambda *zs: mpmath.mpc(max(_real(z) for z in zs)),
    sympy.Min: lambda *zs: mpmath.mpc(min(_real(z) for z in zs)),
}
_CONSTANTS = {sympy.pi: mpmath.pi, sympy.E: mpmath.e, sympy.I: mpmath.j,
              sympy.EulerGamma: mpmath.euler, sympy.Catalan: mpmath.catalan,
              sympy.GoldenRatio: mpmath.phi}


def _power(base, exponent):
  if base == 0:
    return None if exponent.real <= 0 else mpmath.mpc(0)
  if (exponent * mpmath.log(base)).real > _LN_MAX:
    return None
  if exponent.imag == 0 and exponent.real == int(exponent.real):
    return mpmath.power(base, int(exponent.real))  # exact sign for integer powers
  return mpmath.power(base, exponent)


@dataclasses.dataclass
class _Budget:
  left: int

  def spend(self) -> None:
    self.left -= 1
    if self.left < 0:
      raise OperationLimit("evaluation needs more operations than allowed")


def evaluate(expr: sympy.Expr, values: Mapping[sympy.Symbol, Any], *,
             max_ops: int = DEFAULT_MAX_OPS, dps: int = DPS) -> Any:
  """`expr` at `values` as an mpmath complex, or None where it is not finite.

  Raises NotNumeric for nodes it cannot compute and OperationLimit past
  `max_ops` nodes (shared subtrees are computed once). Sums and products
  (problem data only: answers cannot hold them) are added up term by term
  within the same budget; an infinite one stops once `_TAIL_TERMS` terms in a
  row change nothing at `dps` digits.
  """
  with mpmath.workdps(dps):
    return _evaluate(expr, {s: mpmath.mpc(v) for s, v in values.items()}, _Budget(max_ops))


def _evaluate(expr: sympy.Expr, env: Mapping[sympy.Symbol, Any], budget: _Budget) -> Any:
  memo: dict[sympy.Basic, Any] = {}
  # Iterative post-order: trees can be deeper than Python's recursion limit.
  stack = [(expr, False)]
  while stack:
    node, ready = stack.pop()
    if node in memo:
      continue
    if isinstance(node, (sympy.Sum, sympy.Product)):
      memo[node] = _finite(_series(node, env, budget))
      continue
    if not ready and node.args and not node.is_Number:
      stack.append((node, True))
      stack.extend((arg, False) for arg in node.args if arg not in memo)
      continue
    budget.spend()
    memo[node] = _finite(_node_value(node, env, memo))
  return memo[expr]


_TAIL_TERMS = 8
_MAX_TERMS = 20_000


def _series(node: Any, env: Mapping[sympy.Symbol, Any], budget: _Budget) -> Any:
  if len(node.limits) != 1:
    raise NotNumeric("a multiple sum or product")
  k, low, high = node.limits[0]
  low = _evaluate(low, env, budget)
  high = mpmath.inf if high == sympy.oo else _evaluate(high, env, budget)
  if low is None or high is None or low.imag or high.imag or low.real != int(low.real):
    raise NotNumeric("sum or product limits that are not integers")
  is_sum = isinstance(node, sympy.Sum)
  total, quiet = mpmath.mpc(0 if is_sum else 1), 0
  n = int(low.real)
  while n <= high.real:
    if n - int(low.real) >= _MAX_TERMS:
      raise OperationLimit(f"more than {_MAX_TERMS} terms")
    term = _evaluate(node.function, {**env, k: mpmath.mpc(n)}, budget)
    if term is None:
      return None
    new = total + term if is_sum else total * term
    quiet = quiet + 1 if new == total else 0
    total, n = new, n + 1
    if quiet >= _TAIL_TERMS and high.real == mpmath.inf:
      break
  return total


def _node_value(node: sympy.Basic, env: Mapping[sympy.Symbol, Any], memo) -> Any:
  if node.is_Integer:
    return mpmath.mpc(int(node))
  if node.is_Rational:
    return mpmath.mpc(mpmath.mpf(int(node.p)) / int(node.q))
  if node.is_Float:
    return mpmath.mpc(mpmath.mpf(node._mpf_))  # pylint: disable=protected-access
  if node in _CONSTANTS:
    return mpmath.mpc(+_CONSTANTS[node])
  if node.is_Symbol:
    if node not in env:
      raise NotNumeric(f"no value for {node}")
    return env[node]
  args = [memo[a] for a in node.args]
  if any(a is None for a in args):
    return None  # a sub-expression is not finite: neither is this (no limits are taken)
  if node.is_Add:
    return mpmath.fsum(args)
  if node.is_Mul:
    return mpmath.fprod(args)
  if node.is_Pow:
    return _power(*args)
  fn = _FUNCTIONS.get(node.func)
  if fn is None:
    raise NotNumeric(f"cannot evaluate {node.func.__name__}")
  if node.func is sympy.log and len(args) == 2:
    return None if args[0] == 0 else mpmath.log(args[0]) / mpmath.log(args[1])
  return fn(*args)


# ---------------------------------------------------------------- definite integrals

_JUMPS = (sympy.floor, sympy.ceiling, sympy.frac)  # jump where the argument crosses an integer
_KINKS = (sympy.Abs, sympy.sign, sympy.Heaviside)  # jump or kink where the argument crosses 0
_SCAN_POINTS = 4000  # samples per finite interval when looking for jump points
_MAX_BREAKS = 1000  # beyond this, quadrature over the pieces costs minutes: value unknown
_QUAD_DEGREE = 7  # tanh-sinh levels per piece: fixed, so the value never depends on the time


def _real_fn(expr: sympy.Expr, x: sympy.Symbol) -> Callable[[Any], Any]:
  compiled = sympy.lambdify(x, expr, "mpmath")  # trusted problem data only

  def fn(t):
    try:
      z = mpmath.mpc(compiled(t))
    except (ArithmeticError, ValueError, TypeError, ZeroDivisionError):
      return None
    if not (mpmath.isfinite(z.real) and mpmath.isfinite(z.imag)):
      return None
    return None if abs(z.imag) > 1e-12 * max(1, abs(z.real)) else z.real
  return fn


def break_points(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any) -> list[Any]:
  """Points of (lower, upper) where a floor/ceiling/frac argument crosses an integer, or an
  Abs/sign/Max/Min argument crosses zero, found by scanning and bisection (finite bounds;
  trusted problem data: the arguments are compiled with lambdify)."""
  signals = []  # (f, jumps at integers (True) or at zero (False))
  for node in sympy.preorder_traversal(integrand):
    if isinstance(node, _JUMPS) and node.args[0].has(x):
      signals.append((_real_fn(node.args[0], x), True))
    elif isinstance(node, _KINKS) and node.args[0].has(x):
      signals.append((_real_fn(node.args[0], x), False))
    elif isinstance(node, (sympy.Max, sympy.Min)):
      for a, b in zip(node.args, node.args[1:]):
        signals.append((_real_fn(a - b, x), False))
  if not signals or not (mpmath.isfinite(lower) and mpmath.isfinite(upper)):
    return []
  grid = [lower + (upper - lower) * k / _SCAN_POINTS for k in range(_SCAN_POINTS + 1)]
  points = set()
  for fn, at_integers in signals:
    values = [fn(t) for t in grid]
    # A grid point exactly at a level is a jump point itself; levels strictly between two
    # samples are bisected for.
    points |= {t for t, v in zip(grid, values)
               if v is not None and (v == int(v) if at_integers else v == 0)}
    for (t0, v0), (t1, v1) in zip(zip(grid, values), zip(grid[1:], values[1:])):
      if v0 is None or v1 is None:
        continue
      low, high = min(v0, v1), max(v0, v1)
      levels = (range(int(mpmath.floor(low)) + 1, int(mpmath.ceil(high)))
                if at_integers else ([0] if low < 0 < high else []))
      for level in levels:
        if len(points) >= _MAX_BREAKS:
          raise OperationLimit(f"more than {_MAX_BREAKS} jump points")
        points.add(_bisect(fn, t0, t1, v0 - level, level))
  return sorted(p for p in points if lower < p < upper)


def _bisect(fn, t0, t1, f0, level, steps: int = 36):
  # 36 halvings of a scan step (1/4000 of the interval) place a jump within ~1e-14 of it.
  for _ in range(steps):
    mid = (t0 + t1) / 2
    value = fn(mid)
    if value is None:
      return mid
    if (value - level > 0) == (f0 > 0):
      t0, f0 = mid, value - level
    else:
      t1 = mid
  return (t0 + t1) / 2


def _subdivision(lower: Any, upper: Any) -> list[Any]:
  """Pieces of the interval: kinks and oscillations converge far better on short pieces."""
  inf = mpmath.inf
  if lower == -inf and upper == inf:
    return [-inf, -16, -4, -1, 0, 1, 4, 16, inf]
  if upper == inf:
    return [lower + d for d in (0, 1, 4, 16)] + [inf]
  if lower == -inf:
    return [-inf] + [upper - d for d in (16, 4, 1, 0)]
  return [lower + (upper - lower) * k / 16 for k in range(17)]


_MASS_GRID = [mpmath.mpf(10) ** (k / 1000) for k in range(-2000, 5001)]  # 0.01 .. 1e5, 0.2% apart


def _mass_points(fn: Callable[[Any], Any], lower: Any, upper: Any) -> list[Any]:
  """Where a fast-decaying integrand over an infinite interval has its mass (e.g. a narrow
  peak at 2024), which the standard pieces would step over: around the largest |f| on a fine
  geometric grid."""
  if mpmath.isfinite(lower) and mpmath.isfinite(upper):
    return []
  best, where = mpmath.mpf(0), None
  origin = 0 if not (mpmath.isfinite(lower) or mpmath.isfinite(upper)) else (
      lower if mpmath.isfinite(lower) else upper)
  for direction in (1, -1):
    for r in _MASS_GRID:
      t = origin + direction * r
      if not lower < t < upper:
        continue
      try:
        value = abs(fn(t))
      except (ArithmeticError, ValueError, TypeError):
        continue
      if mpmath.isfinite(value) and value > best:
        best, where = value, t
  if where is None or abs(where - origin) < 16:
    return []  # the standard pieces already resolve it
  width = abs(where - origin) / 50
  return [p for p in (where - 4 * width, where - width, where, where + width, where + 4 * width)
          if lower < p < upper]


def integration_points(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any,
                       fn: Callable[[Any], Any]) -> list[Any]:
  """The standard subdivision refined by jump points and the mass of the tails; give the
  bounds at 50 digits, so that the 40-digit pass sees them exactly."""
  with mpmath.workdps(20):
    points = set(_subdivision(lower, upper)) | set(break_points(integrand, x, lower, upper))
    points |= set(_mass_points(fn, lower, upper))
    # Not within rounding of an end: a sliver there would be sampled outside the domain.
    apart = lambda p, end: not mpmath.isfinite(end) or abs(p - end) > 1e-15 * max(1, abs(end))  # noqa: E731
    inner = sorted(p for p in points if lower < p < upper and apart(p, lower) and apart(p, upper))
  return [lower, *inner, upper]  # the ends at their own (higher) precision


def definite_integral(fn: Callable[[Any], Any], points: list[Any],
                      dps: int = 20) -> tuple[Any, Any]:
  """(value, error estimate) of the integral of `fn` over the pieces between `points`.

  Finite ends move inward by about one unit in the last place: a bound such
  as sqrt(2026), rounded up, would put samples outside the domain (complex).
  """
  with mpmath.workdps(dps):
    points = list(points)
    nudge = mpmath.mpf(10) ** (2 - dps)
    if mpmath.isfinite(points[0]):
      points[0] += nudge * max(1, abs(points[0]))
    if mpmath.isfinite(points[-1]):
      points[-1] -= nudge * max(1, abs(points[-1]))
    return mpmath.quad(fn, points, error=True, maxdegree=_QUAD_DEGREE)


def trustworthy(fn: Callable[[Any], Any], points: list[Any]) -> bool:
  """Whether quadrature of `fn` over `points` can be believed, whatever its error estimate.

  Two ways a quadrature reports a small error for a wrong value: the
  integrand cannot be computed at the working precision (sin(2**2025 x) at 20
  digits is noise), or an infinite tail does not decay (cos(x**2) to
  infinity: tanh-sinh sums 1e23). So: the integrand at 20 and at 60 digits
  agrees at the pieces' midpoints, and t |f(t)| at t = 1e4, 1e6, 1e8 on each
  infinite end is negligible or at least halves at each step.
  """
  def at(t, dps):
    with mpmath.workdps(dps):
      try:
        return mpmath.mpc(fn(+t))
      except (ArithmeticError, ValueError, TypeError, ZeroDivisionError):
        return None
  finite = [p for p in points if mpmath.isfinite(p)]
  for a, b in list(zip(finite, finite[1:]))[:64]:
    lo, hi = at((a + b) / 2, 20), at((a + b) / 2, 60)
    if (lo is None) != (hi is None) or (lo is not None and abs(lo - hi) > 1e-10 * max(
        1, abs(hi))):
      return False
  for end, sign in ((points[0], -1), (points[-1], 1)):
    if mpmath.isfinite(end):
      continue
    far = [at(sign * mpmath.mpf(10) ** k, 30) for k in (4, 6, 8)]
    weights = [0 if v is None else 10 ** k * abs(v) for k, v in zip((4, 6, 8), far)]
    decays = weights[1] <= weights[0] / 2 and weights[2] <= weights[1] / 2
    if max(weights) > 1e-12 and not decays:
      return False
  return True

