"""Safe handling of untrusted math text: a whitelist parser and killable SymPy workers.

Model answers are hostile input (DESIGN.md, "Untrusted text"). This module
never passes them to `eval`, `exec` or `sympify`:

- `parse_expression` is a recursive-descent parser over a fixed grammar
  (numbers, whitelisted names, `+ - * / ** ^`, parentheses, calls of
  whitelisted functions) that builds SymPy objects with their constructors.
  Length, nesting depth, literal size and exponents are bounded *before* SymPy
  evaluates anything, so `9**9**9**9` is rejected instead of computed.
- `check_tree` applies the same whitelist to an expression another parser
  (latex2sympy2_extended) produced.

Every SymPy step on untrusted input also runs under a wall-clock limit in a
killable worker process (`rlsvr.workers`).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping, Sequence

import sympy


class UnsafeExpression(ValueError):
  """The text is not an expression of the whitelisted grammar, or exceeds a bound."""


@dataclasses.dataclass(frozen=True)
class Limits:
  """Bounds on untrusted expressions.

  Attributes:
    max_chars: longest accepted text.
    max_depth: deepest nesting of parentheses, unary signs and calls.
    max_nodes: most nodes in a checked SymPy tree (`check_tree`).
    max_int_digits: longest integer literal (decimal digits, before and after a point).
    max_exponent: largest |numerator| or denominator of a numeric exponent.
    max_power_bits: largest bit size of a number raised to a numeric power
      (bits of the base times the exponent), which SymPy would compute exactly.
  """

  max_chars: int = 2000
  max_depth: int = 64
  max_nodes: int = 5000
  max_int_digits: int = 60
  max_exponent: int = 10_000
  max_power_bits: int = 100_000


# Names a model may call; values are SymPy callables and their accepted arities.
_FUNCTIONS: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    **{n: (getattr(sympy, n), (1,)) for n in (
        "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc",
        "sinh", "cosh", "tanh", "coth", "sech", "csch", "asinh", "acosh", "atanh", "acoth",
        "asech", "acsch", "exp", "sqrt", "cbrt", "erf", "erfc", "erfi", "Ei", "Si", "Ci", "li")},
    **{"arc" + n: (getattr(sympy, "a" + n), (1,)) for n in (
        "sin", "cos", "tan", "cot", "sec", "csc", "sinh", "cosh", "tanh")},
    **{"ar" + n: (getattr(sympy, "a" + n), (1,)) for n in ("sinh", "cosh", "tanh")},
    "log": (sympy.log, (1, 2)),
    "ln": (sympy.log, (1,)),
    "Abs": (sympy.Abs, (1,)),
    "abs": (sympy.Abs, (1,)),
    "factorial": (sympy.factorial, (1,)),  # of an integer up to max_exponent: see _Parser.call
}
_CONSTANTS: dict[str, sympy.Expr] = {"pi": sympy.pi, "E": sympy.E, "e": sympy.E, "I": sympy.I}
# SymPy classes a checked tree may contain besides numbers, symbols and constants.
_TREE_FUNCS = tuple({f for f, _ in _FUNCTIONS.values() if isinstance(f, type)}) + (
    sympy.log, sympy.exp, sympy.Abs, sympy.sign, sympy.floor, sympy.ceiling, sympy.zeta,
    sympy.gamma)

_TOKEN_RE = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|([A-Za-z_][A-Za-z_0-9]*)|(\*\*|[-+*/^(),]))")


def _tokenize(text: str, limits: Limits) -> list[tuple[str, str]]:
  if len(text) > limits.max_chars:
    raise UnsafeExpression(f"expression longer than {limits.max_chars} characters")
  tokens, pos, end = [], 0, len(text.rstrip())
  while pos < end:
    match = _TOKEN_RE.match(text, pos)
    if not match:
      raise UnsafeExpression(f"illegal character {text[pos:pos + 1].strip()!r} at {pos}")
    number, name, op = match.groups()
    if number is not None:
      digits = number.replace(".", "")
      if len(digits) > limits.max_int_digits:
        raise UnsafeExpression(f"number literal longer than {limits.max_int_digits} digits")
      tokens.append(("num", number))
    elif name is not None:
      tokens.append(("name", name))
    else:
      tokens.append(("op", op))
    pos = match.end()
  return tokens


def checked_power(base: sympy.Expr, exponent: sympy.Expr, limits: Limits = Limits()) -> sympy.Expr:
  """`base ** exponent`, refused when SymPy would compute a huge exact number."""
  if exponent.is_Rational:
    p, q = int(exponent.p), int(exponent.q)
    if abs(p) > limits.max_exponent or q > limits.max_exponent:
      raise UnsafeExpression(f"exponent {exponent} exceeds {limits.max_exponent}")
    if base.is_Rational:
      bits = max(int(base.p).bit_length(), int(base.q).bit_length())
      if bits * abs(p) > limits.max_power_bits:
        raise UnsafeExpression("power too large to compute exactly")
  elif exponent.is_Number:  # floats, infinities and nan are not part of the grammar
    raise UnsafeExpression(f"unsupported exponent {exponent}")
  return sympy.Pow(base, exponent)


class _Parser:
  """Recursive descent over the token list; Python's precedence (`-x**2 == -(x**2)`)."""

  def __init__(self, tokens, names: Mapping[str, sympy.Expr], limits: Limits):
    self.tokens, self.names, self.limits = tokens, names, limits
    self.pos, self.depth = 0, 0

  def peek(self) -> tuple[str, str] | None:
    return self.tokens[self.pos] if self.pos < len(self.tokens) else None

  def take(self, value: str | None = None) -> tuple[str, str]:
    token = self.peek()
    if token is None or (value is not None and token[1] != value):
      raise UnsafeExpression(f"expected {value or 'more input'}, got {token and token[1]!r}")
    self.pos += 1
    return token

  def nested(self, fn):
    self.depth += 1
    if self.depth > self.limits.max_depth:
      raise UnsafeExpression(f"nesting deeper than {self.limits.max_depth}")
    try:
      return fn()
    finally:
      self.depth -= 1

  def expression(self) -> sympy.Expr:
    value = self.term()
    while self.peek() in (("op", "+"), ("op", "-")):
      op = self.take()[1]
      right = self.term()
      value = sympy.Add(value, right if op == "+" else -right)
    return value

  def term(self) -> sympy.Expr:
    value = self.unary()
    while self.peek() in (("op", "*"), ("op", "/")):
      op = self.take()[1]
      right = self.unary()
      value = sympy.Mul(value, right) if op == "*" else sympy.Mul(value, checked_power(
          right, sympy.Integer(-1), self.limits))
    return value

  def unary(self) -> sympy.Expr:
    if self.peek() in (("op", "+"), ("op", "-")):
      sign = self.take()[1]
      operand = self.nested(self.unary)
      return -operand if sign == "-" else operand
    return self.power()

  def power(self) -> sympy.Expr:
    base = self.atom()
    if self.peek() in (("op", "**"), ("op", "^")):
      self.take()
      exponent = self.nested(self.unary)  # right-associative: 2**3**2 == 2**9
      return checked_power(base, exponent, self.limits)
    return base

  def atom(self) -> sympy.Expr:
    kind, value = self.take()
    if kind == "num":
      return sympy.Rational(value) if "." in value else sympy.Integer(value)
    if kind == "op" and value == "(":
      inner = self.nested(self.expression)
      self.take(")")
      return inner
    if kind == "name":
      if self.peek() == ("op", "("):
        return self.call(value)
      if value in self.names:
        return self.names[value]
      if value in _CONSTANTS:
        return _CONSTANTS[value]
      raise UnsafeExpression(f"unknown name {value!r}")
    raise UnsafeExpression(f"unexpected {value!r}")

  def call(self, name: str) -> sympy.Expr:
    if name not in _FUNCTIONS:
      raise UnsafeExpression(f"unknown function {name!r}")
    fn, arities = _FUNCTIONS[name]
    self.take("(")
    args = [self.nested(self.expression)]
    while self.peek() == ("op", ","):
      self.take()
      args.append(self.nested(self.expression))
    self.take(")")
    if len(args) not in arities:
      raise UnsafeExpression(f"{name} takes {arities} arguments, got {len(args)}")
    if fn is sympy.factorial and not (args[0].is_Integer
                                      and 0 <= args[0] <= self.limits.max_exponent):
      raise UnsafeExpression("factorial of a large or non-integer argument")  # SymPy computes it
    return fn(*args)


