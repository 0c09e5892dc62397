"""Tests for rlsvr.envs.self_judge.integration: LaTeX problems and the formal verifier."""
import json
import os
import subprocess
import sys
import time

import pytest
import sympy

from rlsvr.envs.self_judge import integration
from rlsvr.envs.self_judge.integration import Problem, check_answers
from rlsvr.envs.self_judge.latex import latex_to_sympy, normalize_latex

from .conftest import assert_payload_is_live, shared_path

x = sympy.Symbol("x", real=True)


def _verify_all(pool, problem, answers, fmt="sympy"):
  return [v.correct for v in check_answers([problem] * len(answers), answers, fmt, pool=pool)]


@pytest.mark.parametrize("integrand,right,wrong", [
    ("2*x", ["x**2", "x**2 + C", "x^2 - 3", "(x**2 + 7)", "x*x"],
     ["2*x**2", "x**2/2", "x**3", "2*x", "x**2 + x"]),
    ("1/x", ["log(x)", "log(abs(x)) + C", "ln(3*x)", "log(x**2)/2"],
     ["log(x)**2", "2*log(x)", "1/x**2", "exp(x)"]),
    ("sin(x)*cos(x)", ["sin(x)**2/2", "-cos(x)**2/2", "-cos(2*x)/4 + 1"],
     ["sin(x)**2", "cos(x)**2/2", "sin(2*x)/4"]),
    ("1/(1 + x**2)", ["atan(x)", "arctan(x) + pi", "-acot(x)"], ["atan(2*x)", "2*atan(x)"]),
    ("x*exp(x)", ["(x - 1)*exp(x)", "x*exp(x) - exp(x) + C"], ["x*exp(x)", "exp(x)*x**2/2"]),
])
def test_indefinite(pool, integrand, right, wrong):
  problem = Problem.from_sympy(integrand)
  assert _verify_all(pool, problem, right) == [True] * len(right)
  assert _verify_all(pool, problem, wrong) == [False] * len(wrong)


@pytest.mark.parametrize("integrand,bounds,right,wrong", [
    ("x**2", ("0", "1"), ["1/3", "0.333333333333333333", "2/6"], ["0.33", "1/2", "x/3"]),
    ("sin(x)", ("0", "pi"), ["2", "2 + 0*pi"], ["-2", "pi"]),
    ("exp(-x**2)", ("0", "oo"), ["sqrt(pi)/2"], ["sqrt(pi)", "pi/2"]),
])
def test_definite_by_value(pool, integrand, bounds, right, wrong):
  names = {"oo": sympy.oo, "pi": sympy.pi}
  problem = Problem(*(lambda p: (p.integrand, p.variable))(Problem.from_sympy(integrand)),
                    bounds=tuple(names.get(b, sympy.Integer(b) if b.isdigit() else None)
                                 for b in bounds))
  assert problem.definite
  assert _verify_all(pool, problem, right) == [True] * len(right)
  assert _verify_all(pool, problem, wrong) == [False] * len(wrong)
  assert integration.definite_value(problem, pool=pool) is not None


def test_verify_method_and_latex_answers(pool):
  problem = Problem.from_latex(r"\int \frac{dx}{x\log x + 2x}", pool=pool)
  assert problem.variable == x and problem.bounds is None
  assert problem.integrand == 1 / (x * sympy.log(x) + 2 * x)  # \log is the natural log
  assert problem.verify("log(log(x) + 2)", pool=pool)
  assert problem.verify(r"\ln(\ln x + 2) + C", fmt="latex", pool=pool)
  assert problem.verify(r"\log\big(\log x + 2\big)", fmt="latex", pool=pool)
  assert not problem.verify(r"\log_{10}(\log x + 2)", fmt="latex", pool=pool)
  assert not problem.verify("2*log(log(x) + 2)", pool=pool)
  with pytest.raises(ValueError, match="unknown answer format"):
    integration.parse_answer(problem, "x", "mathml")


