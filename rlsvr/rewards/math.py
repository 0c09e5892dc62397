"""Math rewards: `accuracy` (math-verify against the gold answer) and `format` (a `\\boxed{}`).

  reward_funcs = "rlsvr.rewards.math:accuracy,rlsvr.rewards.math:format"

Both read the final answer the way the math benchmarks do
(`rlsvr.data.math_datasets.last_boxed`): the content of the last complete
`\\boxed{...}` (or `\\fbox{...}`), braces balanced, at most `MAX_ANSWER_CHARS` long.

Model output is hostile input: it is never evaluated here. `accuracy` hands
the comparison to math-verify in killable worker processes
(`math_suites.score`), bounded by input size first and by a wall-clock limit
as a safety net; an answer that hits the limit scores 0 and is counted in the
`rewards/timeouts` metric.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from rlsvr.data.math_datasets import MathItem, last_boxed
from rlsvr.eval import math_suites

ANSWER_TIMEOUT_S = 10.0  # Per comparison; sizes bound the work long before this.


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
  """The text of a completion: a string, or (conversational prompts) the last message's content."""
  if isinstance(completion, str):
    return completion
  return str(completion[-1]["content"]) if completion else ""


def gold_answer(gold: Any) -> str | None:
  """The final answer in a gold column: after GSM8K's `####`, else a solution's last box,
  else the value itself; None when empty."""
  if gold is None:
    return None
  if isinstance(gold, float) and gold.is_integer():
    gold = int(gold)  # AMC-style keys: 27.0 means "27"
  text = str(gold).strip()
  if "####" in text:
    text = text.rsplit("####", 1)[1].strip().replace(",", "")
  elif "\\boxed" in text or "\\fbox" in text:
    text = last_boxed(text) or text
  return text or None


def accuracy(completions: Sequence[Any], answer: Sequence[Any] | None = None,
             solution: Sequence[Any] | None = None,
             log_metric: Callable[[str, float], None] | None = None,
             **kwargs) -> list[float | None]:
  """1.0 when the final answer is equivalent to the gold one (math-verify), else 0.0.

  The gold answer is the `answer` column, else `solution` (TRL's name), read by
  `gold_answer` (GSM8K's "#### 42", MATH's boxed solutions, bare answers). A
  response without a box is compared by its last 400 characters (lenient, as
  the benchmarks score). A row whose gold is empty gets None (no reward, as
  TRL's `accuracy_reward` does for an unparseable gold).
  """
  del kwargs  # prompts, completion_ids, other columns: not needed
  golds = answer if answer is not None else solution
  if golds is None:
    raise ValueError("accuracy needs the gold answer in a dataset column named 'answer' or "
                     "'solution'")
  if len(golds) != len(completions):
    raise ValueError(f"{len(golds)} gold answers for {len(completions)} completions")
  texts = [completion_text(c) for c in completions]
  gold = [gold_answer(g) for g in golds]
  scored = [k for k, g in enumerate(gold) if g is not None]
  items = [MathItem(str(k), "", gold[k]) for k in scored]
  records = math_suites.score(items, [[texts[k]] for k in scored], timeout=ANSWER_TIMEOUT_S)
  rewards: list[float | None] = [None] * len(texts)
  for k, record in zip(scored, records):
    rewards[k] = float(record["correct"][0])
  if log_metric is not None:
    log_metric("rewards/timeouts", float(sum(r["timed_out"][0] for r in records)))
  return rewards


def format(completions: Sequence[Any], **kwargs) -> list[float]:  # noqa: A001 (TRL-style name)
  """1.0 when the completion has a final answer box `accuracy` can read, else 0.0.

  Checked: a complete `\\boxed{...}` or `\\fbox{...}` (balanced braces) whose
  content is non-empty after stripping whitespace and at most
  `MAX_ANSWER_CHARS` characters long. Not checked: whether the
  content parses as math, or what follows the box.
  """
  del kwargs
  return [float(bool(last_boxed(completion_text(c)))) for c in completions]
