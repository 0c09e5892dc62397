"""Tests for rlsvr.envs.self_judge.numeric and the problem-side rewrites of integration (latex)."""
import time

import mpmath
import pytest
import sympy

from rlsvr.envs.self_judge import latex, numeric

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


def test_closed_forms_and_real_roots():
  series = latex.latex_to_sympy(r"\sum_{k=0}^{\infty}\sin\left(\frac{k\pi}{2}\right)x^k",
                                      x, trusted=True)
  closed = latex.closed_forms(series)
  assert not closed.has(sympy.Sum)
  assert sympy.simplify(closed - x / (1 + x**2)) == 0
  root = latex.latex_to_sympy(r"\sqrt[3]{x}", x)
  assert complex(root.subs(x, -8)) == pytest.approx(-2)  # the contest's real cube root
  assert latex.latex_to_sympy(r"\sqrt{x}", x) == sympy.sqrt(x)
