"""Tests for rlsvr.envs.self_judge.safe_math: the whitelist parser and the tree check."""
import re
import time

import pytest
import sympy

from rlsvr.envs.self_judge.safe_math import Limits, UnsafeExpression, check_tree, parse_expression

from .conftest import assert_payload_is_live

x = sympy.Symbol("x", real=True)
NAMES = {"x": x, "C": sympy.Integer(0)}


@pytest.mark.parametrize("text,expected", [
    ("x**2/2 + C", x**2 / 2),
    ("x^2/2", x**2 / 2),
    ("-x**2", -(x**2)),
    ("2**3**2", sympy.Integer(512)),
    ("2**-1", sympy.Rational(1, 2)),
    ("0.25*x", x / 4),
    ("5.", sympy.Integer(5)),
    ("sin(x)**2 + cos(x)**2", sympy.sin(x)**2 + sympy.cos(x)**2),
    ("log(x) + ln(x)", 2 * sympy.log(x)),
    ("log(x, 2)", sympy.log(x) / sympy.log(2)),
    ("arctan(x) - atan(x)", sympy.Integer(0)),
    ("exp(x)*e**x*E", sympy.E * sympy.exp(2 * x)),
    ("sqrt(pi)/2", sympy.sqrt(sympy.pi) / 2),
    ("abs(x) - Abs(x)", sympy.Integer(0)),
    ("asinh(x) + arsinh(x)", 2 * sympy.asinh(x)),
    (" ( ( x ) ) \n", x),
    ("I*I", sympy.Integer(-1)),
    ("1/0", sympy.zoo),
    ("factorial(5)/factorial(0)", sympy.Integer(120)),
])
def test_parses(text, expected):
  assert parse_expression(text, NAMES) == expected


@pytest.mark.parametrize("text,message", [
    ("", "empty"),
    ("x +", "expected more input"),
    ("(x", "expected )"),
    ("x)", "unexpected ')'"),
    ("x y", "unexpected 'y'"),
    ("y + 1", "unknown name 'y'"),
    ("foo(x)", "unknown function 'foo'"),
    ("sin(x, x)", "takes (1,) arguments"),
    ("x.real", "illegal character '.'"),
    ("x[0]", "illegal character '['"),
    ("'x'", "illegal character"),
    ("lambda: 1", "illegal character ':'"),
    ("sympify(x)", "unknown function 'sympify'"),
    ("__import__('os')", "illegal character"),
    ("x if x else x", "unexpected 'if'"),
    ("1e5", "unexpected 'e5'"),
    ("9**9**9**9", "exponent 387420489 exceeds"),
    ("2**(10**5)", "exceeds"),
    ("2**-100001", "exceeds"),
    ("x**100001", "exceeds"),
    ("(10**50)**5000", "power too large"),
    ("1" * 61, "longer than 60 digits"),
    ("(" * 65 + "x" + ")" * 65, "nesting deeper"),
    ("-" * 65 + "x", "nesting deeper"),
    ("sin(" * 65 + "x" + ")" * 65, "nesting deeper"),
    ("x+" * 50_000 + "x", "longer than 2000"),
    ("factorial(x)", "non-integer argument"),
    ("factorial(1/2)", "non-integer argument"),
    ("factorial(10**6)", "large or non-integer"),
    ("factorial(-1)", "large or non-integer"),
])
def test_rejects(text, message):
  with pytest.raises(UnsafeExpression, match=re.escape(message)):
    parse_expression(text, NAMES)


def test_plain_names_become_real_symbols():
  expr = parse_expression("a*t", ["a", "t"])
  assert {s.name for s in expr.free_symbols} == {"a", "t"}
  assert all(s.is_real for s in expr.free_symbols)


def test_limits_are_configurable():
  with pytest.raises(UnsafeExpression):
    parse_expression("x**20", NAMES, Limits(max_exponent=10))
  assert parse_expression("x**20", NAMES) == x**20


def test_pathological_inputs_are_rejected_fast():
  start = time.monotonic()
  for text in ["9**9**9**9", "(" * 100_000 + "x" + ")" * 100_000, "x" * 100_000,
               "2**2**2**2**2**2", "-" * 100_000 + "1", "((" * 30 + "x" + "))" * 30 + "**99999**9"]:
    with pytest.raises(UnsafeExpression):
      parse_expression(text, NAMES)
  assert time.monotonic() - start < 1.0


def test_injection_payload_does_not_run(tmp_path):
  template = "__import__('os').system('touch {marker}')"
  assert_payload_is_live(template, tmp_path / "control")
  marker = tmp_path / "pwned"
  with pytest.raises(UnsafeExpression):
    parse_expression(template.format(marker=marker), NAMES)
  assert not marker.exists()


def test_check_tree():
  y = sympy.Symbol("y")
  ok = sympy.sin(x)**2 + sympy.log(x) / 3 + sympy.pi * sympy.I + sympy.factorial(10)
  assert check_tree(ok, [x]) is ok
  for bad in [x + y, sympy.Integral(x, x), sympy.Function("f")(x), x**100_001,
              sympy.factorial(x), sympy.Integer(2)**200_000 + x]:
    with pytest.raises(UnsafeExpression):
      check_tree(bad, [x])
  with pytest.raises(UnsafeExpression):
    check_tree("x", [x])
  deep = x
  for _ in range(100):
    deep = sympy.sin(deep)
  with pytest.raises(UnsafeExpression, match="too large or too deep"):
    check_tree(deep, [x])
