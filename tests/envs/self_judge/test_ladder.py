"""Tests for rlsvr.envs.self_judge.ladder: verified variants and the solved-problem filter."""
import json

import sympy

from rlsvr.envs.base import Completion
from rlsvr.envs.self_judge import integration, ladder
from rlsvr.envs.self_judge.safe_math import parse_expression
from tests.envs.spy.fakes import EOS, ByteTokenizer

x = sympy.Symbol("x", real=True)


def test_generate_variants_are_verified_and_seeded(pool):
  args = (("x**2", "cos(x)"), 1, (1, 2, 3), 1)
  candidates = ladder.variant_candidates(*args, x)
  assert candidates == ladder.variant_candidates(*args, x)
  assert candidates != ladder.variant_candidates(*args[:3], 2, x)
  rows = ladder.generate_variants(*args, pool=pool)
  assert [r["integrand"] for r in rows] == [sympy.sstr(c[2]) for c in candidates]
  assert {r["level"] for r in rows} == {1, 2, 3} and {r["seed"] for r in rows} == {"x**2", "cos(x)"}
  for row in rows:
    integrand = parse_expression(row["integrand"], {"x": x})
    antiderivative = parse_expression(row["reference"], {"x": x})
    assert sympy.simplify(sympy.diff(antiderivative, x) - integrand) == 0
    assert integrand != parse_expression(row["seed"], {"x": x})  # a variant, not the seed
  problem = ladder.problem_from_row(json.loads(json.dumps(rows[0])))
  assert problem.verify(rows[0]["reference"], pool=pool)


def test_a_limit_gives_the_first_rows_of_the_full_list(pool, monkeypatch):
  args = (("x**2", "cos(x)", "exp(x)"), 2, (1, 2), 3)
  full = ladder.generate_variants(*args, pool=pool)
  sent = []  # The candidates handed to the pool's workers.
  real_map = pool.map
  monkeypatch.setattr(pool, "map",
                      lambda fn, args, timeout: sent.extend(args) or real_map(fn, args, timeout))
  for limit in (1, 5, len(full), len(full) + 3):
    sent.clear()
    assert ladder.generate_variants(*args, pool=pool, limit=limit) == full[:limit]
    if limit < len(full):
      assert len(sent) < 12  # not every one of the 12 candidates was integrated


def test_unverifiable_antiderivatives_are_dropped(pool):
  # SymPy leaves the integral of x**x unevaluated: no variant survives.
  outcome = pool.run(ladder.verified_antiderivative, x**x, x, timeout=20)
  assert outcome.ok and outcome.value is None
  outcome = pool.run(ladder.verified_antiderivative, 2 * x, x, timeout=20)
  assert outcome.value == "x**2"


def test_filter_solved_drops_what_the_model_solves(pool):
  tokenizer = ByteTokenizer()
  problems = [integration.Problem.from_sympy("2*x"), integration.Problem.from_sympy("cos(x)"),
              integration.Problem.from_sympy("exp(x)")]
  replies = {"2 x": "<answer>x**2</answer>", r"\cos": "<answer>-sin(x)</answer>",
             "e^{x}": "no answer"}
  calls = []

  def sample(prompts, **kwargs):
    calls.append(kwargs)
    texts = [tokenizer.decode(p) for p in prompts]
    outs = []
    for text in texts:
      reply = next(r for key, r in replies.items() if key in text)
      ids = tuple(tokenizer.encode(reply)) + (EOS,)
      outs.append(Completion(ids, (0.0,) * len(ids), "eos"))
    return outs

  keep, pass_at_1 = ladder.filter_solved(problems, sample, tokenizer, pool=pool, temperature=0.5)
  assert pass_at_1 == [1.0, 0.0, 0.0] and keep == [1, 2]
  assert calls == [{"max_new_tokens": 1024, "temperature": 0.5}]
  keep, pass_at_1 = ladder.filter_solved(problems, sample, tokenizer, pool=pool,
                                         samples_per_problem=2, max_pass_at_1=1.0)
  assert pass_at_1 == [1.0, 0.0, 0.0] and keep == [1, 2]


def test_generate_command(tmp_path, monkeypatch, pool):
  monkeypatch.setattr(ladder.workers, "default_pool", lambda: pool)
  out = tmp_path / "problems.jsonl"
  ladder.main(["generate", "--out", str(out), "--per_seed", "1", "--seeds", "x**2;exp(x)"])
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert rows and {r["seed"] for r in rows} == {"x**2", "exp(x)"}
