"""Tests for rlsvr.envs.self_judge.quadrature: definite values decided by work bounds."""
import math

import mpmath
import numpy as np
import pytest
import sympy

from rlsvr.envs.self_judge import integration, pieces, primitive, quadrature, tails
from rlsvr.envs.self_judge.integration import Problem

x = sympy.Symbol("x", real=True)
k = sympy.Symbol("k", integer=True)
pi = sympy.pi


def test_break_points_at_jumps_and_kinks():
  points = pieces.break_points(sympy.floor(sympy.sqrt(x)), x, mpmath.mpf(0), mpmath.mpf(50))
  assert [float(p) for p in points] == pytest.approx([1, 4, 9, 16, 25, 36, 49], abs=1e-12)
  points = pieces.break_points(sympy.Abs(x**2 - 2), x, mpmath.mpf(-3), mpmath.mpf(3))
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


def test_quadrature_that_cannot_be_believed_gives_no_value(pool):
  # Both used to come back with a small error estimate and a value of order 1e23 (H062, H079).
  # tanh-sinh refuses the first; the series over its oscillations (`tails`) now sums it.
  tail = sympy.cos(x**2 + 1 / x**2)
  assert quadrature.integral(tail, x, mpmath.mpf(0), mpmath.inf) is None
  noise = Problem(sympy.sin(2**200 * sympy.pi * x)**2 / sympy.sin(x)**2, x,
                  (sympy.Integer(0), sympy.pi))
  assert integration.definite_value(noise, pool=pool) is None
  tail = Problem(tail, x, (sympy.Integer(0), sympy.oo))
  assert tail.verify("sqrt(2*pi)/4*(cos(2) - sin(2))", pool=pool)
  assert not tail.verify("1.001*sqrt(2*pi)/4*(cos(2) - sin(2))", pool=pool)
  slow = Problem(1 / (x + x ** sympy.Rational(13, 10)), x, (sympy.Integer(1), sympy.oo))
  assert integration.definite_value(slow, pool=pool) is not None  # decays like x**-1.3


@pytest.mark.parametrize("integrand,bounds,value", [
    # Thousands of oscillations: tanh-sinh at a fixed degree cannot resolve them.
    (sympy.sin(sympy.sin(x) + 2025 * x), (0, 2 * pi), "0"),  # Integration Bee B070
    (sympy.cos(2022 * x) * sympy.sin(10050 * x) / sympy.sin(50 * x)
     * sympy.sin(10251 * x) / sympy.sin(51 * x), (0, 2 * pi), "6*pi"),  # H003
    # A removable singularity at both ends, where float64 loses digits to cancellation.
    ((2 * sympy.cos(x) - sympy.cos(2021 * x) - 2 * sympy.cos(2022 * x) - sympy.cos(2023 * x) + 2)
     / (1 - sympy.cos(2 * x)), (0, pi), "2022*pi"),  # H039
    # 2000 jumps, more than tanh-sinh's pieces can afford; floor(y) + floor(-y) = -1 gives -pi.
    (sympy.floor(500 * sympy.sin(x)), (0, 2 * pi), "-pi"),
    (sympy.Sum(k * sympy.cos(k**2 * x), (k, 1, 40)) * sympy.Sum(k * sympy.cos(k * x), (k, 1, 40)),
     (0, 2 * pi), "441*pi"),  # the pairs l = k**2 <= 40 give k * l = k**3: 1 + 8 + ... + 216
])
def test_fast_oscillations_and_many_jumps_on_float64_panels(pool, integrand, bounds, value):
  problem = Problem(integrand, x, tuple(sympy.sympify(b) for b in bounds))
  assert integration.definite_value(problem, pool=pool) is not None, integrand
  assert problem.verify(value, pool=pool), integrand
  assert not problem.verify(f"{value} + 1e-4", pool=pool)


