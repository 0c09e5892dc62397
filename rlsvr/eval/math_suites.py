"""Math and reasoning benchmarks (the SpyRL table): loaders, prompts, extraction, scoring.

Datasets: gsm8k, math500, aime24, aime25, amc23, minerva_math (free-form
answers, equivalence by math-verify), mmlu_pro and gpqa_diamond (multiple
choice, letter match; GPQA is not shipped: give its CSV or "hub"). Every
prompt asks for the final answer in `\\boxed{}`; the last balanced box of a
response is its answer. pass@1 is averaged over `samples` responses per item.

math-verify parses untrusted text with SymPy, which can hang. So that a
verdict does not depend on the machine's load, the work is bounded by size,
not by the clock: a prediction over `MAX_ANSWER_CHARS`, with a power or
factorial of a number of four or more digits or a nested power
(`_HUGE_NUMBER`), or whose parsed expression has over `MAX_PARSED_NODES`
nodes, is wrong without being compared. math-verify's own signal timeouts
are off; comparisons run in killable worker processes
(`envs.self_judge.workers.WorkerPool`) whose time limit is a safety net: a
comparison that hits it counts as wrong and is counted (`scoring_timeouts`).
"""
from __future__ import annotations

import dataclasses
import random
import re
import threading
import zlib
from typing import Any, Callable, Sequence

from rlsvr.eval import data
from rlsvr.eval.data import HubSource

MAX_ANSWER_CHARS = 500
MAX_PARSED_NODES = 400
# 10^{12345}, 2^{3^{4}}, 1234!: numbers SymPy would compute exactly, at any cost.
_HUGE_NUMBER = re.compile(r"\^\s*\{?\s*[-+]?\d{4,}|\^\s*\{[^{}]*\^|\d{4,}\s*!|\*\*\s*\(?\s*\d{4,}")
_TAIL_CHARS = 400  # Unboxed responses: math-verify looks at this tail only.
_LETTERS = "ABCDEFGHIJ"
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MC_INSTRUCTION = ("Please reason step by step, and put the letter of your final answer "
                  "(e.g. \\boxed{A}) within \\boxed{}.")


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
                    str(data.first_field(row, question, "question")), _number(answer(row)))
  return convert


def _gsm8k_answer(row: dict[str, Any]) -> str:
  return str(row["answer"]).split("####")[-1].strip().replace(",", "")


def _minerva_answer(row: dict[str, Any]) -> str:
  if row.get("answer") not in (None, ""):
    return str(row["answer"])
  box = last_boxed(str(row["solution"]))
  if box is None:
    raise data.DataError("minerva_math: a solution has no \\boxed{} answer")
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
                  _LETTERS[options.index(correct)], tuple(options))


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
  """The items of dataset `name` from `spec` (see `rlsvr.eval.data`)."""
  if name not in SUITES:
    raise ValueError(f"unknown math dataset {name!r}; known: {sorted(SUITES)}")
  suite = SUITES[name]
  rows = data.load_rows(name, spec, local=suite.local, hub=suite.hub, limit=limit)
  return [suite.convert(row, i, seed) for i, row in enumerate(rows)]


def prompt(item: MathItem) -> str:
  if not item.choices:
    return f"{item.question}\n\n{INSTRUCTION}"
  options = "\n".join(f"{_LETTERS[k]}. {c}" for k, c in enumerate(item.choices))
  return (f"Answer the following multiple choice question.\n\n{item.question}\n\n{options}\n\n"
          f"{MC_INSTRUCTION}")


# ---------------------------------------------------------------- extraction

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


_TEXT_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_CHOICE_RE = re.compile(r"^\(?([A-J])\)?(?:$|[\s.:)])")
_ANSWER_IS_RE = re.compile(r"answer is:?\s*\(?\*{0,2}([A-J])\b")


def extract_choice(text: str, num_choices: int) -> str | None:
  """The chosen letter: from the last box ("B", "(B)", "\\text{B}", "B. 42"), else from the
  last "the answer is (B)"; None when absent or out of range."""
  box = last_boxed(text)
  letter = None
  if box is not None:
    match = _CHOICE_RE.match(_TEXT_WRAP_RE.sub(r"\1", box).strip())
    letter = match.group(1) if match else None
  else:
    hits = _ANSWER_IS_RE.findall(text[-2000:])
    letter = hits[-1] if hits else None
  return letter if letter is not None and letter in _LETTERS[:num_choices] else None


def _normalise(answer: str) -> str:
  text = _TEXT_WRAP_RE.sub(r"\1", answer)
  text = re.sub(r"\\[,!;: ]|\\left|\\right|\$|\s", "", text)
  return re.sub(r"\\[dt]frac", r"\\frac", text).rstrip(".")


# ---------------------------------------------------------------- equivalence