def parse_expression(
    text: str,
    names: Mapping[str, sympy.Expr] | Sequence[str] = (),
    limits: Limits = Limits(),
) -> sympy.Expr:
  """Parses SymPy-syntax math text (`^` also means power) into a SymPy expression.

  Args:
    text: untrusted text, e.g. "x**2/2 + log(x) + C".
    names: the names the text may use besides the whitelisted functions and
      constants (pi, E, e, I): a mapping to what each stands for, or names
      that become plain real symbols.
    limits: size, depth and exponent bounds.

  Raises:
    UnsafeExpression: anything outside the grammar or the bounds.
  """
  if not isinstance(names, Mapping):
    names = {n: sympy.Symbol(n, real=True) for n in names}
  parser = _Parser(_tokenize(text, limits), names, limits)
  if not parser.tokens:
    raise UnsafeExpression("empty expression")
  expr = parser.expression()
  if parser.peek() is not None:
    raise UnsafeExpression(f"unexpected {parser.peek()[1]!r} at token {parser.pos}")
  return expr


def check_tree(expr: Any, symbols: Sequence[sympy.Symbol], limits: Limits = Limits()) -> sympy.Expr:
  """Returns `expr` if it only holds whitelisted nodes within `limits`, else raises.

  For expressions built by other parsers (LaTeX): numbers of bounded size,
  the given symbols, pi/E/I, + * ** and the whitelisted functions.
  """
  if not isinstance(expr, sympy.Expr):
    raise UnsafeExpression(f"not an expression: {type(expr).__name__}")
  allowed = set(symbols)
  count = 0
  stack = [(expr, 0)]
  while stack:
    node, depth = stack.pop()
    count += 1
    if count > limits.max_nodes or depth > limits.max_depth:
      raise UnsafeExpression("expression tree too large or too deep")
    if node.is_Rational:
      if max(int(node.p).bit_length(), int(node.q).bit_length()) > limits.max_power_bits:
        raise UnsafeExpression("number too large")
    elif node.is_Float or node in (sympy.pi, sympy.E, sympy.I):
      pass
    elif node.is_Symbol:
      if node not in allowed:
        raise UnsafeExpression(f"unknown symbol {node}")
    elif node.is_Pow:
      if node.exp.is_Rational and (abs(node.exp.p) > limits.max_exponent
                                   or node.exp.q > limits.max_exponent):
        raise UnsafeExpression(f"exponent {node.exp} exceeds {limits.max_exponent}")
    elif isinstance(node, sympy.factorial):
      if not (node.args[0].is_Integer and 0 <= node.args[0] <= limits.max_exponent):
        raise UnsafeExpression("factorial of a large or non-integer argument")
    elif not (node.is_Add or node.is_Mul or isinstance(node, _TREE_FUNCS)):
      raise UnsafeExpression(f"node {type(node).__name__} is not allowed")
    stack.extend((arg, depth + 1) for arg in node.args)
  return expr
