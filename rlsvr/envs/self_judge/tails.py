"""Integrals that jump or oscillate infinitely often toward an end, summed as series.

`quadrature` cannot resolve floor(x) on [1, oo) (a jump at every integer),
sin(x**2) to infinity or sin(cot(x)**2) at 0 (infinitely many oscillations):
tanh-sinh at a fixed degree and panels on a finite interval both see only
finitely many. Here such an end is mapped to t -> oo (x = c + 1/t at a
finite end c) and cut where its phases cross integers: the arguments of
floor/ceiling/frac and of Max/Min/Abs in a series, and x / pi for the
arguments of sin, cos... All phases must be rational multiples of one,
so the cuts repeat: the integral over unit k of that phase is a term T_k
that varies smoothly with k. Terms come from float64 Gauss-Legendre
between the cuts (refined until two levels agree); their sum is believed
only when two estimates agree to `_AGREE` of it:

- alternating terms of decreasing size (a convergent Leibniz series): the
  Euler transform (repeated averaging of partial sums, a convex combination,
  so float64 noise is not amplified) from two different starts;
- otherwise terms whose absolute block sums shrink by doublings, whose
  partial sums are extrapolated in 1/n (Romberg) from two samplings, n = 16 * 2**j
  and 12 * 2**j: log terms, half-integer powers or patterns not periodic
  in 16 and 12 leave them apart.

Either way the integral of f from a cut to any point of its unit must
shrink too: at cuts alone, sin(2x) sin(x) (divergent) sums to exactly 0.
What lies beyond the last unit (2048 half-periods of sin(x): x < 6434) is
seen only through the terms' smooth trend, as tanh-sinh sees a tail only
through its nodes. Every count is fixed (terms, grid, panels), so the value
is the same under any load; numpy's last bits may differ between CPU types,
far below `_AGREE`. Anything else is None.
"""
from __future__ import annotations

import fractions
import math
from typing import Any

import mpmath
import numpy as np
import sympy

from rlsvr.envs.self_judge import pieces, quadrature

_WAVES = (sympy.sin, sympy.cos, sympy.tan, sympy.cot, sympy.sec, sympy.csc)
_TERMS = 2048  # units of the phase summed; Romberg needs 16 * 2**7
_GRID = np.arange(16 * 60 + 1) / 16  # log2 of 1 + distance from the tail's start, 2**60 at most
_MAX_DENOMINATOR = 12  # phases whose ratio is a fraction with a larger denominator: refused
_AGREE = 1e-10  # the two estimates of a tail, relative to its value
_DECAY = 0.9  # what each doubling of the terms must shrink them by, at least
_GAUSS = np.polynomial.legendre.leggauss(16)
_FIRST_PANELS = 4  # per piece between cuts: also where the integral inside a unit is seen
_MAX_PANELS = 1 << 12
_MAX_PIECES = 1 << 17  # cuts in all, so a unit holds at most 64


def integral(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any
             ) -> quadrature.IntegralValue | None:
  """The integral over (lower, upper) (mpmath bounds): `quadrature.integral`, else with each
  end that jumps or oscillates infinitely often summed as a series; or None."""
  try:
    value = quadrature.integral(integrand, x, lower, upper)
  except quadrature.ERRORS:
    value = None
  if value is None:
    try:
      value = _with_series(integrand, x, lower, upper)
    except quadrature.ERRORS:
      value = None
  return value


def _with_series(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any
                 ) -> quadrature.IntegralValue | None:
  t = sympy.Dummy("t", positive=True)
  inf = mpmath.inf
  if not lower < upper:
    return None
  split = (0 if lower == -inf and upper == inf else lower + 1 if upper == inf else
           upper - 1 if lower == -inf else (lower + upper) / 2)
  ends = []  # (integrand in t, where t starts), each to t = oo
  if lower == -inf:
    ends.append((integrand.xreplace({x: -t}), -split))
  else:
    ends.append((integrand.xreplace({x: _exact(lower) + 1 / t}) / t**2, 1 / (split - lower)))
  if upper == inf:
    ends.append((integrand.xreplace({x: t}), split))
  else:
    ends.append((integrand.xreplace({x: _exact(upper) - 1 / t}) / t**2, 1 / (upper - split)))
  wavy = [_wavy(g, t, start) for g, start in ends]
  if not any(wavy):
    return None
  middle = (lower if not wavy[0] else split, upper if not wavy[1] else split)
  jobs = [(_tail, (g, t, start)) for (g, start), w in zip(ends, wavy) if w]
  if middle[0] != middle[1]:
    jobs.append((_direct, (integrand, x, *middle)))
  parts = []
  for job, args in jobs:  # the first that fails settles it
    parts.append(job(*args))
    if parts[-1] is None:
      return None
  with mpmath.workdps(30):
    value = mpmath.fsum(p.value for p in parts)
    error = mpmath.fsum(p.error for p in parts)
    scale = mpmath.fsum(p.scale for p in parts)
  if not quadrature.accurate(value, error, scale):
    return None
  return quadrature.IntegralValue(mpmath.mpc(value), error, scale)


