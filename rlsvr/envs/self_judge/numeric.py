"""Values of SymPy trees for the integration verifier, bounded by operation counts.

The verifier must decide the same on an idle and on a loaded machine, and
on every process of a multi-host run, so its work is bounded by sizes and
operation counts:

- `evaluate` computes a SymPy tree at one point in fixed-precision mpmath
  (`DPS` digits), one operation per node, at most `max_ops` operations.
  Values beyond 2**`MAX_BITS` in magnitude are "not finite" (None) instead
  of being computed, so no number or argument reduction grows without bound:
  `sin(exp(exp(exp(x))))` costs what `sin(x)` does. Arguments of functions that
  grow like an exponential (exp, gamma, erf of complex values...) are checked
  before the call.

No wall clock appears here; the worker pool's time limit is a last safety net
whose hits are counted (`verifier/timeouts`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import mpmath
import sympy

DPS = 30
MAX_BITS = 1 << 15  # |value| < 2**32768 (about 1e9864)
_LN_MAX = MAX_BITS * 0.69  # exp(z) stays below 2**MAX_BITS when re(z) < this
DEFAULT_MAX_OPS = 200_000


class NotNumeric(ValueError):
  """The tree holds something this evaluator does not compute (a symbol, an unevaluated sum)."""


class OperationLimit(ValueError):
  """More than `max_ops` node evaluations: a deterministic "too large"."""


def _finite(z: Any) -> Any:
  if z is None or not (mpmath.isfinite(z.real) and mpmath.isfinite(z.imag)):
    return None
  magnitude = max(abs(z.real), abs(z.imag))
  if magnitude and mpmath.mag(magnitude) > MAX_BITS:
    return None
  return z


def _real(z: Any) -> Any:
  if z.imag != 0:
    raise NotNumeric("a real-only function of a complex value")
  return z.real


def _bounded(fn: Callable[[Any], Any], limit: float, part: str = "abs") -> Callable[[Any], Any]:
  """`fn`, returning None (too large) when |z| (or |re z|, |im z|) exceeds `limit`."""
  def call(z):
    size = {"abs": abs(z), "re": z.real, "im": abs(z.imag)}[part]
    return None if size > limit else fn(z)
  return call


def _sign(z):
  return mpmath.mpc(0) if z == 0 else z / abs(z)


def _delta(z):
  if z == 0:
    raise NotNumeric("DiracDelta at its singular point")
  return mpmath.mpc(0)


def _exp(z):
  return None if z.real > _LN_MAX else mpmath.exp(z)


def _trig(fn):  # sin, cos... of a complex value grow like exp(|im z|)
  return _bounded(fn, _LN_MAX, "im")


_FUNCTIONS: dict[type, Callable[..., Any]] = {
    sympy.sin: _trig(mpmath.sin), sympy.cos: _trig(mpmath.cos), sympy.tan: _trig(mpmath.tan),
    sympy.cot: _trig(mpmath.cot), sympy.sec: _trig(mpmath.sec), sympy.csc: _trig(mpmath.csc),
    sympy.asin: mpmath.asin, sympy.acos: mpmath.acos, sympy.atan: mpmath.atan,
    sympy.acot: mpmath.acot, sympy.asec: mpmath.asec, sympy.acsc: mpmath.acsc,
    sympy.sinh: _bounded(mpmath.sinh, _LN_MAX), sympy.cosh: _bounded(mpmath.cosh, _LN_MAX),
    sympy.tanh: _bounded(mpmath.tanh, _LN_MAX), sympy.coth: _bounded(mpmath.coth, _LN_MAX),
    sympy.sech: _bounded(mpmath.sech, _LN_MAX), sympy.csch: _bounded(mpmath.csch, _LN_MAX),
    sympy.asinh: mpmath.asinh, sympy.acosh: mpmath.acosh, sympy.atanh: mpmath.atanh,
    sympy.acoth: mpmath.acoth, sympy.asech: mpmath.asech, sympy.acsch: mpmath.acsch,
    sympy.exp: _exp, sympy.log: lambda z: None if z == 0 else mpmath.log(z),
    sympy.Abs: lambda z: mpmath.mpc(abs(z)), sympy.sign: _sign,
    sympy.floor: lambda z: mpmath.mpc(mpmath.floor(_real(z))),
    sympy.ceiling: lambda z: mpmath.mpc(mpmath.ceil(_real(z))),
    sympy.frac: lambda z: mpmath.mpc(mpmath.frac(_real(z))),
    sympy.re: lambda z: mpmath.mpc(z.real), sympy.im: lambda z: mpmath.mpc(z.imag),
    sympy.erf: _bounded(mpmath.erf, 140), sympy.erfc: _bounded(mpmath.erfc, 140),
    sympy.erfi: _bounded(mpmath.erfi, 140), sympy.Ei: _bounded(mpmath.ei, _LN_MAX),
    sympy.Si: _bounded(mpmath.si, _LN_MAX), sympy.Ci: _bounded(mpmath.ci, _LN_MAX),
    sympy.li: _bounded(mpmath.li, 1e300), sympy.zeta: _bounded(mpmath.zeta, 1e6),
    sympy.gamma: _bounded(mpmath.gamma, 2500), sympy.loggamma: _bounded(mpmath.loggamma, 1e300),
    sympy.factorial: _bounded(mpmath.factorial, 2500),
    sympy.DiracDelta: _delta, sympy.Heaviside: lambda z: mpmath.mpc(
        1 if _real(z) > 0 else 0 if z.real < 0 else mpmath.mpf(1) / 2),
    sympy.polygamma: lambda n, z: None if abs(z) > 1e300 else mpmath.psi(int(_real(n)), z),
    sympy.Max: lambda *zs: mpmath.mpc(max(_real(z) for z in zs)),
    sympy.Min: lambda *zs: mpmath.mpc(min(_real(z) for z in zs)),
}
_CONSTANTS = {sympy.pi: mpmath.pi, sympy.E: mpmath.e, sympy.I: mpmath.j,
              sympy.EulerGamma: mpmath.euler, sympy.Catalan: mpmath.catalan,
              sympy.GoldenRatio: mpmath.phi}


def _power(base, exponent):
  if base == 0:
    return None if exponent.real <= 0 else mpmath.mpc(0)
  if (exponent * mpmath.log(base)).real > _LN_MAX:
    return None
  if exponent.imag == 0 and exponent.real == int(exponent.real):
    return mpmath.power(base, int(exponent.real))  # exact sign for integer powers
  return mpmath.power(base, exponent)


@dataclasses.dataclass
class _Budget:
  left: int

  def spend(self) -> None:
    self.left -= 1
    if self.left < 0:
      raise OperationLimit("evaluation needs more operations than allowed")


def evaluate(expr: sympy.Expr, values: Mapping[sympy.Symbol, Any], *,
             max_ops: int = DEFAULT_MAX_OPS, dps: int = DPS) -> Any:
  """`expr` at `values` as an mpmath complex, or None where it is not finite.

  Raises NotNumeric for nodes it cannot compute and OperationLimit past
  `max_ops` nodes (shared subtrees are computed once). Sums and products
  (problem data only: answers cannot hold them) are added up term by term
  within the same budget; an infinite one stops once `TAIL_TERMS` terms in a
  row change nothing at `dps` digits.
  """
  with mpmath.workdps(dps):
    return _evaluate(expr, {s: mpmath.mpc(v) for s, v in values.items()}, _Budget(max_ops))


def _evaluate(expr: sympy.Expr, env: Mapping[sympy.Symbol, Any], budget: _Budget) -> Any:
  memo: dict[sympy.Basic, Any] = {}
  # Iterative post-order: trees can be deeper than Python's recursion limit.
  stack = [(expr, False)]
  while stack:
    node, ready = stack.pop()
    if node in memo:
      continue
    if isinstance(node, (sympy.Sum, sympy.Product)):
      memo[node] = _finite(_series(node, env, budget))
      continue
    if not ready and node.args and not node.is_Number:
      stack.append((node, True))
      stack.extend((arg, False) for arg in node.args if arg not in memo)
      continue
    budget.spend()
    memo[node] = _finite(_node_value(node, env, memo))
  return memo[expr]


def derivative(expr: sympy.Expr, x: sympy.Symbol, point: Any, *, dps: int = 60,
               step: Any = None) -> Any:
  """d`expr`/d`x` at `point`: a central difference at `dps` digits, or None where not computable.

  The step (default 1e-20) leaves an error near step**2 for a smooth `expr`, with no
  symbolic derivative, whose size and unevaluated parts depend on how SymPy
  rewrites `expr`.
  """
  with mpmath.workdps(dps):
    step = mpmath.mpf(10) ** -20 if step is None else mpmath.mpf(step)
    try:
      ends = [evaluate(expr, {x: point + d}, dps=dps) for d in (step, -step)]
    except (ArithmeticError, ValueError):  # NotNumeric and OperationLimit among them
      return None
    return None if None in ends else (ends[0] - ends[1]) / (2 * step)


TAIL_TERMS = 8
MAX_TERMS = 20_000


def _series(node: Any, env: Mapping[sympy.Symbol, Any], budget: _Budget) -> Any:
  if len(node.limits) != 1:
    raise NotNumeric("a multiple sum or product")
  k, low, high = node.limits[0]
  low = _evaluate(low, env, budget)
  high = mpmath.inf if high == sympy.oo else _evaluate(high, env, budget)
  if low is None or high is None or low.imag or high.imag or low.real != int(low.real):
    raise NotNumeric("sum or product limits that are not integers")
  is_sum = isinstance(node, sympy.Sum)
  total, quiet = mpmath.mpc(0 if is_sum else 1), 0
  n = int(low.real)
  while n <= high.real:
    if n - int(low.real) >= MAX_TERMS:
      raise OperationLimit(f"more than {MAX_TERMS} terms")
    term = _evaluate(node.function, {**env, k: mpmath.mpc(n)}, budget)
    if term is None:
      return None
    new = total + term if is_sum else total * term
    quiet = quiet + 1 if new == total else 0
    total, n = new, n + 1
    if quiet >= TAIL_TERMS and high.real == mpmath.inf:
      break
  return total


def _node_value(node: sympy.Basic, env: Mapping[sympy.Symbol, Any], memo) -> Any:
  if node.is_Integer:
    return mpmath.mpc(int(node))
  if node.is_Rational:
    return mpmath.mpc(mpmath.mpf(int(node.p)) / int(node.q))
  if node.is_Float:
    return mpmath.mpc(mpmath.mpf(node._mpf_))  # pylint: disable=protected-access
  if node in _CONSTANTS:
    return mpmath.mpc(+_CONSTANTS[node])
  if node.is_Symbol:
    if node not in env:
      raise NotNumeric(f"no value for {node}")
    return env[node]
  args = [memo[a] for a in node.args]
  if any(a is None for a in args):
    return None  # a sub-expression is not finite: neither is this (no limits are taken)
  if node.is_Add:
    return mpmath.fsum(args)
  if node.is_Mul:
    return mpmath.fprod(args)
  if node.is_Pow:
    return _power(*args)
  fn = _FUNCTIONS.get(node.func)
  if fn is None:
    raise NotNumeric(f"cannot evaluate {node.func.__name__}")
  if node.func is sympy.log and len(args) == 2:
    return None if args[0] == 0 else mpmath.log(args[0]) / mpmath.log(args[1])
  return fn(*args)