def test_from_latex_variants(pool):
  p = Problem.from_latex(r"\int_0^{\pi} \sin t\,dt", pool=pool)
  assert p.variable.name == "t" and p.bounds == (0, sympy.pi) and p.definite
  assert p.verify("2", pool=pool)
  p = Problem.from_latex(r"\int_{-\infty}^{\infty} e^{-x^2}\,dx", pool=pool)
  assert p.bounds == (-sympy.oo, sympy.oo) and p.verify(r"\sqrt\pi", "latex", pool=pool)
  p = Problem.from_latex(r"\int_1^{\infty} \frac{dx}{x+nx^n} \quad (n>1)", pool=pool)
  assert [s.name for s in p.parameters] == ["n"]
  assert p.verify(r"\frac{1}{1-n}\ln\!\left(\frac{n}{n+1}\right)", "latex", pool=pool)
  # \{x\} is the fractional part; d(cos pi x) is -pi sin(pi x) dx (Integration Bee H089).
  p = Problem.from_latex(r"\int_0^{2025}\{x\}\,d(\cos\pi x)", pool=pool)
  x = p.variable
  weight = -sympy.pi * sympy.sin(sympy.pi * x)
  assert sympy.simplify(p.integrand - (x - sympy.floor(x)) * weight) == 0
  assert p.verify("-1", pool=pool) and not p.verify("1", pool=pool)
  p = Problem.from_latex(r"\int_0^1 x\,d\left(x^2\right)", pool=pool)
  assert p.verify("2/3", pool=pool)
  # n bounds a product: an integer (H069); prod_{k<n} |2 x sin(pi k / n)| = n |x|**(n-1).
  p = Problem.from_latex(r"\int\prod_{k=1}^{n-1}\sqrt{2x^2-2x^2\cos\!\left(\frac{2\pi k}{n}\right)}"
                         r"\,dx", pool=pool)
  assert p.verify("x^n + C", "latex", pool=pool) and not p.verify("x^{n+1}", "latex", pool=pool)
  for bad in [r"x^2", r"\lim_{n\to\infty}\int_0^1 x^n\,dx", r"\int_0^1\int_0^1 xy\,dx\,dy"]:
    with pytest.raises(ValueError, match="cannot parse"):
      Problem.from_latex(bad, pool=pool)


def test_a_product_ends_before_a_sum_that_does_not_use_its_index(pool):
  # H091 at a smaller size: prod_k (x - k) * sum_j 1/(x - j) is the derivative of the product,
  # so the integral is P(401) - P(1) = 400!. latex2sympy2 used to put the sum inside the
  # product's body (the sum raised to the 400th power); far beyond float64 either way.
  p = Problem.from_latex(r"\int_1^{401}\prod_{k=1}^{400}(x-k)\sum_{j=1}^{400}\frac{1}{x-j}\,dx",
                         pool=pool)
  assert isinstance(p.integrand, sympy.Mul) and p.integrand.has(sympy.Product)
  assert not any(f.has(sympy.Sum) for f in p.integrand.atoms(sympy.Product))
  assert p.verify("400!", "latex", pool=pool) and p.verify("factorial(400)", pool=pool)
  assert not p.verify("399!", "latex", pool=pool)
  assert not p.verify("1.01*factorial(400)", pool=pool)
  # The index used after the product: the body goes on (it cannot be split off).
  x = sympy.Symbol("x", real=True)
  nested = latex_to_sympy(r"\prod_{k=1}^{3}(1+x)\sum_{j=1}^{k}x^j", x, trusted=True)
  assert isinstance(nested, sympy.Product) and nested.function.has(sympy.Sum)


def test_normalize_latex():
  assert normalize_latex(r"\tfrac12 x^2\log x + C") == r"\frac{1}{2} x^{2}\ln(x)"
  # A one-letter argument is closed: sec(x) (sec x + tan x), not sec(x (sec x + tan x)).
  assert (normalize_latex(r"\sec x\,(\sec x+\tan x)^{2025}")
          == r"\sec(x) (\sec(x)+\tan(x))^{2025}")
  assert normalize_latex(r"\sin x^2 + \sin xy") == r"\sin x^{2} + \sin xy"
  assert (normalize_latex(r"\sqrt3 + \sqrt\pi + \sqrt[4]{x}")
          == r"\sqrt{3} + \sqrt{\pi} + \sqrt[4]{x}")
  assert normalize_latex(r"\log_{10} x\,\big(y\big)") == r"\log_{10} x (y)"


