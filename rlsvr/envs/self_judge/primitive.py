"""Definite integrals of an integrand that is the derivative of its polynomial part.

Contest integrands such as prod_k (x - k) * sum_j 1/(x - j) (H091) are the
derivative of a factor of their own (here by the logarithmic derivative),
with values near 10^5821 that no float quadrature reaches. `integral` takes
F, the product of the integrand's factors that are polynomials in x (a
product of polynomials with integer limits counts) times its constant
factors; when F' matches the integrand at fixed points, the integral over a
finite interval is F(b) - F(a), exact because a polynomial has no
singularity on the way. Deterministic: fixed points, precision and
operation counts, as in `numeric`.
"""
from __future__ import annotations

from typing import Any

import mpmath
import sympy

from rlsvr.envs.self_judge import numeric, quadrature

_FRACTIONS = (0.1234, 0.2718, 0.3927, 0.5772, 0.7071, 0.8660)  # where F' and f are compared
_MIN_POINTS = 4  # of them where both are computable
_REL_TOL = 1e-15  # the central difference is good to ~1e-35 of F' here
_DPS = 60


def integral(integrand: sympy.Expr, x: sympy.Symbol, lower: Any, upper: Any
             ) -> quadrature.IntegralValue | None:
  """F(upper) - F(lower) when the integrand is F' for its polynomial part F; else None."""
  if not (mpmath.isfinite(lower) and mpmath.isfinite(upper)):
    return None
  primitive = _polynomial_part(integrand, x)
  if primitive is None:
    return None
  matched = 0
  for fraction in _FRACTIONS:
    point = mpmath.mpf(lower) + fraction * (mpmath.mpf(upper) - lower)
    try:
      target = numeric.evaluate(integrand, {x: point}, dps=_DPS)
    except (ArithmeticError, ValueError):
      continue
    got = numeric.derivative(primitive, x, point, dps=_DPS)
    if target is None or got is None:
      continue
    if abs(got - target) > _REL_TOL * max(abs(got), abs(target)):
      return None
    matched += 1
  if matched < _MIN_POINTS:
    return None
  try:
    ends = [numeric.evaluate(primitive, {x: b}, dps=_DPS) for b in (upper, lower)]
  except (ArithmeticError, ValueError):
    return None
  if None in ends:
    return None
  with mpmath.workdps(_DPS):
    value = ends[0] - ends[1]
    size = max(abs(e) for e in ends)
    return quadrature.IntegralValue(mpmath.mpc(value), size * mpmath.mpf(10) ** -40, abs(value))


def _polynomial_part(integrand: sympy.Expr, x: sympy.Symbol) -> sympy.Expr | None:
  factors = [f for f in sympy.Mul.make_args(integrand) if _polynomial(f, x)]
  if not any(f.has(x) for f in factors) or len(factors) == len(sympy.Mul.make_args(integrand)):
    return None  # nothing to differentiate, or the integrand is itself a polynomial
  return sympy.Mul(*factors)


def _polynomial(factor: sympy.Expr, x: sympy.Symbol) -> bool:
  if isinstance(factor, sympy.Product):
    return (len(factor.limits) == 1 and all(b.is_Integer for b in factor.limits[0][1:])
            and factor.function.is_polynomial(x))
  if factor.is_Pow and isinstance(factor.base, sympy.Product):
    return factor.exp.is_Integer and factor.exp > 0 and _polynomial(factor.base, x)
  return not factor.has(sympy.Sum, sympy.Product, sympy.Integral) and factor.is_polynomial(x)