def _exact(bound: Any) -> sympy.Expr:
  # The binary value of an mpmath bound, exactly: 1/4 stays 1/4, and pi/2 is 50 digits of it.
  man, exp = mpmath.mpf(bound).man_exp
  return sympy.Integer(man) * sympy.Integer(2) ** exp


def _direct(integrand, x, lower, upper):
  if not lower < upper:
    return quadrature.IntegralValue(mpmath.mpc(0), mpmath.mpf(0), mpmath.mpf(0))
  try:
    return quadrature.integral(integrand, x, lower, upper)
  except quadrature.ERRORS:
    return None


def _phases(expr: sympy.Expr, t: sympy.Symbol) -> list[tuple[sympy.Expr, str]] | None:
  """(phase, kind) of `expr`: "jump" (cut where it crosses an integer), "kink" (where it
  crosses 0), "wave" (x / pi of a sine's argument); None for a wave whose argument jumps."""
  bound = {limit[0] for node in expr.atoms(sympy.Sum, sympy.Product) for limit in node.limits}
  found = []
  for node in sympy.preorder_traversal(expr):
    if isinstance(node, pieces._JUMPS) and node.args[0].has(t):
      found.append((node.args[0], "jump"))
    elif isinstance(node, pieces._KINKS) and node.args[0].has(t):
      found.append((node.args[0], "kink"))
    elif isinstance(node, (sympy.Max, sympy.Min)):
      found += [(a - b, "kink") for a, b in zip(node.args, node.args[1:]) if (a - b).has(t)]
    elif isinstance(node, _WAVES) and node.args[0].has(t):
      steps = node.args[0].atoms(*pieces._JUMPS)
      if not steps:  # cut at the zeros: cut at its peaks, a unit's integral is all cancellation
        shift = sympy.Rational(1, 2) if isinstance(node, (sympy.cos, sympy.sec)) else 0
        found.append((node.args[0] / sympy.pi - shift, "wave"))
      elif node.args[0].xreplace({s: sympy.Dummy() for s in steps}).has(t):
        return None  # cos(x floor(x)): no phase of ours describes it
  phases = []
  for phase, kind in found:
    summed = phase.free_symbols & bound
    if summed:
      # max(0, x - k) over all integers k: a kink wherever x is an integer.
      if len(summed) > 1 or kind == "wave":
        return None
      k = summed.pop()
      slope = sympy.diff(phase, k)
      if slope.has(t) or slope.free_symbols or slope == 0 or sympy.diff(slope, k) != 0:
        return None
      rest = sympy.expand(phase - slope * k)
      if kind == "kink":
        phase = -rest / slope
      elif slope.is_integer:
        phase = rest
      else:
        return None
      kind = "jump"
    if phase.free_symbols - {t}:
      return None
    if (phase, kind) not in phases:
      phases.append((phase, kind))
  return phases


def _wavy(g: sympy.Expr, t: sympy.Symbol, start: Any) -> bool:
  """Whether some phase of `g` crosses more integers than the series sums, toward t = oo."""
  phases = _phases(g, t)
  if not phases:
    return False  # nothing to cut at, or (None) cuts we cannot describe
  grid = float(start) + (abs(float(start)) + 1) * (2.0 ** _GRID - 1)
  for phase, kind in phases:
    if kind != "kink":
      values = _on(phase, t, grid)
      finite = values[np.isfinite(values)]
      if finite.size and np.ptp(finite) > 4 * _TERMS:
        return True
  return False


def _on(expr: sympy.Expr, t: sympy.Symbol, grid: np.ndarray) -> np.ndarray:
  try:
    fn = sympy.lambdify(t, expr, "numpy")  # our problem data, not model text
    with np.errstate(all="ignore"):
      values = np.broadcast_to(np.asarray(fn(grid), dtype=complex), grid.shape)
  except Exception:  # noqa: BLE001 - anything numpy cannot compute is "not finite"
    return np.full(grid.shape, np.nan)
  return np.where(np.abs(values.imag) <= 1e-12 * np.abs(values.real), values.real, np.nan)


