"""Math datasets as `MathItem`s: the free-form sets and the multiple-choice ones.

Read through `rlsvr.data.sources` (the shared data folder, a local file, or the
hub). The evaluation (`rlsvr.eval.math_suites`) and the `reward_fn` environment
load them from here. `last_boxed` reads a `\\boxed{}` answer: the gold answer of
a MATH-style solution here, a response's answer in the scorers.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Any, Callable

from rlsvr.data import sources
from rlsvr.data.sources import HubSource

MAX_ANSWER_CHARS = 500  # No real answer is longer: a longer box is not an answer.
LETTERS = "ABCDEFGHIJ"  # Multiple-choice answers, in option order.


@dataclasses.dataclass(frozen=True)
class MathItem:
  """One question; multiple choice when `choices` is set (then `answer` is a letter)."""

  id: str
  question: str
  answer: str
  choices: tuple[str, ...] = ()


def _number(value: Any) -> str:
  """27.0 -> "27" (AMC keys are floats), other values as text."""
  if isinstance(value, float) and value.is_integer():
    return str(int(value))
  return str(value).strip()


def _free_form(question: tuple[str, ...], answer: Callable[[dict[str, Any]], Any]):
  def convert(row: dict[str, Any], index: int, seed: int) -> MathItem:
    del seed
    return MathItem(str(row.get("id", row.get("unique_id", row.get("idx", index)))),
                    str(sources.first_field(row, question, "question")), _number(answer(row)))
  return convert


def _gsm8k_answer(row: dict[str, Any]) -> str:
  return str(row["answer"]).split("####")[-1].strip().replace(",", "")


def _minerva_answer(row: dict[str, Any]) -> str:
  if row.get("answer") not in (None, ""):
    return str(row["answer"])
  box = last_boxed(str(row["solution"]))
  if box is None:
    raise sources.DataError("minerva_math: a solution has no \\boxed{} answer")
  return box


def _mmlu_pro(row: dict[str, Any], index: int, seed: int) -> MathItem:
  del seed
  options = tuple(str(o) for o in row["options"])
  return MathItem(str(row.get("question_id", index)), str(row["question"]), str(row["answer"]),
                  options)


def _gpqa(row: dict[str, Any], index: int, seed: int) -> MathItem:
  correct = str(row["Correct Answer"]).strip()
  options = [correct] + [str(row[f"Incorrect Answer {k}"]).strip() for k in (1, 2, 3)]
  random.Random(f"{seed}-{index}").shuffle(options)  # seeded: same order on every rerun
  return MathItem(str(row.get("Record ID", index)), str(row["Question"]).strip(),
                  LETTERS[options.index(correct)], tuple(options))


@dataclasses.dataclass(frozen=True)
class Suite:
  local: str | None
  hub: HubSource | None
  convert: Callable[[dict[str, Any], int, int], MathItem]


SUITES = {
    "gsm8k": Suite("gsm8k/test.jsonl", HubSource("openai/gsm8k", "main"),
                   _free_form(("question",), _gsm8k_answer)),
    "math500": Suite("math500/test.jsonl", HubSource("HuggingFaceH4/MATH-500"),
                     _free_form(("problem",), lambda r: r["answer"])),
    "aime24": Suite("aime24/test.jsonl", HubSource("HuggingFaceH4/aime_2024", split="train"),
                    _free_form(("problem", "question"), lambda r: r["answer"])),
    "aime25": Suite("aime25/test.jsonl", HubSource("math-ai/aime25"),
                    _free_form(("problem", "question"), lambda r: r["answer"])),
    "amc23": Suite("amc23/test.jsonl", HubSource("math-ai/amc23"),
                   _free_form(("problem", "question"), lambda r: r["answer"])),
    "minerva_math": Suite("minerva_math/test.jsonl", HubSource("math-ai/minervamath"),
                          _free_form(("problem", "question"), _minerva_answer)),
    "mmlu_pro": Suite("mmlu_pro/mmlu_pro_test_full.jsonl", HubSource("TIGER-Lab/MMLU-Pro"),
                      _mmlu_pro),
    "gpqa_diamond": Suite(None, HubSource("Idavidrein/gpqa", "gpqa_diamond", "train"), _gpqa),
}


def load(name: str, spec: str = "", *, limit: int = 0, seed: int = 0) -> list[MathItem]:
  """The items of dataset `name` from `spec` (see `rlsvr.data.sources`)."""
  if name not in SUITES:
    raise ValueError(f"unknown math dataset {name!r}; known: {sorted(SUITES)}")
  suite = SUITES[name]
  rows = sources.load_rows(name, spec, local=suite.local, hub=suite.hub, limit=limit)
  return [suite.convert(row, i, seed) for i, row in enumerate(rows)]


_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
  """Content of the last complete `\\boxed{...}` (balanced braces), or None.

  Boxes longer than MAX_ANSWER_CHARS are ignored: no real answer is that long.
  """
  found = None
  for match in _BOX_RE.finditer(text):
    depth, pos = 1, match.end()
    limit = min(len(text), pos + MAX_ANSWER_CHARS + 1)
    while pos < limit and depth:
      depth += {"{": 1, "}": -1}.get(text[pos], 0)
      pos += 1
    if depth == 0:
      found = text[match.end():pos - 1].strip()
  return found