def test_float64_panels_are_not_believed_where_float64_is_noise():
  # 2**200 pi x in float64 carries an error far above 2 pi: the sampled 60-digit check
  # refuses it at the first level.
  noisy = sympy.sin(2**200 * pi * x) ** 2
  points = [mpmath.mpf(0), mpmath.mpf(1)]
  fn = sympy.lambdify(x, noisy, "mpmath")
  assert quadrature._panels(noisy, x, points, fn, quadrature.tree_work(noisy)) is None
  smooth = sympy.sin(2**10 * x) ** 2
  value = quadrature._panels(smooth, x, points, sympy.lambdify(x, smooth, "mpmath"),
                             quadrature.tree_work(smooth))
  assert float(value.value.real) == pytest.approx(0.5 - mpmath.sin(2**11) / 2**12, rel=1e-12)


def test_tanh_sinh_is_not_tried_beyond_its_work_bound(monkeypatch):
  # A finite sum counts its body once per term; an infinite interval leaves only tanh-sinh.
  assert quadrature.tree_work(sympy.Sum(sympy.cos(k * x), (k, 1, 99))) == 1 + 99 * 4
  tried = []
  monkeypatch.setattr(quadrature, "_tanh_sinh", lambda fn, points: tried.append(points))
  heavy = sympy.exp(-x) * sympy.Sum(sympy.cos(k * x) / k**2, (k, 1, 5000))
  assert quadrature.integral(heavy, x, mpmath.mpf(0), mpmath.inf) is None
  assert not tried  # refused by its size, not after minutes of mpmath
  quadrature.integral(sympy.exp(-x) * sympy.cos(x), x, mpmath.mpf(0), mpmath.inf)
  assert tried


def test_infinite_products_on_float64_panels(pool):
  # prod cos(x / 2**k) = sin(x) / x, so the integrand is cos(x)**2025 sin(x): 0 over whole
  # periods. Integration Bee H078: 1284 periods of a peak of width 0.02 under an infinite
  # product, which only the panels (adding the product up over all nodes at once) resolve.
  product = sympy.Product(sympy.cos(x / 2**k), (k, 1, sympy.oo))
  problem = Problem(x * sympy.cos(x)**2025 * product, x, (sympy.Integer(0), 2568 * pi))
  assert integration.definite_value(problem, pool=pool) is not None
  assert problem.verify("0", pool=pool) and not problem.verify("1e-6", pool=pool)


def test_a_piece_that_is_never_subdivided_cannot_fake_convergence(pool):
  # Infinitely many jumps pile up at 0 (Integration Bee H024): the scan finds the first
  # ones, and a panel between 0 and the first jump used to stay whole at every level, so
  # three levels agreed on 0.74948 (the value is 3/4). x = 1/t moves them to infinity, where
  # they are summed as a series.
  u = sympy.floor((1 / x - 4) ** sympy.Rational(1, 4))
  problem = Problem(u**2 + u, x, (sympy.Integer(0), sympy.Rational(1, 4)))
  known = integration.definite_value(problem, pool=pool)
  assert known is not None and abs(complex(known.value) - 0.75) < 1e-12
  assert problem.verify("3/4", pool=pool)
  assert not problem.verify("0.74948177066191846", pool=pool)