def _tail(g: sympy.Expr, t: sympy.Symbol, start: Any) -> quadrature.IntegralValue | None:
  """The integral of `g` over (start, oo): the piece up to the first cut directly, then the
  terms, one per unit of the phase, between cuts."""
  phases, f = _phases(g, t), quadrature.float64_form(g, t)
  if not phases or f is None:
    return None
  grid = float(start) + (abs(float(start)) + 1) * (2.0 ** _GRID - 1)
  table = [(phase, kind, _on(phase, t, grid)) for phase, kind in phases]
  finite = np.all([np.isfinite(v) for _, _, v in table], axis=0)
  stop = finite.size if finite.all() else int(np.argmin(finite))  # the grid ends there
  first, cutting = 0, []  # from grid[first] on, no cut but those of the phases that cut
  for phase, kind, v in table:
    v = v[:stop]
    if kind != "kink" and v.size > 1 and np.ptp(v) > 4 * _TERMS:
      steps = np.sign(np.diff(v))
      turns = np.nonzero(steps != steps[-1])[0]  # the phase must be monotone from grid[first]
      cutting.append((phase, v))
    elif kind != "wave":  # finitely many cuts on the grid: all before grid[first]
      levels = np.sign(v) if kind == "kink" else np.floor(v)
      turns = np.nonzero(levels[1:] != levels[:-1])[0]
    else:  # a sine of a bounded argument is smooth: nothing to cut
      continue
    if turns.size:
      first = max(first, int(turns[-1]) + 1)
  if not cutting or stop - first < 2:
    return None
  cuts = _cuts(cutting, t, grid[first:stop])
  if cuts is None:
    return None
  points, per_unit = cuts
  head = _direct(g, t, start, mpmath.mpf(points[0]))
  terms = _terms(f, quadrature.mp_function(g, t), quadrature.tree_work(g), points, per_unit)
  if head is None or terms is None:
    return None
  units, within, gl_error = terms
  summed = _series(units, within)
  if summed is None:
    return None
  value, error, size = summed
  with mpmath.workdps(30):
    return quadrature.IntegralValue(head.value + value, head.error + error + gl_error,
                                    head.scale + size)


def _cuts(cutting: list[tuple[sympy.Expr, np.ndarray]], t: sympy.Symbol, grid: np.ndarray
          ) -> tuple[np.ndarray, int] | None:
  """Every point of the grid's span where a phase crosses an integer, for `_TERMS` units of
  one phase psi that all others are integer multiples of (plus a constant), and the cuts
  per unit; None when the phases are not commensurate or the grid is too short."""
  base = cutting[0][1][-grid.size:]
  rates = []
  for _, v in cutting:
    ratio = np.diff(v[-grid.size:]) / np.diff(base)
    rate = fractions.Fraction(float(ratio[-1])).limit_denominator(_MAX_DENOMINATOR)
    if rate == 0 or not np.all(np.abs(ratio - float(rate)) <= 1e-9 * abs(float(rate))):
      return None
    rates.append(rate)
  period = fractions.Fraction(math.lcm(*(r.denominator for r in rates)),
                              math.gcd(*(r.numerator for r in rates)))
  direction = 1 if base[-1] > base[0] else -1
  psi_grid = direction * base / float(period)  # increasing
  offsets = [0.0]
  for rate, (_, v) in zip(rates, cutting):
    multiple = int(rate * period) * direction  # phase_i = multiple * psi + shift
    shift = v[-grid.size] - multiple * psi_grid[0]
    offsets += [((j - shift) / multiple) % 1 for j in range(abs(multiple))]
  offsets = np.unique(np.round(np.array(offsets) % 1, 12))
  offsets = offsets[offsets < 1]
  if offsets.size * _TERMS > _MAX_PIECES:
    return None
  first = math.ceil(psi_grid[0])
  if psi_grid[-1] < first + _TERMS + 1:
    return None
  targets = (first + np.arange(_TERMS)[:, None] + offsets[None, :]).ravel()
  targets = np.append(targets, first + _TERMS)
  fn = sympy.lambdify(t, direction * cutting[0][0] / sympy.Rational(period.numerator,
                                                                     period.denominator), "numpy")
  right = np.searchsorted(psi_grid, targets)
  low, high = grid[np.maximum(right - 1, 0)], grid[right]
  with np.errstate(all="ignore"):
    for _ in range(64):  # bisection: float64 holds no more
      middle = (low + high) / 2
      below = np.asarray(fn(middle), dtype=float) < targets
      low, high = np.where(below, middle, low), np.where(below, high, middle)
  return high, offsets.size


