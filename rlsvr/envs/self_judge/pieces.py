"""Where to split the interval of a definite integral (trusted problem data).

`integration_points` gives a standard subdivision refined by the points
where the integrand jumps or has a kink (`break_points`: floor, ceiling,
frac of expressions crossing an integer; Abs, sign, Heaviside, Max, Min
crossing zero), found by a fixed scan and bisection, and, on infinite
intervals, by where the mass of the tails lies. Every count is fixed, so the
points are the same under any load.
"""
from __future__ import annotations

from typing import Any, Callable

import mpmath
import sympy

from rlsvr.envs.self_judge import numeric

_JUMPS = (sympy.floor, sympy.ceiling, sympy.frac)  # jump where the argument crosses an integer
_KINKS = (sympy.Abs, sympy.sign, sympy.Heaviside)  # jump or kink where the argument crosses 0
_SCAN_POINTS = 4000  # samples per finite interval when looking for jump points
_MAX_BREAKS = 10_000  # beyond this the value is unknown


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
          raise numeric.OperationLimit(f"more than {_MAX_BREAKS} jump points")
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


MASS_GRID = [mpmath.mpf(10) ** (k / 1000) for k in range(-2000, 5001)]  # 0.01 .. 1e5, 0.2% apart


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
    for r in MASS_GRID:
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
    def apart(p, end):
      return not mpmath.isfinite(end) or abs(p - end) > 1e-15 * max(1, abs(end))
    inner = sorted(p for p in points if lower < p < upper and apart(p, lower) and apart(p, upper))
  return [lower, *inner, upper]  # the ends at their own (higher) precision
