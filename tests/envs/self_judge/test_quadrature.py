"""Tests for rlsvr.envs.self_judge.quadrature: definite values decided by work bounds."""
import mpmath
import pytest
import sympy

from rlsvr.envs.self_judge import integration, pieces, quadrature
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
  tail = Problem(sympy.cos(x**2 + 1 / x**2), x, (sympy.Integer(0), sympy.oo))
  noise = Problem(sympy.sin(2**200 * sympy.pi * x)**2 / sympy.sin(x)**2, x,
                  (sympy.Integer(0), sympy.pi))
  assert integration.definite_value(tail, pool=pool) is None
  assert integration.definite_value(noise, pool=pool) is None
  assert not tail.verify("sqrt(2*pi)/4*(cos(2) - sin(2))", pool=pool)  # unknown, not "wrong"
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
  assert quadrature._panels(noisy, x, points, fn, quadrature._work(noisy)) is None
  smooth = sympy.sin(2**10 * x) ** 2
  value = quadrature._panels(smooth, x, points, sympy.lambdify(x, smooth, "mpmath"),
                             quadrature._work(smooth))
  assert float(value.value.real) == pytest.approx(0.5 - mpmath.sin(2**11) / 2**12, rel=1e-12)


def test_tanh_sinh_is_not_tried_beyond_its_work_bound(monkeypatch):
  # A finite sum counts its body once per term; an infinite interval leaves only tanh-sinh.
  assert quadrature._work(sympy.Sum(sympy.cos(k * x), (k, 1, 99))) == 1 + 99 * 4
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
  # three levels agreed on 0.74948 (the value is 3/4).
  u = sympy.floor((1 / x - 4) ** sympy.Rational(1, 4))
  problem = Problem(u**2 + u, x, (sympy.Integer(0), sympy.Rational(1, 4)))
  known = integration.definite_value(problem, pool=pool)
  assert known is None or abs(complex(known.value) - 0.75) < 1e-6
  assert not problem.verify("0.74948177066191846", pool=pool)