def _terms(f, fn, work: int, points: np.ndarray, per_unit: int):
  """(integral over each unit, the largest |integral| from a unit's start to a quarter of a
  piece in it, the Gauss-Legendre error), or None: equal panels on each piece between cuts,
  doubled on the pieces where two levels disagree; float64 checked against 60 digits."""
  low, high = points[:-1], points[1:]
  sub = _gauss(f, low, high, _FIRST_PANELS, work, fn)
  if sub is None:
    return None
  running = np.cumsum(sub.reshape(-1, per_unit * _FIRST_PANELS), axis=1)
  within = np.max(np.abs(running), axis=1)
  coarse, result = np.sum(sub, axis=1), np.zeros(low.size)
  active, panels, error, deepest = np.arange(low.size), 2 * _FIRST_PANELS, 0.0, None
  while active.size:
    if panels > _MAX_PANELS:
      return None
    sub = _gauss(f, low[active], high[active], panels, work, None)
    if sub is None:
      return None
    fine = np.sum(sub, axis=1)
    gap = np.abs(fine - coarse)
    # Relative to the piece's |f|, as float64 rounding is: a piece's integral can cancel.
    done = gap <= 1e-13 * np.sum(np.abs(sub), axis=1)
    result[active[done]] = fine[done]
    error += float(np.sum(gap[done]))
    if active.size < low.size:
      deepest = (low[active], high[active], panels)
    active, coarse, panels = active[~done], fine[~done], 2 * panels
  # Sampled again on the finest panels, on the pieces that needed them: where f is hardest.
  if deepest is not None and _gauss(f, *deepest, work, fn) is None:
    return None
  return result.reshape(-1, per_unit).sum(axis=1), within, error


def _gauss(f, low: np.ndarray, high: np.ndarray, panels: int, work: int, fn) -> np.ndarray | None:
  """Gauss-Legendre on `panels` equal panels of each (low, high): pieces x panels, or None
  when not finite, too much work, or (given `fn`) float64 is not what 60 digits say."""
  if low.size * panels * 16 * work > quadrature.MAX_PANEL_WORK:
    return None
  edges = low[:, None] + (high - low)[:, None] * (np.arange(panels + 1) / panels)[None, :]
  middle, half = (edges[:, 1:] + edges[:, :-1]) / 2, (edges[:, 1:] - edges[:, :-1]) / 2
  nodes = middle[..., None] + half[..., None] * _GAUSS[0]
  try:
    with np.errstate(all="ignore"):
      values = np.broadcast_to(np.asarray(f(nodes)), nodes.shape)
  except Exception:  # noqa: BLE001 - a function numpy lacks, a series that never settles
    return None
  if values.dtype.kind != "f" or not np.all(np.isfinite(values)):
    return None
  if fn is not None and not quadrature.float_matches(values, nodes, fn):
    return None
  return np.sum(values * _GAUSS[1], axis=-1) * half


def _partial_sums(terms: np.ndarray) -> np.ndarray:
  # Compensated (Neumaier): thousands of float64 terms, each added without losing digits.
  sums, total, carry = [0.0], 0.0, 0.0
  for term in terms.tolist():
    new = total + term
    carry += (total - new) + term if abs(total) >= abs(term) else (term - new) + total
    total = new
    sums.append(total + carry)
  return np.array(sums)


def _series(terms: np.ndarray, within: np.ndarray) -> tuple[float, float, float] | None:
  """(sum, error, the largest partial sum) of the series, or None unless two estimates agree."""
  n = terms.size
  sums = _partial_sums(terms)
  size = float(np.max(np.abs(sums)))
  late, early = slice(n // 2, n), slice(n // 4, n // 2)
  rest = float(np.sum(np.abs(terms[n // 4:])) + np.max(within[n // 4:]))
  if rest <= 1e-15 * size:
    return float(sums[-1]), rest, size  # converged: what is left is below rounding
  if np.max(within[late]) > _DECAY * np.max(within[early]):
    return None  # the integral up to points inside units does not settle: no limit
  tail = terms[n // 4:]
  if (np.all(tail[1:] * tail[:-1] < 0) and np.all(np.abs(tail[1:]) < np.abs(tail[:-1]))
      and abs(terms[-1]) <= _DECAY * abs(terms[n // 2])):
    estimates = _euler(sums, n - 33, 32), _euler(sums, n // 2, 32)
  elif np.sum(np.abs(terms[late])) <= _DECAY**2 * np.sum(np.abs(terms[early])):
    estimates = _romberg(sums, 16), _romberg(sums, 12)
  else:
    return None
  a, b = estimates
  if not abs(a - b) <= _AGREE * max(abs(a), abs(b)) + 1e-14 * size:
    return None
  return a, abs(a - b), size


def _euler(sums: np.ndarray, start: int, order: int) -> float:
  # Repeated averaging of consecutive partial sums of an alternating series.
  weights = np.array([math.comb(order, j) for j in range(order + 1)], dtype=float) / 2**order
  return float(np.dot(weights, sums[start:start + order + 1]))


def _romberg(sums: np.ndarray, base: int, levels: int = 7) -> float:
  # Partial sums at n = base * 2**j extrapolated to 1/n = 0, one power of 1/n a level.
  row = [float(sums[base * 2**j]) for j in range(levels + 1)]
  for i in range(1, levels + 1):
    row = [b + (b - a) / (2**i - 1) for a, b in zip(row, row[1:])]
  return row[0]
