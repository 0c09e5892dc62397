"""Math and reasoning benchmarks (the SpyRL table): prompts, extraction, scoring.

Datasets (`rlsvr.data.math_datasets`): gsm8k, math500, aime24, aime25, amc23,
minerva_math (free-form answers, equivalence by math-verify), mmlu_pro and
gpqa_diamond (multiple choice, letter match; GPQA is not shipped: give its CSV
or "hub"). Every prompt asks for the final answer in `\\boxed{}`; the last
balanced box of a response is its answer (`math_datasets.last_boxed`). pass@1
is averaged over `samples` responses per item.

math-verify parses untrusted text with SymPy, which can hang. So that a
verdict does not depend on the machine's load, the work is bounded by size,
not by the clock: a prediction over `MAX_ANSWER_CHARS`, with a power or
factorial of a number of four or more digits or a nested power
(`_HUGE_NUMBER`), or whose parsed expression has over `MAX_PARSED_NODES`
nodes, is wrong without being compared. math-verify's own signal timeouts
are off; comparisons run in killable worker processes
(`rlsvr.workers.WorkerPool`) whose time limit is a safety net: a
comparison that hits it counts as wrong and is counted (`scoring_timeouts`).
"""
from __future__ import annotations

import re
import threading
import zlib
from typing import Any, Sequence

from rlsvr.data import math_datasets
from rlsvr.data.math_datasets import LETTERS, MAX_ANSWER_CHARS, MathItem, last_boxed

MAX_PARSED_NODES = 400
# 10^{12345}, 2^{3^{4}}, 1234!: numbers SymPy would compute exactly, at any cost.
_HUGE_NUMBER = re.compile(r"\^\s*\{?\s*[-+]?\d{4,}|\^\s*\{[^{}]*\^|\d{4,}\s*!|\*\*\s*\(?\s*\d{4,}")
_TAIL_CHARS = 400  # Unboxed responses: math-verify looks at this tail only.
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MC_INSTRUCTION = ("Please reason step by step, and put the letter of your final answer "
                  "(e.g. \\boxed{A}) within \\boxed{}.")


def prompt(item: MathItem) -> str:
  if not item.choices:
    return f"{item.question}\n\n{INSTRUCTION}"
  options = "\n".join(f"{LETTERS[k]}. {c}" for k, c in enumerate(item.choices))
  return (f"Answer the following multiple choice question.\n\n{item.question}\n\n{options}\n\n"
          f"{MC_INSTRUCTION}")


# ---------------------------------------------------------------- extraction

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
  return letter if letter is not None and letter in LETTERS[:num_choices] else None


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

      from rlsvr import workers  # noqa: PLC0415

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
    items = math_datasets.load(name, c.data.get(name, ""), limit=c.limit, seed=c.seed)
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