PATHOLOGICAL = ["(x + 1)**10000 - (x + 1)**10000 + x**2 + exp(exp(exp(exp(exp(x)))))",
                "x**x**x**x**x**x**x", "9**9**9**9", "(" * 100 + "x" + ")" * 100,
                "x+" * 50_000 + "x", "sin(" * 60 + "x" + ")" * 60 + "*" + "(x+1)**9999",
                "sin(exp(exp(exp(x)))) + x**2", "gamma(exp(exp(x)))", "erf(exp(exp(x))*I)"]


def test_pathological_answers_are_bounded_by_operations_not_the_clock(pool):
  problem = Problem.from_sympy("2*x")
  start = time.monotonic()
  verdicts = check_answers([problem] * len(PATHOLOGICAL), PATHOLOGICAL, pool=pool, time_limit=60)
  elapsed = time.monotonic() - start
  assert not any(v.timed_out for v in verdicts), [v.reason for v in verdicts]
  assert [v.correct for v in verdicts] == [False] * 6 + [False, False, False]
  assert elapsed < 30, elapsed  # generous: bounded work, not a race against a limit
  latex = [r"\frac{" * 300 + "x" + "}{2}" * 300, "x" * 100_000, r"e^{e^{e^{e^{e^{e^{x}}}}}}"]
  verdicts = check_answers([problem] * 3, latex, "latex", pool=pool, time_limit=60)
  assert not any(v.correct or v.timed_out for v in verdicts)


def test_verdicts_are_the_same_on_a_loaded_machine(pool):
  # The old verifier ran simplify under a 2 s limit and quadrature under 5 s: under load a
  # correct answer (or a problem's value) timed out and became "not verified".
  problems = [Problem.from_sympy("x*exp(x)*sin(x)"), Problem.from_sympy("1/(x**4 + 1)"),
              Problem.from_sympy("exp(-x**2)*cos(3*x)", bounds=("0", "4"))]
  answers = ["exp(x)*(x*sin(x) - x*cos(x) + cos(x))/2",
             "(log((x**2 + sqrt(2)*x + 1)/(x**2 - sqrt(2)*x + 1)) + 2*atan(sqrt(2)*x + 1)"
             " + 2*atan(sqrt(2)*x - 1))*sqrt(2)/8", None]
  value = integration.definite_value(problems[2], pool=pool)
  assert value is not None
  answers[2] = sympy.sstr(sympy.Float(value.value.real, 25))
  cases = [(p, a) for p in problems for a in answers] + [
      (problems[0], a) for a in PATHOLOGICAL[-3:]]

  def verdicts():
    return [(v.format_ok, v.correct, v.reason) for v in check_answers(
        [p for p, _ in cases], [a for _, a in cases], pool=pool, time_limit=120)]
  idle = verdicts()
  assert idle[0][1] and idle[4][1] and idle[8][1], idle
  burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(6)]
  try:
    loaded = verdicts()
  finally:
    for b in burners:
      b.kill()
  assert loaded == idle


def test_a_verdict_depends_on_the_answer_not_its_position_in_the_batch(pool):
  # |x| is an antiderivative of 1 only for x > 0: its verdict hangs on the points drawn.
  # They used to come from the answer's index in the batch, so copies disagreed.
  problem = Problem.from_sympy("1")
  verdicts = check_answers([problem] * 64, ["Abs(x)"] * 64, pool=pool)
  assert len({v.correct for v in verdicts}) == 1
  other = check_answers([Problem.from_sympy("2*x")] * 5 + [problem], ["x**2"] * 5 + ["Abs(x)"],
                        pool=pool)
  assert other[-1].correct == verdicts[0].correct


def test_a_step_past_the_safety_net_gets_the_unparseable_verdict(pool):
  problems = [Problem.from_sympy("2*x"), Problem.from_sympy("2*x", bounds=("0", "1"))]
  integration.definite_value(problems[1], pool=pool)
  padding = " + 0*sin(x)" * 150  # a few ms of parsing: far past the limit
  verdicts = check_answers(problems, ["x**2" + padding, "1" + padding], pool=pool,
                           time_limit=1e-4)
  assert [(v.format_ok, v.correct, v.timed_out) for v in verdicts] == [(False, False, True)] * 2
  assert all("timed out" in v.reason for v in verdicts)