def equivalent(gold: str, prediction: str) -> bool:
  """math-verify's equivalence of a gold answer and a predicted answer (worker side).

  `prediction` is a box's content or, for unboxed responses, the response tail.
  """
  import logging  # noqa: PLC0415

  import math_verify  # noqa: PLC0415

  # The time limit is ours (the worker is killed); its "timeout disabled" notice is noise.
  logging.getLogger("math_verify").setLevel(logging.ERROR)
  if len(prediction) > MAX_ANSWER_CHARS + 10 or _HUGE_NUMBER.search(prediction):
    return False
  parsed_gold = math_verify.parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
  parsed_pred = math_verify.parse(prediction, parsing_timeout=None)
  if not parsed_gold or not parsed_pred or _too_large(parsed_pred):
    return False
  return bool(math_verify.verify(parsed_gold, parsed_pred, timeout_seconds=None))


def _too_large(parsed: Sequence[Any]) -> bool:
  import sympy  # noqa: PLC0415

  for item in parsed:
    if isinstance(item, sympy.Basic):
      for count, _ in enumerate(sympy.preorder_traversal(item), 1):
        if count > MAX_PARSED_NODES:
          return True
  return False


_POOL = None
_POOL_LOCK = threading.Lock()


def scoring_pool():
  """A process-wide pool of two math-verify workers, started on first use, closed at exit."""
  global _POOL
  with _POOL_LOCK:
    if _POOL is None:
      import atexit  # noqa: PLC0415

      from rlsvr.envs.self_judge import workers  # noqa: PLC0415

      _POOL = workers.WorkerPool(num_workers=2, preload=("math_verify", __name__))
      atexit.register(_POOL.close)
    return _POOL


def prediction_of(item: MathItem, response: str) -> str | None:
  """What a response answers: a letter (MC), a box's content, or None (no box)."""
  if item.choices:
    return extract_choice(response, len(item.choices))
  return last_boxed(response)


def score(items: Sequence[MathItem], responses: Sequence[Sequence[str]], *, pool=None,
          timeout: float = 10.0) -> list[dict[str, Any]]:
  """Per item: each response's prediction and correctness, and its pass@1 (mean)."""
  predictions = [[prediction_of(item, r) for r in rs] for item, rs in zip(items, responses)]
  correct = [[False] * len(rs) for rs in responses]
  timed_out = [[False] * len(rs) for rs in responses]
  todo = []  # (item, sample, gold, text) that need math-verify
  for i, item in enumerate(items):
    for k, (pred, response) in enumerate(zip(predictions[i], responses[i])):
      if item.choices:
        correct[i][k] = pred == item.answer
      elif pred is not None and _normalise(pred) == _normalise(item.answer):
        correct[i][k] = True
      else:
        todo.append((i, k, item.answer, f"\\boxed{{{pred}}}" if pred is not None else
                     response[-_TAIL_CHARS:]))
  if todo:
    outcomes = (pool or scoring_pool()).map(equivalent, [(g, t) for _, _, g, t in todo], timeout)
    for (i, k, _, _), outcome in zip(todo, outcomes):
      correct[i][k] = bool(outcome.ok and outcome.value)
      timed_out[i][k] = outcome.status == "timeout"
  return [dict(id=item.id, answer=item.answer, predictions=predictions[i], correct=correct[i],
               timed_out=timed_out[i],
               score=sum(correct[i]) / max(1, len(correct[i])), responses=list(responses[i]))
          for i, item in enumerate(items)]


def aggregate(records: Sequence[dict[str, Any]]) -> dict[str, float]:
  from rlsvr.eval.runner import percent_summary  # noqa: PLC0415

  metrics = percent_summary("accuracy", [r["score"] for r in records])
  metrics["boxed_rate"] = 100.0 * sum(p is not None for r in records for p in r["predictions"]) / (
      max(1, sum(len(r["predictions"]) for r in records)))
  metrics["scoring_timeouts"] = float(sum(sum(r.get("timed_out", ())) for r in records))
  return metrics


def evaluate(ctx) -> dict[str, Any]:
  """Every dataset of `ctx.c.datasets`: generate `samples` responses per item, score."""
  c = ctx.c
  results = {}
  for name in [d.strip() for d in c.datasets.split(",") if d.strip()]:
    items = load(name, c.data.get(name, ""), limit=c.limit, seed=c.seed)
    n = c.samples

    def run_batch(batch: list[MathItem]) -> list[dict[str, Any]]:
      texts = ctx.generate([prompt(item) for item in batch for _ in range(n)],
                           seed=zlib.crc32(batch[0].id.encode()))
      return score(batch, [texts[i * n:(i + 1) * n] for i in range(len(batch))],
                   timeout=c.scoring_timeout_s)

    keys = [f"{i}-{item.id}" for i, item in enumerate(items)]
    records, path = ctx.map(name, items, keys, run_batch)
    results[name] = dict(headline="accuracy", metrics=aggregate(records), records=path)
  return results
