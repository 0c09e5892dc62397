"""Tests for rlsvr.envs.self_judge.tasks: a new task is one module; the built-in tasks' sources."""
import json

import numpy as np
import pytest

from rlsvr.envs.self_judge import countdown, integration, tasks
from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.env import SelfJudgeEnv
from tests.envs.self_judge.test_env import Scripted
from tests.envs.spy.fakes import ByteTokenizer


class ParityTask:
  """A whole task: is n even or odd? Nothing else in the package knows about it."""

  name, judge_placeholders, judge_sections = "toy_parity", ("n",), ()

  def __init__(self, default_judge_template: str):
    self.default_judge_template = default_judge_template

  def load_problems(self, source, *, split, limit, seed):
    return list(range(limit or 10))

  def as_problem(self, item):
    return int(item)

  def policy_prompt(self, n):
    return f"Is {n} even or odd? Answer in <answer> </answer> tags."

  def extract_answer(self, response):
    return tasks.extract_answer(response)

  def verify(self, problems, responses, *, config, pool):
    answers = [self.extract_answer(r) for r in responses]
    return [tasks.Verdict(a in ("even", "odd"), a == ("odd" if n % 2 else "even"), "toy", a)
            for n, a in zip(problems, answers)]

  def judge_fields(self, n):
    return "", {"n": str(n)}

  def record_facts(self, n):
    return {"n": n}

  def describe(self, n):
    return f"n={n}"


@pytest.fixture
def parity(tmp_path):
  template = tmp_path / "parity_judge.txt"
  template.write_text("Is {{n}} even or odd? Someone answered: {{answer}}\n"
                      "Reply \\boxed{1} if that is right, \\boxed{0} if not.\n")
  yield tasks.register_task(ParityTask(str(template)))
  tasks.unregister_task("toy_parity")


def test_a_task_registered_by_a_test_plays_a_step(parity):
  tokenizer = ByteTokenizer()
  policy = Scripted(tokenizer, lambda t, k: ["<answer>even</answer>", "<answer>odd</answer>",
                                             "no idea"][k % 3])
  judge = Scripted(tokenizer, lambda t, k: "\\boxed{1}")
  env = SelfJudgeEnv(SelfJudgeConfig(task="toy_parity", group_size=3), tokenizer,
                     judge_sample=judge)
  batch = env.play_episodes(["3"], policy, np.random.default_rng(0), step=1)

  assert policy.calls[0][0][0].startswith("Is 3 even or odd?")
  assert judge.calls[0][0][0] == ("Is 3 even or odd? Someone answered: even\n"
                                  "Reply \\boxed{1} if that is right, \\boxed{0} if not.")
  assert judge.calls[0][0][2].startswith("Is 3 even or odd? Someone answered: no idea")
  assert [r.reward for r in batch.trajectories] == pytest.approx([1.1, 1.1, 1.0])
  assert batch.metrics["self_judge/true_reward"] == pytest.approx(1 / 3)
  assert batch.metrics["self_judge/judge_tpr"] == 1.0
  assert batch.metrics["self_judge/judge_tnr"] == 0.0
  record = batch.records[0]
  assert (record["task"], record["n"]) == ("toy_parity", 3)
  assert [a["correct"] for a in record["answers"]] == [False, True, False]
  assert "toy_parity problem 0 | n=3" in batch.record_text
  assert "toy_parity" in tasks.names()


def test_builtin_and_unknown_tasks():
  assert isinstance(tasks.get_task("countdown"), countdown.CountdownTask)
  assert tasks.get_task("integration").name == "integration"
  assert {"countdown", "integration"} <= set(tasks.names())
  with pytest.raises(ValueError, match="known: .*countdown"):
    tasks.get_task("chess")
  with pytest.raises(ValueError, match="not registered"):
    tasks.get_task("no_such_module_for_rlsr:chess")


def test_a_task_from_a_module_outside_the_package(tmp_path, monkeypatch):
  (tmp_path / "outside_rlsr_task.py").write_text(
      "from rlsvr.envs.self_judge import countdown, tasks\n\n\n"
      "class Renamed(countdown.CountdownTask):\n  name = 'outside'\n\n\n"
      "tasks.register_task(Renamed())\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  try:
    config = SelfJudgeConfig(task="outside_rlsr_task:outside")
    assert config.task_spec().name == "outside"
    assert config.template().name == "countdown_4"
  finally:
    tasks.unregister_task("outside")


def test_countdown_problem_sources(tmp_path):
  task = tasks.get_task("countdown")
  generated = task.load_problems("generate", split="train", limit=5, seed=3)
  assert len(generated) == 5
  assert generated == task.load_problems("generate", split="train", limit=5, seed=3)
  assert len(task.load_problems("generate", split="train", limit=None, seed=0)) == 1000
  path = tmp_path / "cd.jsonl"
  path.write_text('{"target": 24, "nums": [4, 6, 1]}\n{"target": 10, "nums": [5, 2, 3]}\n')
  assert [p.target for p in task.load_problems(str(path), split="", limit=None, seed=0)] == [24,
                                                                                             10]
  assert len(task.load_problems(str(path), split="", limit=1, seed=0)) == 1
  with pytest.raises(ValueError, match="data.source"):
    task.load_problems("nowhere", split="train", limit=None, seed=0)
  assert task.as_problem({"nums": [1, 2], "target": 3}) == countdown.CountdownProblem((1, 2), 3)


def test_integration_problem_sources(tmp_path):
  task = tasks.get_task("integration")
  rows = tmp_path / "rows.jsonl"
  rows.write_text('{"integrand": "2*x", "reference": "x**2"}\n{"integrand": "__import__(1)"}\n'
                  '{"integrand": "cos(x)"}\n')
  problems = task.load_problems(str(rows), split="train", limit=None, seed=0)
  assert [str(p.integrand) for p in problems] == ["2*x", "cos(x)"]  # the unsafe row is skipped
  assert len(task.load_problems(str(rows), split="train", limit=1, seed=0)) == 1
  bee = tmp_path / "bee.json"
  bee.write_text(json.dumps({"problems": [{"problem": r"\int_0^1 x\,dx", "answer": "1/2"}]}))
  (problem,) = task.load_problems(str(bee), split="train", limit=None, seed=0)
  assert problem.definite and problem.reference == "1/2"
  assert task.judge_fields(problem) == ("definite", {"problem": r"\int_0^1 x\,dx"})
  assert task.record_facts(integration.Problem.from_sympy("2*x"))["definite"] is False
  with pytest.raises(ValueError, match="data.source"):
    task.load_problems("nowhere", split="train", limit=None, seed=0)