def test_injection_payloads_do_not_run(pool, tmp_path):
  problem = Problem.from_sympy("2*x")
  code = "__import__('os').system('touch {marker}')"
  templates = [code, rf"\text{{{code}}}", rf"\mathrm{{{code}}}", rf"\{{{code}\}}",
               rf"\operatorname{{{code}}}(x)", rf"x^2 + \text{{{code}}}"]
  assert_payload_is_live(code, tmp_path / "control")
  answers = [t.replace("{marker}", str(tmp_path / f"pwned{k}")) for k, t in enumerate(templates)]
  for fmt in ("sympy", "latex"):
    verdicts = check_answers([problem] * len(answers), answers, fmt, pool=pool)
    assert not any(v.correct for v in verdicts)
  assert not any(os.path.exists(tmp_path / f"pwned{k}") for k in range(len(templates)))


def test_unparseable_and_missing_answers(pool):
  verdicts = check_answers([Problem.from_sympy("2*x")] * 3, [None, "x**", "x**2"], pool=pool)
  assert [(v.format_ok, v.correct) for v in verdicts] == [(False, False), (False, False),
                                                          (True, True)]
  assert verdicts[0].reason == "no answer" and "unparseable" in verdicts[1].reason


# A sample of the shared Integration Bee set, fast enough for every run; set
# RLSVR_FULL_INTEGRATION_BEE=1 to parse and verify all 180 problems (minutes).
# B013 (mass far from 0), B017 (a series with a closed form), H014 (real cube roots), H026
# (jumps), H057 (\sec x\,(...)), H071 (a bound that rounds out of the domain), B070 and H003
# (thousands of oscillations), H010 (a series of floors), H069 (an integer parameter), H089
# (\{x\}\,d(\cos\pi x)), and H017, H073 (a jump at every integer or square to infinity),
# H045, H062 (oscillations to infinity, and at 0) failed before the verifier learned them.
BEE_SAMPLE = ("B004", "B008", "B041", "B097", "H036", "B013", "B017", "H014", "H026", "H057",
              "H071", "B070", "H003", "H010", "H069", "H089", "H017", "H073", "H045", "H062")


def _bee_rows():
  rows = []
  for name in ("base-set.json", "hard-set.json"):
    with open(shared_path("integration_bee", name), encoding="utf-8") as f:
      rows += json.load(f)["problems"]
  return rows


def test_integration_bee_official_answers(pool):
  rows = _bee_rows()
  full = os.environ.get("RLSVR_FULL_INTEGRATION_BEE") == "1"
  if not full:
    rows = [r for r in rows if r["id"] in BEE_SAMPLE]
    assert len(rows) == len(BEE_SAMPLE)
  problems = integration.problems_from_latex([r["problem"] for r in rows],
                                             [r["answer"] for r in rows], pool=pool, timeout=30)
  parsed = [(r, p) for r, p in zip(rows, problems) if p is not None]
  verdicts = check_answers([p for _, p in parsed], [r["answer"] for r, _ in parsed], "latex",
                           pool=pool)
  verified = sum(v.correct for v in verdicts)
  print(f"Integration Bee: {len(parsed)}/{len(rows)} parse, {verified}/{len(parsed)} official "
        "answers verify")
  if full:
    # All but B014 (wrong as written) and H079 (divergent as written); 29 do not parse.
    assert len(parsed) >= 151 and verified >= 149
  else:
    assert len(parsed) == len(rows) and verified == len(parsed), [
        (r["id"], v.reason) for (r, _), v in zip(parsed, verdicts) if not v.correct]


def test_numeric_checks_are_relative_at_every_scale(pool):
  # The integral is 5e-8: an answer 1% off used to pass under an absolute floor of 1.
  tiny = Problem.from_sympy("x/10000000", bounds=("0", "1"))
  assert tiny.verify("1/20000000", pool=pool)
  assert not tiny.verify("1.01/20000000", pool=pool)
  huge = Problem.from_sympy("10**9*x", bounds=("0", "1"))
  assert huge.verify("500000000", pool=pool) and not huge.verify("505000000", pool=pool)
  # Indefinite, where the numeric fallback compares derivatives: 1% off is rejected too.
  small = Problem.from_sympy("x/10000000")
  assert small.verify("x**2/20000000", pool=pool)
  assert not small.verify("1.01*x**2/20000000", pool=pool)
  zero = Problem.from_sympy("x**3", bounds=("-1", "1"))  # exactly 0: the absolute floor
  assert zero.verify("0", pool=pool) and not zero.verify("1/1000", pool=pool)
