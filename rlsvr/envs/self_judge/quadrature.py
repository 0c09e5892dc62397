"""Definite integrals of trusted problem data, bounded by work, not by the clock.

`integral(integrand, x, lower, upper)` is the value of a definite problem
with an error estimate, or None when the methods below cannot pin it down
within their fixed budgets (then no answer to the problem verifies):

1. The interval is split where the integrand jumps or has a kink, and where
   the mass of infinite tails lies (`pieces.integration_points`).
2. On a finite interval, composite Gauss-Legendre in float64 (numpy) on
   2**k equal panels plus the pieces' ends, k growing until three levels
   agree, believed only if float64 matches 60-digit mpmath at sampled nodes.
   Cheap, and it resolves thousands of oscillations (sin(2025 x) on
   [0, 2 pi]) and of jumps (floor(2023 sin x)).
3. Otherwise (infinite intervals, singular ends, complex values) tanh-sinh
   quadrature (mpmath) at a fixed degree over the pieces, at 20 then 40
   digits, believed only if the integrand is the same at 20 and 60 digits
   and infinite tails decay (`trustworthy`); not tried when the pieces
   times the size of the integrand's tree exceed a work bound.

Every budget is a count (degrees, pieces, panels, nodes), so a value is the same
under any load. The panel method's float64 functions come from numpy, whose
SIMD code may differ in the last bit between CPU types: a value can move by
~1e-15 relative there, against a comparison tolerance of 1e-6.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import mpmath
import numpy as np
import sympy

from rlsvr.envs.self_judge import numeric, pieces

# Comparisons are relative; this absolute floor only matters for values within ~1e-12 of
# zero (an integral that is exactly 0), where no relative test can pass.
ABS_FLOOR = 1e-12


@dataclasses.dataclass(frozen=True)
class IntegralValue:
  """A definite integral's value, its error estimate and the integral of |f|."""

  value: Any
  error: Any
  scale: Any

  @property
  def tolerance(self) -> Any:
    """The absolute slack of a comparison: near zero, what the quadrature can tell apart."""
    return max(ABS_FLOOR, 10 * self.error, 1e-10 * self.scale)


def accurate(value: Any, error: Any, scale: Any) -> bool:
  # Known to 1e-8 of the value, or (an integral near 0) to 1e-11 of the integral of |f|.
  return error <= max(1e-8 * abs(value), 1e-11 * scale)

_QUAD_DEGREE = 7  # tanh-sinh levels per piece: fixed, so the value never depends on the time


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



ERRORS = (ArithmeticError, ValueError, TypeError, numeric.NotNumeric, numeric.OperationLimit)


def mp_function(integrand: sympy.Expr, x: sympy.Symbol) -> Callable[[Any], Any]:
  """The integrand as an mpmath function of x (our problem data, not model text)."""
  if integrand.has(sympy.Sum, sympy.Product):  # lambdify cannot print them; ours adds them up
    def fn(t):
      z = numeric.evaluate(integrand, {x: t}, dps=mpmath.mp.dps)
      if z is None:
        raise ArithmeticError("not finite")
      return z
    return fn
  return sympy.lambdify(x, integrand, "mpmath")


def integral(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any
             ) -> IntegralValue | None:
  """The integral over (lower, upper) (mpmath bounds) by panels (finite intervals) or
  tanh-sinh, or None when they cannot pin it down (`tails.integral` then tries series)."""
  fn = mp_function(integrand, x)
  work, finite = tree_work(integrand), mpmath.isfinite(lower) and mpmath.isfinite(upper)
  scan = len(pieces.MASS_GRID) + 8 * _TANH_SINH_EVALUATIONS
  if not finite and scan * work > _MAX_TANH_SINH_WORK:
    return None  # only tanh-sinh integrates to infinity, and it cannot afford this tree
  try:
    points = pieces.integration_points(integrand, x, lower, upper, fn)
  except ERRORS:
    return None
  value = _panels(integrand, x, points, fn, work) if finite else None
  affordable = (len(points) - 1) * _TANH_SINH_EVALUATIONS * work <= _MAX_TANH_SINH_WORK
  if value is None and affordable and trustworthy(fn, points):
    value = _tanh_sinh(fn, points)
  return value


# Evaluations of the integrand per piece, at most: degree 7 at 20 and at 40 digits, for f
# and |f|. Times the nodes of the tree, a bound on the mpmath work (~10 us a node).
_TANH_SINH_EVALUATIONS = 2 * (1000 + 1100)
_MAX_TANH_SINH_WORK = 30_000_000
_TERMS_OF_AN_INFINITE_SERIES = 100  # a typical stop of `numeric.evaluate`'s series


def tree_work(expr: sympy.Basic) -> int:
  """Nodes evaluated per point, a sum or product counting its body once per term."""
  if isinstance(expr, (sympy.Sum, sympy.Product)):
    terms = 1
    for _, lo, hi in expr.limits:
      count = hi - lo + 1
      terms *= int(count) if count.is_Integer else _TERMS_OF_AN_INFINITE_SERIES
    return 1 + max(terms, 1) * tree_work(expr.function)
  return 1 + sum(tree_work(arg) for arg in expr.args)


def _tanh_sinh(fn: Callable[[Any], Any], points: list[Any]) -> IntegralValue | None:
  # Retried at 40 digits when 20 leave the error estimate poor (cancellation near a
  # singular point): more work, the same answer on every machine.
  for dps in (20, 40):
    try:
      value, error = definite_integral(fn, points, dps)
      scale, scale_error = definite_integral(lambda t: abs(fn(t)), points, dps)
    except ERRORS:
      return None
    with mpmath.workdps(30):
      z = mpmath.mpc(value)
    if not (mpmath.isfinite(z.real) and mpmath.isfinite(z.imag) and mpmath.isfinite(scale)):
      return None
    # |value| <= the integral of |f|. That integral has kinks at every zero of f and may be
    # known only roughly: it only sets the slack of comparisons near zero.
    consistent = abs(z) <= (scale + scale_error) * (1 + 1e-9)
    if consistent and accurate(z, error, scale):
      return IntegralValue(z, error, scale)
  return None


