"""Rows of a prompt dataset, and the prompts the policy reads.

`data.source` is one of:

  bundled:arithmetic[:seed] generated GSM8K-style word problems with integer answers
                           (`rlsvr.data.arithmetic`): no file, no network, so a fresh
                           clone trains offline; rows {question, answer, id}; `data.limit`
                           of them (0: 5000), drawn with `seed` (default: a fixed one)
  <suite>                  a free-form math set of the shared data folder, read by
                           `rlsvr.data.math_datasets` (gsm8k, math500, aime24, aime25,
                           amc23, minerva_math): rows {question, answer, id}, the
                           answer already extracted (GSM8K's "#### 42" -> "42")
  hub:<org/name>[:config]  a hub dataset (network or the HF cache), split `data.split`
                           (`data.config` when the source names none)
  <path>                   a local .jsonl / .json / .csv / .parquet file

`data.limit` > 0 keeps the first that many rows.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from rlsvr.data import arithmetic, math_datasets, sources
from rlsvr.rewards.calling import NOT_COLUMNS
from rlsvr.model.tokenizer import encode_chat

_FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")
_MULTIPLE_CHOICE = ("mmlu_pro", "gpqa_diamond")  # Letter answers: not for math-verify.
_BUNDLED = "bundled:"
BUNDLED_SETS = ("arithmetic",)  # Generated sets: `bundled:<name>[:seed]`.


def free_form_suites() -> list[str]:
  return sorted(name for name in math_datasets.SUITES if name not in _MULTIPLE_CHOICE)


def check_source(source: str) -> None:
  """ValueError for a `data.source` that names none of the kinds above."""
  if source in free_form_suites() or source.startswith("hub:"):
    return
  if source.startswith(_BUNDLED):
    _bundled(source)
    return
  if source in math_datasets.SUITES:
    raise ValueError(f"data.source={source!r} is a multiple-choice suite; the reward_fn "
                     f"environment reads free-form sets: {free_form_suites()}")
  if not (os.path.isfile(source) or source.lower().endswith(_FILE_SUFFIXES)):
    raise ValueError(f"data.source={source!r}: use a math suite {free_form_suites()}, "
                     "'bundled:arithmetic', 'hub:<org/name>[:config]', or a local "
                     ".jsonl/.json/.csv/.parquet file")


def _bundled(source: str) -> int:
  """The seed of a `bundled:<name>[:seed]` source; ValueError naming what is wrong."""
  name, _, seed = source[len(_BUNDLED):].partition(":")
  if name not in BUNDLED_SETS:
    raise ValueError(f"data.source={source!r}: no bundled set {name!r}; have "
                     f"{[_BUNDLED + n for n in BUNDLED_SETS]}")
  if seed and not seed.isdigit():
    raise ValueError(f"data.source={source!r}: the seed after the name must be an integer")
  return int(seed) if seed else arithmetic.DEFAULT_SEED


def load_rows(c) -> list[dict[str, Any]]:
  """The rows named by `c.data` (module docstring)."""
  source, limit = c.data.source, c.data.limit
  check_source(source)
  if source.startswith(_BUNDLED):
    return arithmetic.rows(limit, _bundled(source))
  if source in math_datasets.SUITES:
    return [dict(question=item.question, answer=item.answer, id=item.id)
            for item in math_datasets.load(source, "", limit=limit, seed=c.seed)]
  if source.startswith("hub:"):
    name, _, config = source[len("hub:"):].partition(":")
    hub = sources.HubSource(name, config or c.data.config or None, c.data.split)
    rows = sources.load_hub(hub, limit)
  else:
    rows = sources.read_rows(source)
  return [dict(row) for row in (rows[:limit] if limit else rows)]


def columns_of(rows: Sequence[Mapping[str, Any]], repeat: int) -> dict[str, list[Any]]:
  """Every column but TRL's prompt/completion ones, each row repeated `repeat` times (one
  value per completion); a row that lacks a column gives None."""
  names = list(dict.fromkeys(k for row in rows for k in row if k not in NOT_COLUMNS))
  return {k: [row.get(k) for row in rows for _ in range(repeat)] for k in names}


def json_safe(value: Any) -> Any:
  """`value` as the rollout JSONL can hold it (unknown types as their str)."""
  return json.loads(json.dumps(value, ensure_ascii=False, default=str))


class Prompts:
  """Turns a row into the prompt reward functions see and the ids the policy reads."""

  def __init__(self, cfg, tokenizer, chat_template_kwargs: Mapping[str, Any] | None = None):
    self.cfg = cfg
    self.tokenizer = tokenizer
    self.chat_template_kwargs = dict(chat_template_kwargs or {})
    self._prefill = (tokenizer.encode(cfg.answer_prefill, add_special_tokens=False)
                     if cfg.answer_prefill else [])

  def prompt(self, row: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    """The row's prompt with the instruction, in the dataset's form (TRL's): a string stays a
    string (the chat template, when on, wraps it only for the policy: `encode`), chat
    messages stay messages, with the system prompt first."""
    cfg = self.cfg
    if cfg.prompt_field not in row:
      raise ValueError(f"a data row has no column {cfg.prompt_field!r} (reward_fn.prompt_field); "
                       f"it has {sorted(row)}")
    value = row[cfg.prompt_field]
    suffix = f"\n\n{cfg.instruction}" if cfg.instruction else ""
    if isinstance(value, str):
      return value + suffix
    if not (isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value)):
      raise ValueError(f"prompt column {cfg.prompt_field!r} holds a {type(value).__name__}; "
                       "expected a string or a list of chat messages")
    messages = [dict(m) for m in value]
    users = [k for k, m in enumerate(messages) if m.get("role") == "user"]
    if suffix and users:
      messages[users[-1]]["content"] = str(messages[users[-1]]["content"]) + suffix
    return self._with_system(messages)

  def _with_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if self.cfg.system_prompt and messages[0].get("role") != "system":
      return [{"role": "system", "content": self.cfg.system_prompt}] + messages
    return messages

  def encode(self, prompt: str | list[dict[str, Any]]) -> list[int]:
    """The ids the policy reads: a string as it is, or as the user turn of a chat when
    `use_chat_template` is on; messages through the chat template; then the prefill."""
    if isinstance(prompt, str) and not self.cfg.use_chat_template:
      ids = self.tokenizer.encode(prompt)
    else:
      messages = (self._with_system([{"role": "user", "content": prompt}])
                  if isinstance(prompt, str) else prompt)
      ids = encode_chat(self.tokenizer, messages, chat_template_kwargs=self.chat_template_kwargs)
    return [int(t) for t in ids] + self._prefill
