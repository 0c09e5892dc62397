"""Judge prompt templates: text files chosen by name or path, checked against their task.

A template holds `{{placeholder}}`s: `{{answer}}` (what the judge sees of the
policy's response) and the task's own (`Task.judge_placeholders`, e.g.
Countdown's `{{nums}}` and `{{target}}`). Double braces leave LaTeX such as
`\\boxed{1}` as it is. A task whose problems need different instructions
(integration: indefinite or definite) reads a sectioned file, each section
starting with a line `[[name]]`; a file without headers serves every problem.

The built-in templates are `prompts/<name>.txt` in this package; any path to
a `.txt` file works too, so a new prompt needs no code. `load_template`
rejects a template that lacks a placeholder of its task, uses one the task
does not fill, or never asks for `\\boxed{1}` / `\\boxed{0}` (the only verdicts
`judge.parse_verdict` reads: every reply to such a prompt would count as a
parse failure), so a bad prompt fails at config-check time, not mid-run.
"""
from __future__ import annotations

import dataclasses
import importlib.resources
import pathlib
import re
from typing import Any, Mapping

from rlsvr.envs.self_judge.tasks import Task

ANSWER = "answer"
VERDICTS = ("\\boxed{1}", "\\boxed{0}")
_PLACEHOLDER_RE = re.compile(r"\{\{(\w+)\}\}")
_SECTION_RE = re.compile(r"^\[\[(\w+)\]\][ \t]*$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class JudgeTemplate:
  """A checked template of `task`: section -> text ("" : the text of every section)."""

  name: str
  task: Task
  texts: Mapping[str, str]

  def prompt(self, problem: Any, answer: str) -> str:
    """The judge prompt for `answer` to `problem`."""
    section, values = self.task.judge_fields(problem)
    return self.render(section, {**values, ANSWER: answer})

  def render(self, section: str, values: Mapping[str, str]) -> str:
    # One pass: placeholders inside the (untrusted) answer are never expanded.
    text = self.texts[section] if section in self.texts else self.texts[""]
    return _PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), text)


def _prompts_dir():
  return importlib.resources.files("rlsvr.envs.self_judge") / "prompts"


def names() -> list[str]:
  """The built-in templates' names."""
  return sorted(f.name[:-len(".txt")] for f in _prompts_dir().iterdir()
                if f.name.endswith(".txt"))


def load_template(spec: str, task: Task) -> JudgeTemplate:
  """The template `spec` names for `task`: "" (the task's default), a built-in name, or a
  path to a `.txt` file. ValueError for an unknown name or a template unfit for `task`."""
  if not isinstance(spec, str):
    raise ValueError(f"judge_template must be a template name or a .txt path, got {spec!r}")
  spec = spec or task.default_judge_template
  if spec.endswith(".txt") or "/" in spec:
    path = pathlib.Path(spec).expanduser()
    if not path.is_file():
      raise ValueError(f"judge template file {spec!r} does not exist")
    text = path.read_text(encoding="utf-8")
  else:
    resource = _prompts_dir() / f"{spec}.txt"
    if not resource.is_file():
      raise ValueError(f"unknown judge template {spec!r}; available: {names()}, or the path "
                       "of a .txt file")
    text = resource.read_text(encoding="utf-8")
  return JudgeTemplate(spec, task, _checked_texts(spec, text, task))


def _checked_texts(name: str, text: str, task: Task) -> dict[str, str]:
  before, *sections = _SECTION_RE.split(text)
  if not sections:
    texts = {"": text.strip()}
  else:
    headers = sections[::2]
    if before.strip():
      raise ValueError(f"judge template {name!r}: text before its first [[section]] header")
    if len(set(headers)) != len(headers) or set(headers) != set(task.judge_sections):
      needs = (f"sections {list(task.judge_sections)}" if task.judge_sections
               else "one text without [[section]] headers")
      raise ValueError(f"judge template {name!r} has sections {headers}; task {task.name!r} "
                       f"needs {needs}")
    texts = {h: body.strip() for h, body in zip(headers, sections[1::2])}
  required = {ANSWER, *task.judge_placeholders}
  for section, body in texts.items():
    where = f"judge template {name!r}" + (f" [[{section}]]" if section else "")
    used = set(_PLACEHOLDER_RE.findall(body))
    if required - used:
      raise ValueError(f"{where} lacks the placeholder(s) "
                       f"{_braced(required - used)} that task {task.name!r} requires")
    if used - required:
      raise ValueError(f"{where} uses {_braced(used - required)}, which task {task.name!r} "
                       f"does not fill (it fills {_braced(required)})")
    if not all(verdict in body for verdict in VERDICTS):
      raise ValueError(f"{where} must ask for the verdict as {VERDICTS[0]} or {VERDICTS[1]}, "
                       "the only replies judge.parse_verdict reads")
  return texts


def _braced(placeholders) -> str:
  return ", ".join("{{" + p + "}}" for p in sorted(placeholders))
