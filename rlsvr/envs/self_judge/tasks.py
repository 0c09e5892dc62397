"""RLSR tasks by name: what `SelfJudgeEnv` asks of a task, and the registry.

A task is one module that defines an object satisfying `Task` and calls
`register_task(...)` at import time. `SelfJudgeConfig.task` picks it: a
built-in name (its module is imported on first use, so asking for Countdown
never imports SymPy), a name registered by code that ran before (a test, a
notebook), or `"package.module:name"`, which imports that module first.

  task = get_task("countdown")
  problems = task.load_problems("generate", split="train", limit=100, seed=0)
  text = task.policy_prompt(task.as_problem(problems[0]))

The judge prompt is data (`templates`): a task names the placeholders its
templates fill (`judge_placeholders`, besides `{{answer}}`) and, when its
problems need different judge instructions, the template sections
(`judge_sections`); `judge_fields` says which section and values a problem uses.

Nothing here imports a task: this module stays light so worker processes and
config checks start fast.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any, Protocol, Sequence

# Built-in tasks: name -> the module that registers it.
BUILTIN = {"countdown": "rlsvr.envs.self_judge.countdown",
           "integration": "rlsvr.envs.self_judge.integration_task"}

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The formal check of one response.

  `format_ok`: the format check (the answer parses: Countdown, an expression of
  integers, `+ - * /` and parentheses; integration, a SymPy expression); it
  pays the format bonus. `correct`: the formal verifier accepts the answer.
  `reason` says what failed ("ok" when correct). `timed_out`: a verifier step
  hit its safety-net time limit (such a verdict is that of an unparseable answer).
  """

  format_ok: bool
  correct: bool
  reason: str
  expression: str | None = None
  timed_out: bool = False


def extract_answer(response: str) -> str | None:
  """The content of the last `<answer>...</answer>` block, or None."""
  blocks = _ANSWER_RE.findall(response)
  return blocks[-1] if blocks else None


class Task(Protocol):
  """One RLSR task: its problems, the policy's prompt, the formal verifier, the judge's facts.

  Attributes:
    name: the registry name (`SelfJudgeConfig.task`, the records' "task").
    default_judge_template: the judge template used when the config names none.
    judge_placeholders: the `{{name}}`s a judge template must fill, besides `{{answer}}`.
    judge_sections: the sections a sectioned template must have ("[[name]]"
      headers), () when every problem reads the same text.
  """

  name: str
  default_judge_template: str
  judge_placeholders: tuple[str, ...]
  judge_sections: tuple[str, ...]

  def load_problems(self, source: str, *, split: str, limit: int | None,
                    seed: int) -> list[Any]:
    """The problem set `source` names (`data.source`); ValueError for an unknown source."""
    ...

  def as_problem(self, item: Any) -> Any:
    """A problem from an item of the data stream (a problem, a JSON row, ...)."""
    ...

  def policy_prompt(self, problem: Any) -> str:
    ...

  def extract_answer(self, response: str) -> str | None:
    """The answer the judge sees (`judge_sees="answer"`) and the record keeps; None if none."""
    ...

  def verify(self, problems: Sequence[Any], responses: Sequence[str], *, config: Any,
             pool: Any) -> list[Verdict]:
    """The format check and the formal verifier of each (problem, response) pair.

    `config` is the `SelfJudgeConfig` (time limits); `pool` the
    `workers.WorkerPool` for verifiers that run untrusted parses (None: default).
    """
    ...

  def judge_fields(self, problem: Any) -> tuple[str, dict[str, str]]:
    """The template section ("" when unsectioned) and the placeholder values of `problem`."""
    ...

  def record_facts(self, problem: Any) -> dict[str, Any]:
    """What a record keeps about `problem` (JSON-serialisable)."""
    ...

  def describe(self, problem: Any) -> str:
    """One line naming `problem` in rollouts.txt."""
    ...


_REGISTRY: dict[str, Task] = {}


def register_task(task: Task) -> Task:
  """Adds `task` under `task.name` (a module may re-register itself on reload)."""
  _REGISTRY[task.name] = task
  return task


def unregister_task(name: str) -> None:
  _REGISTRY.pop(name, None)


def names() -> list[str]:
  return sorted(set(BUILTIN) | set(_REGISTRY))


def get_task(name: str) -> Task:
  """The task `name` (see the module docstring); ValueError when there is none."""
  if name in BUILTIN and name not in _REGISTRY:
    importlib.import_module(BUILTIN[name])
  module, _, registered = name.partition(":")
  if registered and registered not in _REGISTRY:
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if not (module == e.name or module.startswith(f"{e.name}.")):
        raise  # A broken task module: its own error says more.
  key = registered or name
  if key not in _REGISTRY:
    raise ValueError(f"task {name!r} is not registered; known: {names()}, or "
                     "'package.module:name' of a module that calls tasks.register_task")
  return _REGISTRY[key]