_GAUSS = np.polynomial.legendre.leggauss(16)  # exact for degree 31 on each panel
_FIRST_PANELS = 64  # equal panels, plus the pieces' ends
_MAX_PANELS = 1 << 18  # each level halves them all: at most 4.2M float64 evaluations a level
MAX_PANEL_WORK = 4_000_000_000  # evaluations times tree nodes, a level (~1 ns each)
_SAMPLED_NODES = 64


def _panels(integrand: sympy.Expr, x: sympy.Symbol, points: list[Any],
            fn: Callable[[Any], Any], work: int) -> IntegralValue | None:
  """Composite Gauss-Legendre in float64 on panels halved level by level (split at `points`).

  Believed when three successive levels agree to the accuracy tanh-sinh must
  reach and float64 matches 60-digit `fn` at sampled nodes of the first and
  the last level (nodes nearest the ends included, where removable
  singularities such as (1 - cos 2x) / x**2 lose the most digits).
  """
  f = float64_form(integrand, x) if work * _FIRST_PANELS * 16 <= MAX_PANEL_WORK else None
  if f is None:
    return None
  edges = np.union1d(np.linspace(float(points[0]), float(points[-1]), _FIRST_PANELS + 1),
                     [float(p) for p in points])
  history: list[tuple[float, float]] = []
  with np.errstate(all="ignore"):
    while edges.size <= _MAX_PANELS + 1 and edges.size * 16 * work <= MAX_PANEL_WORK:
      middle, half = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
      nodes = middle[:, None] + half[:, None] * _GAUSS[0][None, :]  # panels x 16
      try:
        values = np.broadcast_to(np.asarray(f(nodes)), nodes.shape)
      except Exception:  # noqa: BLE001 - a function numpy lacks, a series that never settles
        return None
      if values.dtype.kind != "f" or not np.all(np.isfinite(values)):
        return None  # complex or not finite somewhere: tanh-sinh's business
      if not history and not float_matches(values, nodes, fn):
        return None
      weights = half[:, None] * _GAUSS[1][None, :]
      history.append((float(np.sum(values * weights)), float(np.sum(np.abs(values) * weights))))
      if len(history) >= 3:
        (v0, _), (v1, _), (v2, scale) = history[-3:]
        error = max(abs(v2 - v1), abs(v1 - v0))
        if accurate(v2, error, scale):
          if not float_matches(values, nodes, fn):
            return None
          return IntegralValue(mpmath.mpc(v2), mpmath.mpf(error), mpmath.mpf(scale))
      # Every panel is halved: a piece that stayed whole would agree with itself.
      edges = np.sort(np.concatenate([edges, middle]))
  return None


def float64_form(integrand: sympy.Expr, x: sympy.Symbol) -> Callable[[Any], Any] | None:
  """The integrand as a numpy function of x (our problem data, not model text), or None.

  Sums and products are added up term by term over all nodes at once; an
  infinite one stops, as in `numeric.evaluate`, once `TAIL_TERMS` terms in a
  row change no value.
  """
  series = {}
  for node in sympy.preorder_traversal(integrand):
    if isinstance(node, (sympy.Sum, sympy.Product)) and node not in series:
      if len(node.limits) != 1 or node.function.has(sympy.Sum, sympy.Product):
        return None
      series[node] = sympy.Function(f"series{len(series)}")(x)
  try:
    implementations = {str(call.func): _float64_series(node, x) for node, call in series.items()}
    return sympy.lambdify(x, integrand.xreplace(series), [implementations, "numpy"])
  except Exception:  # noqa: BLE001 - any printer failure means "no float64 form"
    return None


def _float64_series(node: sympy.Expr, x: sympy.Symbol) -> Callable[[Any], Any]:
  k, low, high = node.limits[0]
  if not (low.is_Integer and (high.is_Integer or high == sympy.oo)):
    raise ValueError("sum or product limits that are not integers")
  term = sympy.lambdify((x, k), node.function, "numpy")
  is_sum = isinstance(node, sympy.Sum)

  def total(t):
    result, quiet = np.full(np.shape(t), 0.0 if is_sum else 1.0), 0
    for n in range(int(low), int(low) + numeric.MAX_TERMS):
      if high != sympy.oo and n > high:
        return result
      new = result + term(t, float(n)) if is_sum else result * term(t, float(n))
      quiet = quiet + 1 if np.array_equal(new, result) else 0
      result = new
      if quiet >= numeric.TAIL_TERMS and high == sympy.oo:
        return result
    raise ArithmeticError(f"more than {numeric.MAX_TERMS} terms")
  return total


def float_matches(values: np.ndarray, nodes: np.ndarray, fn: Callable[[Any], Any]) -> bool:
  flat_values, flat_nodes = values.ravel(), nodes.ravel()
  typical = float(np.mean(np.abs(flat_values)))
  picks = np.unique(np.linspace(0, flat_nodes.size - 1, _SAMPLED_NODES).round().astype(int))
  with mpmath.workdps(60):
    for i in picks:
      try:
        exact = mpmath.mpc(fn(mpmath.mpf(float(flat_nodes[i]))))  # the same binary node
      except ERRORS:
        return False
      if abs(exact - float(flat_values[i])) > 1e-6 * max(abs(exact), typical):
        return False
  return True
