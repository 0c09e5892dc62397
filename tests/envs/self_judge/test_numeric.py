"""Tests for rlsvr.envs.self_judge.numeric and the problem-side rewrites of integration."""
import time

import mpmath
import pytest
import sympy

from rlsvr.envs.self_judge import integration, latex, numeric
from rlsvr.envs.self_judge.integration import Problem

x = sympy.Symbol("x", real=True)
k = sympy.Symbol("k", integer=True)


@pytest.mark.parametrize("expr", [
    sympy.sin(x) * sympy.exp(x) / (1 + x**2), sympy.log(x) * sympy.atan(x) ** 3,
    sympy.sqrt(x - 7) + sympy.Abs(x - 1) * sympy.sign(x - 2), sympy.erf(x) - sympy.Ei(x),
    sympy.floor(3 * x) + sympy.ceiling(x / 2) + sympy.gamma(x + 3), (-x) ** sympy.Rational(1, 3),
    sympy.asin(x / 3) + sympy.acosh(x + 5) + sympy.polygamma(1, x + 4),
])
def test_evaluate_matches_sympy(expr):
  for point in ("0.3", "1.7", "-2.4"):
    got = numeric.evaluate(expr, {x: mpmath.mpf(point)})
    want = complex(expr.subs(x, sympy.Float(point, 30)).evalf(30))
    assert abs(complex(got) - want) <= 1e-14 * max(1, abs(want)), (expr, point)


def test_evaluate_bounds_work_instead_of_computing_huge_numbers():
  start = time.monotonic()
  for expr in (sympy.sin(sympy.exp(sympy.exp(sympy.exp(x)))), sympy.gamma(sympy.exp(10 * x)),
               sympy.erf(sympy.I * sympy.exp(sympy.exp(x))), x ** (x ** x ** x),
               sympy.cos(sympy.I * sympy.exp(sympy.exp(x)))):
    assert numeric.evaluate(expr, {x: mpmath.mpf(5)}) is None, expr
  assert time.monotonic() - start < 5
  assert numeric.evaluate(sympy.exp(x), {x: 1000})  # large, not huge: computed
  deep = x
  for _ in range(50):
    deep = deep + sympy.sin(deep)  # a DAG: shared subtrees are computed once
  with pytest.raises(numeric.OperationLimit):
    numeric.evaluate(deep, {x: 1}, max_ops=20)
  with pytest.raises(numeric.NotNumeric):
    numeric.evaluate(sympy.Function("f")(x), {x: 1})


def test_sums_and_products():
  geometric = sympy.Sum(x**k, (k, 0, sympy.oo))
  assert numeric.evaluate(geometric, {x: mpmath.mpf("0.5")}) == pytest.approx(2)
  finite = sympy.Product(1 + 1 / k, (k, 1, 9))
  assert numeric.evaluate(finite, {}) == pytest.approx(10)
  with pytest.raises(numeric.OperationLimit):  # 1/k**2 never stops changing at 30 digits
    numeric.evaluate(sympy.Sum(1 / k**2, (k, 1, sympy.oo)), {})


def test_break_points_at_jumps_and_kinks():
  points = numeric.break_points(sympy.floor(sympy.sqrt(x)), x, mpmath.mpf(0), mpmath.mpf(50))
  assert [float(p) for p in points] == pytest.approx([1, 4, 9, 16, 25, 36, 49], abs=1e-12)
  points = numeric.break_points(sympy.Abs(x**2 - 2), x, mpmath.mpf(-3), mpmath.mpf(3))
  assert [float(p) for p in points] == pytest.approx([-2**0.5, 2**0.5], abs=1e-12)


oo = sympy.oo


@pytest.mark.parametrize("integrand,bounds,value", [
    (sympy.floor(sympy.sqrt(x)), (0, 2025), "59730"),  # Integration Bee H026
    (sympy.Abs(x**2 - 2), (-3, 3), "6 + 16*sqrt(2)/3"),
    (sympy.ceiling(x) * sympy.sin(sympy.pi * x)**2, (0, 10), "55/2"),
    (sympy.exp(-(x - 2024)**2 / 4), (-oo, oo), "2*sqrt(pi)"),  # B013: mass far from 0
    (4 * x**2 / sympy.sqrt(2026 - x**2), (0, sympy.sqrt(2026)), "2026*pi"),  # H071: bound
])
def test_definite_values_with_jumps_tails_and_singular_ends(pool, integrand, bounds, value):
  problem = Problem(integrand, x, tuple(sympy.sympify(b) for b in bounds))
  known = integration.definite_value(problem, pool=pool)
  assert known is not None, integrand
  assert problem.verify(value, pool=pool), (integrand, known)
  assert not problem.verify(f"1.0001*({value})", pool=pool)


def test_closed_forms_and_real_roots():
  series = latex.latex_to_sympy(r"\sum_{k=0}^{\infty}\sin\left(\frac{k\pi}{2}\right)x^k",
                                      x, trusted=True)
  closed = latex.closed_forms(series)
  assert not closed.has(sympy.Sum)
  assert sympy.simplify(closed - x / (1 + x**2)) == 0
  root = latex.latex_to_sympy(r"\sqrt[3]{x}", x)
  assert complex(root.subs(x, -8)) == pytest.approx(-2)  # the contest's real cube root
  assert latex.latex_to_sympy(r"\sqrt{x}", x) == sympy.sqrt(x)


def test_quadrature_that_cannot_be_believed_gives_no_value(pool):
  # Both used to come back with a small error estimate and a value of order 1e23 (H062, H079).
  tail = Problem(sympy.cos(x**2 + 1 / x**2), x, (sympy.Integer(0), sympy.oo))
  noise = Problem(sympy.sin(2**200 * sympy.pi * x)**2 / sympy.sin(x)**2, x,
                  (sympy.Integer(0), sympy.pi))
  assert integration.definite_value(tail, pool=pool) is None
  assert integration.definite_value(noise, pool=pool) is None
  assert not tail.verify("sqrt(2*pi)/4*(cos(2) - sin(2))", pool=pool)  # unknown, not "wrong"
  slow = Problem(1 / (x + x ** sympy.Rational(13, 10)), x, (sympy.Integer(1), sympy.oo))
  assert integration.definite_value(slow, pool=pool) is not None  # decays like x**-1.3
