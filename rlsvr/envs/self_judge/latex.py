"""Contest LaTeX to SymPy, as the Integration Bee means it.

`latex_to_sympy` wraps latex2sympy2_extended: `\\log` is the natural log,
`\\sec x\\,(...)` closes the one-letter argument, odd roots of negative
numbers are real, and unknown symbols or functions are errors for untrusted
text (which must then pass `safe_math.check_tree`). `closed_forms` replaces
sums and products in a problem by SymPy's closed form where it finds one.
Run these inside a worker: parsing is not bounded.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import sympy
from sympy.core.function import AppliedUndef

from rlsvr.envs.self_judge import safe_math

MAX_LATEX_CHARS = 2000
# Functions latex2sympy2 leaves undefined (from \text{...} or unknown macros).
_NAMED_FUNCTIONS = {"sech": sympy.sech, "csch": sympy.csch, "arcsinh": sympy.asinh,
                    "arccosh": sympy.acosh, "arctanh": sympy.atanh, "zeta": sympy.zeta,
                    "arsinh": sympy.asinh, "arcosh": sympy.acosh, "artanh": sympy.atanh}


_TOKEN_RE = re.compile(r"\\[A-Za-z]+|[A-Za-z0-9]")  # one LaTeX command, letter or digit


_ONE_LETTER_ARGUMENT = re.compile(
    r"\\((?:arc)?(?:sin|cos|tan|sec|csc|cot)h?|ln|log|exp)\s+([A-Za-z])(?![A-Za-z^_'(])")


def _brace_argument(text: str, pos: int) -> tuple[str, int]:
  """The argument starting at `pos` in braces (a `{...}` group is kept as is)."""
  while pos < len(text) and text[pos] == " ":
    pos += 1
  if pos >= len(text) or text[pos] == "{":
    return "", pos
  match = _TOKEN_RE.match(text, pos)
  if not match:
    return "", pos
  return "{" + match.group(0) + "}", match.end()


def normalize_latex(text: str) -> str:
  """Rewrites contest LaTeX into what latex2sympy2_extended reads as intended."""
  text = text.strip().strip("$")
  text = re.sub(r"\\[tdc]frac", r"\\frac", text)
  text = re.sub(r"\\(?:[Bb]igg?)[lr]?(?![A-Za-z])", "", text)
  # "\sec x\,(1 + x)" is sec(x) (1 + x), not sec(x (1 + x)): a one-letter argument is closed.
  text = re.sub(_ONE_LETTER_ARGUMENT, r"\\\1(\2)", text)
  text = re.sub(r"\\(?:,|!|;|:|displaystyle(?![A-Za-z]))", " ", text)
  text = re.sub(r"\\log(?![A-Za-z_])", r"\\ln", text)  # natural log, as the contests mean
  text = re.sub(r"\\operatorname\{(sech|csch)\}", r"\\text{\1}", text)
  # \{u\} is the fractional part u - floor(u) (latex2sympy2 reads a set, drops the braces).
  text = re.sub(r"(?:\\left)?\\\{(.+?)(?:\\right)?\\\}", r"(\1 - \\lfloor \1 \\rfloor)", text)
  text = re.sub(r"(\\quad|\\ )\s*\(.*\)\s*$", "", text)  # trailing conditions like "(n>1)"
  text = re.sub(r"\s*\+\s*C\s*$", "", text)
  text = re.sub(r"\^([A-Za-z0-9])", r"^{\1}", text)
  # Single-token arguments without braces: \frac12, \sqrt3, \sqrt\pi, \frac1x.
  out, pos = [], 0
  for match in re.finditer(r"\\(frac|sqrt|binom)(?![A-Za-z])", text):
    if match.start() < pos:
      continue
    out.append(text[pos:match.end()])
    pos = match.end()
    if match.group(1) == "sqrt" and text[pos:pos + 1] == "[":
      close = text.find("]", pos)
      if close < 0:
        continue  # malformed: left for latex2sympy2 to reject
      out.append(text[pos:close + 1])
      pos = close + 1
    for _ in range(1 if match.group(1) == "sqrt" else 2):
      arg, new_pos = _brace_argument(text, pos)
      if not arg:
        break
      out.append(arg)
      pos = new_pos
  out.append(text[pos:])
  return "".join(out)


def latex_to_sympy(text: str, variable: sympy.Symbol, parameters: Sequence[sympy.Symbol] = (),
                   trusted: bool = False) -> Any:
  """LaTeX to SymPy via latex2sympy2_extended, with our symbols and the natural log.

  Free symbols become `variable` or the `parameters` by name (`e` is Euler's
  number, `i` the imaginary unit); anything else is an error unless
  `trusted`, when it becomes a new positive parameter. Untrusted results must
  pass `safe_math.check_tree`. Run this inside a worker: parsing is not bounded.
  """
  from latex2sympy2_extended import latex2sympy  # pylint: disable=g-import-not-at-top

  if len(text) > MAX_LATEX_CHARS:
    raise safe_math.UnsafeExpression(f"LaTeX longer than {MAX_LATEX_CHARS} characters")
  expr = _products_end_before_operators(latex2sympy(normalize_latex(text)))
  names = {variable.name: variable, **{p.name: p for p in parameters},
           "e": sympy.E, "i": sympy.I, "pi": sympy.pi}
  mapping = {}
  for symbol in expr.free_symbols:
    if symbol.name in names:
      mapping[symbol] = names[symbol.name]
    elif trusted and re.fullmatch(r"[A-Za-z]", symbol.name):
      mapping[symbol] = sympy.Symbol(symbol.name, positive=True)
    else:
      raise safe_math.UnsafeExpression(f"unknown symbol {symbol.name!r}")
  expr = expr.xreplace(mapping)
  for call in expr.atoms(AppliedUndef):
    name = re.sub(r"\\text\{(.*)\}|\\", r"\1", call.func.__name__)
    if name not in _NAMED_FUNCTIONS:
      raise safe_math.UnsafeExpression(f"unknown function {name!r}")
    expr = expr.xreplace({call: _NAMED_FUNCTIONS[name](*call.args)})
  # latex2sympy2 keeps log(a, b) unevaluated; log(a)/log(b) is what SymPy reasons about.
  expr = expr.replace(lambda n: isinstance(n, sympy.log) and len(n.args) == 2,
                      lambda n: sympy.log(n.args[0]) / sympy.log(n.args[1]))
  expr = real_odd_roots(expr)
  if not trusted:
    safe_math.check_tree(expr, [variable, *parameters])
  return expr


def _products_end_before_operators(expr: Any) -> Any:
  """`\\prod_k (x-k) \\sum_j ...` as the product times the sum, as contests write it (H091).

  latex2sympy2 reads everything after `\\prod` as its body. A sum, product or
  integral there that does not use the product's index is a factor of its
  own: inside the body it would be raised to the number of terms. (For an
  outer sum both readings agree, so only products are split.)
  """
  def outside(node):  # the body's factors that belong after the product
    if not isinstance(node, sympy.Product) or len(node.limits) != 1:
      return []
    k = node.limits[0][0]
    return [f for f in sympy.Mul.make_args(node.function) if k not in f.free_symbols
            and f.has(sympy.Sum, sympy.Product, sympy.Integral)]

  def split(node):
    after = outside(node)
    body = [f for f in sympy.Mul.make_args(node.function) if f not in after]
    return sympy.Product(sympy.Mul(*body), *node.limits) * sympy.Mul(*after)
  return expr.replace(lambda n: bool(outside(n)), split)


def real_odd_roots(expr: Any) -> Any:
  """`\\sqrt[3]{b}` and `b^{p/q}` (q odd) as real roots: sign(b)^p |b|^(p/q), as contests mean.

  SymPy's principal root of a negative number is complex (`(-8)**(1/3)` is
  1 + sqrt(3) i); a contest's cube root of -8 is -2.
  """
  def is_odd_root(node):
    return (node.is_Pow and node.exp.is_Rational and node.exp.q % 2 == 1 and node.exp.q > 1
            and node.base.is_nonnegative is not True)

  def real_root(node):
    magnitude = sympy.Abs(node.base) ** node.exp
    return sympy.sign(node.base) * magnitude if node.exp.p % 2 else magnitude
  return expr.replace(is_odd_root, real_root)


def closed_forms(expr: Any) -> Any:
  """Sums and products in `expr` replaced by SymPy's closed form where it finds one.

  A sum SymPy cannot close is retried term by term with sin/cos written as
  exponentials (`sin(k pi/2) x^k` is two geometric series). Where SymPy adds
  a convergence condition, the convergent branch is taken: a problem is posed
  where its series converges. Finite ones of more than `MAX_WRITTEN_TERMS`
  terms are kept: evaluation adds them up term by term.
  """
  for node in sorted(expr.atoms(sympy.Sum, sympy.Product), key=sympy.count_ops):
    if _many_numbered_terms(node):
      continue  # written out it is no simpler, only longer (and slow to build)
    done = _convergent(node.doit())
    if done.has(sympy.Sum, sympy.Product) and isinstance(node, sympy.Sum) and len(
        node.limits) == 1:
      k = node.limits[0][0]
      terms = sympy.expand(node.function.rewrite([sympy.sin, sympy.cos], sympy.exp))
      done = _convergent(sympy.Add(*[
          sympy.Sum(sympy.powsimp(_as_powers(t, k), combine="base", force=True),
                    *node.limits).doit() for t in sympy.Add.make_args(terms)]))
    if not done.has(sympy.Sum, sympy.Product):
      expr = expr.xreplace({node: done})
  return expr


MAX_WRITTEN_TERMS = 100


def _many_numbered_terms(node: Any) -> bool:
  return any(lo.is_Integer and hi.is_Integer and hi - lo >= MAX_WRITTEN_TERMS
             for _, lo, hi in node.limits)


def _as_powers(term: Any, k: sympy.Symbol) -> Any:
  """exp(c k) as exp(c)**k, so that x**k exp(i pi k/2) combines into (i x)**k."""
  def linear_in_k(node):
    return (isinstance(node, sympy.exp) and node.args[0].has(k)
            and not sympy.expand(node.args[0] / k).has(k))
  return term.replace(linear_in_k, lambda n: sympy.exp(sympy.expand(n.args[0] / k)) ** k)


def _convergent(expr: Any) -> Any:
  def convergent_branch(node):
    return next((e for e, _ in node.args if not e.has(sympy.Sum, sympy.Product)), node)
  return expr.replace(lambda n: isinstance(n, sympy.Piecewise), convergent_branch)
