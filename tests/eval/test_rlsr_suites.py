"""RLSR suites: solver, perturbations, loaders, Countdown and Integration Bee end to end."""
import json

import pytest

from rlsvr.envs.self_judge import countdown
from rlsvr.eval import rlsr_suites as rs
from rlsvr.eval import runner

from .conftest import shared_path, smoke, write_jsonl


@pytest.mark.parametrize("nums, target", [((44, 19, 35), 98), ((3, 7, 2, 5), 1), ((6, 4), 24)])
def test_solver_finds_verified_solutions(nums, target):
  expr = rs.solve_countdown(nums, target)
  assert countdown.check(f"<answer>{expr}</answer>", nums, target).correct


def test_solver_reports_unsolvable():
  assert rs.solve_countdown((1, 1), 100) is None


def test_perturbations_differ_from_the_answer():
  import random

  options = rs._countdown_perturbations("(44 + 19) + 35", random.Random(0))
  assert options and "(44 + 19) + 35" not in options
  assert any(not countdown.check(f"<answer>{o}</answer>", (44, 19, 35), 98).correct
             for o in options)


def test_shared_loaders():
  shared_path("countdown/countdown_tinyzero_test.jsonl")
  (pid, first), = rs.load_countdown(limit=1)
  assert (pid, first.nums, first.target) == ("0", (96, 7, 37, 74), 55)
  shared_path("integration_bee/base-set.json")
  row, = rs.load_integration("integration_bee", limit=1)
  assert row["id"] == "B001" and row["answer"] == "4048" and row["latex"].startswith("\\int")


def test_generated_countdown_problems():
  problems = rs.load_countdown("generate", limit=3, seed=1)
  assert [p for p, _ in problems] == ["0", "1", "2"]


def test_countdown_end_to_end_with_gap(tmp_path):
  path = write_jsonl(tmp_path / "cd.jsonl", [{"target": 98, "nums": [44, 19, 35]},
                                            {"target": 1, "nums": [3, 7, 2, 5]}])
  c = smoke("eval_rlsr", tmp_path / "out", countdown=path)
  results = runner.run(c, c.workdir)
  metrics = results["datasets"]["countdown"]["metrics"]
  assert metrics["n"] == 2 and metrics["accuracy"] == 0.0  # a random model solves nothing
  assert metrics["gap/candidates"] == 4 and metrics["gap/problems"] == 2
  gap = [json.loads(l) for l in open(results["datasets"]["countdown"]["gap_records"])]
  assert [r["truth"] for r in gap] == [True, False, True, False]  # balanced
  for r in gap:
    nums, target = ((44, 19, 35), 98) if r["id"] == "0" else ((3, 7, 2, 5), 1)
    assert countdown.check(f"<answer>{r['answer']}</answer>", nums, target).correct == r["truth"]
  assert metrics["gap/judge_parse_failures"] == 4  # the random judge never boxes a verdict
  assert metrics["gap/verify_accuracy"] == 0.0


def test_integration_end_to_end_with_gap(tmp_path):
  bee = tmp_path / "bee.json"
  bee.write_text(json.dumps({"problems": [
      {"id": "I1", "problem": "\\int 2x\\,dx", "answer": "x^2"},
      {"id": "I2", "problem": "\\int_0^1 3x^2\\,dx", "answer": "1"},
      {"id": "I3", "problem": "\\int \\frac{1}{", "answer": "?"}]}))
  c = smoke("eval_rlsr", tmp_path / "out", integration_bee=str(bee))
  c.limit = 3
  results = runner.run(c, c.workdir)
  metrics = results["datasets"]["integration_bee"]["metrics"]
  assert metrics["n"] == 2 and metrics["unparseable_problems"] == 1
  assert metrics["accuracy_definite"] == 0.0 and metrics["accuracy_indefinite"] == 0.0
  assert metrics["gap/candidates"] == 4
  gap = [json.loads(l) for l in open(results["datasets"]["integration_bee"]["gap_records"])]
  assert [(r["id"], r["truth"]) for r in gap] == [
      ("I1", True), ("I1", False), ("I2", True), ("I2", False)]