# Closed forms to check by hand, none from the Integration Bee: each needs infinitely many
# cuts toward an end, where neither tanh-sinh nor finite panels reach.
@pytest.mark.parametrize("integrand,bounds,exact", [
    (sympy.sin(x) / x, (0, oo), mpmath.pi / 2),  # alternating terms ~ 1/k
    (sympy.sin(x**2), (0, oo), mpmath.sqrt(mpmath.pi / 8)),  # Fresnel: ~ k**-1/2, |f| not decaying
    (sympy.frac(x) / x**2, (1, oo), 1 - mpmath.euler),  # a jump at every integer
    (sympy.floor(x) / x**3, (1, oo), mpmath.zeta(2) / 2),  # units n (1/n**2 - 1/(n+1)**2) / 2
    ((-1)**sympy.floor(x) / x, (1, oo), mpmath.log(2 / mpmath.pi)),  # Wallis' product
    (sympy.cos(1 / x) / x, (0, 1), -mpmath.ci(1)),  # infinitely many oscillations at 0
])
def test_infinitely_many_jumps_or_oscillations_toward_an_end(pool, integrand, bounds, exact):
  problem = Problem(integrand, x, tuple(sympy.sympify(b) for b in bounds))
  known = integration.definite_value(problem, pool=pool)
  assert known is not None, integrand
  assert abs(known.value - exact) <= 1e-8 * abs(exact), (integrand, known)
  digits = mpmath.nstr(exact, 25)
  assert problem.verify(digits, pool=pool)
  for wrong in (f"1.001*({digits})", f"0.999*({digits})"):  # 1e-3 off: rejected
    assert not problem.verify(wrong, pool=pool), (integrand, wrong)


@pytest.mark.parametrize("integrand,bounds", [
    (sympy.sin(x), (0, oo)),  # bounded partial integrals, no limit (Abel would say 1)
    (sympy.sin(x) * sympy.sin(2 * x), (0, oo)),  # every period integrates to 0, yet no limit
    (sympy.frac(x) / x, (1, oo)),  # terms ~ 1/(2n): diverges like log
    (sympy.floor(x) / x**2, (1, oo)),  # the same with jumps of 1/x**2
    (x * sympy.sin(x), (0, oo)),
])
def test_divergent_tails_get_no_value(pool, integrand, bounds):
  problem = Problem(integrand, x, tuple(sympy.sympify(b) for b in bounds))
  assert integration.definite_value(problem, pool=pool) is None, integrand
  assert not any(problem.verify(v, pool=pool) for v in ("0", "1"))


def test_a_tail_is_summed_only_when_two_estimates_agree():
  # Euler's repeated averaging sums 1 - 1 + 1 - ... to 1/2 from any start and Romberg the
  # partial sums of 1/n at even n to a finite number: the decay and agreement tests refuse.
  n = np.arange(1, tails._TERMS + 1, dtype=float)
  assert tails._series((-1.0) ** n, np.ones(n.size)) is None
  assert tails._series(1 / n, 1 / n) is None
  assert tails._series(np.sin(n) / n**2, np.abs(np.sin(n)) / n**2) is None  # not in 1/n
  value, error, _ = tails._series(1 / n**2, 1 / n**2)
  assert abs(value - np.pi**2 / 6) < 1e-12 and error < 1e-12
  value, error, _ = tails._series((-1.0) ** (n + 1) / n, 1 / n)
  assert abs(value - np.log(2)) < 1e-14 and error < 1e-14


def test_an_integrand_that_is_the_derivative_of_its_polynomial_part():
  j = sympy.Symbol("j", integer=True)
  product = sympy.Product(x - k, (k, 1, 30))
  derivative = product * sympy.Sum(1 / (x - j), (j, 1, 30))
  value = primitive.integral(3 * derivative, x, mpmath.mpf(0), mpmath.mpf(31))
  assert value is not None
  assert abs(value.value - 3 * (math.factorial(30) - math.factorial(30))) <= value.tolerance
  value = primitive.integral(derivative, x, mpmath.mpf(1), mpmath.mpf(32))
  assert abs(value.value - math.factorial(31)) <= 1e-30 * math.factorial(31)
  # Not its derivative (twice the sum), not a polynomial part, or an infinite interval: no value.
  twice = product * sympy.Sum(2 / (x - j), (j, 1, 30))
  assert primitive.integral(twice, x, mpmath.mpf(1), mpmath.mpf(32)) is None
  assert primitive.integral(sympy.exp(x) * sympy.sin(x), x, mpmath.mpf(0), mpmath.mpf(1)) is None
  assert primitive.integral(derivative, x, mpmath.mpf(1), mpmath.inf) is None
  assert primitive.integral(x**2, x, mpmath.mpf(0), mpmath.mpf(1)) is None  # quadrature's job
