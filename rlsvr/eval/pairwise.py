"""Pairwise A/B win rate of a model against its base, decided by a judge.

Both models answer every item; the judge sees both answers twice, once in
each order (model first, base first), and names the better one per
criterion. A win scores 1, a tie 0.5, a loss 0 (from the model's side); an
item's score averages its valid orders and the win rate averages items.
Summarisation is judged overall; creative writing (writingprompts,
writingbench) on novelty, emotion, coherence, consistency and overall.

The judge is either an OpenAI-compatible HTTP endpoint (`HttpJudge`: base URL,
model and key from the config or $OPENAI_BASE_URL, $RLSVR_JUDGE_MODEL,
$OPENAI_API_KEY; timeouts and retries) or a local model through our sampler.
A judgement that fails (transport error, unparseable reply) is kept in the
records with its error and counted in `failures/<criterion>`; it never
silently becomes a tie or a loss.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Sequence

from rlsvr.data import sources
from rlsvr.eval import summ_suites
from rlsvr.eval.generation import Prompt

WRITING_CRITERIA = ("novelty", "emotion", "coherence", "consistency", "overall")
SUMMARY_CRITERIA = ("overall",)
_POINTS = {"model": 1.0, "tie": 0.5, "base": 0.0}


@dataclasses.dataclass(frozen=True)
class PairItem:
  """A task both models answer: a document to summarise or a writing prompt."""

  id: str
  task: str  # "summarisation" | "writing"
  prompt: str | Prompt
  source: str  # What the judge is shown of the task.


def _writing_items(rows: list[dict[str, Any]], field: tuple[str, ...]) -> list[PairItem]:
  items = []
  for i, row in enumerate(rows):
    text = str(sources.first_field(row, field, "writing")).strip()
    text = re.sub(r"^\[\s*WP\s*\]\s*", "", text)  # WritingPrompts' tag
    ask = text if "query" in row else f"Write a short story for this prompt:\n\n{text}"
    items.append(PairItem(str(row.get("row_id", row.get("index", i))), "writing", ask, text))
  return items


_WRITING = {
    "writingprompts": ("writingprompts/writingprompts_100.jsonl",
                       sources.HubSource("euclaise/writingprompts"), ("prompt",)),
    "writingbench": ("writingbench/length_subset.jsonl", None, ("query",)),
}
DATASETS = summ_suites.DATASETS + tuple(_WRITING)


def load(name: str, spec: str = "", *, limit: int = 0) -> list[PairItem]:
  if name in _WRITING:
    local, hub, field = _WRITING[name]
    return _writing_items(sources.load_rows(name, spec, local=local, hub=hub, limit=limit), field)
  return [PairItem(s.id, "summarisation", summ_suites.prompt(name, s),
                   (f"Query: {s.query}\n\n" if s.query else "") + s.document)
          for s in summ_suites.load(name, spec, limit=limit)]


def criteria_of(item: PairItem) -> tuple[str, ...]:
  return WRITING_CRITERIA if item.task == "writing" else SUMMARY_CRITERIA


# ---------------------------------------------------------------- judge prompt and parsing

_DEFINITIONS = {
    "novelty": "originality of ideas, premise and expression",
    "emotion": "emotional depth and how strongly it engages the reader",
    "coherence": "logical flow and clear structure",
    "consistency": "consistency of characters, facts and tone, and faithfulness to the prompt",
    "overall": "overall quality",
}


def judge_prompt(item: PairItem, first: str, second: str, *, max_source_chars: int = 12000) -> str:
  criteria = criteria_of(item)
  what = "summaries of the document" if item.task == "summarisation" else "responses to the prompt"
  source = item.source[:max_source_chars]
  listed = "\n".join(f"- {c}: {_DEFINITIONS[c]}" for c in criteria)
  lines = "\n".join(f"{c}: A, B or tie" for c in criteria)
  return (f"You compare two {what} below. Judge them on:\n{listed}\n\n"
          f"[Task]\n{source}\n\n[Response A]\n{first}\n\n[Response B]\n{second}\n\n"
          "Do not let the order or the length of the responses sway you. After a brief "
          f"explanation, end with exactly these lines:\n{lines}")


def parse_judgement(text: str, criteria: Sequence[str]) -> dict[str, str]:
  """{criterion: "A" | "B" | "tie"} from the last `criterion: X` line of each criterion."""
  out = {}
  for criterion in criteria:
    hits = re.findall(rf"(?im)^[\s*#-]*{criterion}\**\s*:\s*\**\s*(A|B|tie)\b", text[-20000:])
    if hits:
      out[criterion] = "tie" if hits[-1].lower() == "tie" else hits[-1].upper()
  return out


# ---------------------------------------------------------------- judges


@dataclasses.dataclass(frozen=True)
class Reply:
  """A judge's raw reply, or why there is none."""

  text: str | None
  error: str = ""


class HttpJudge:
  """Chat completions from an OpenAI-compatible endpoint (stdlib `urllib`, thread pool).

  Retries transport errors, timeouts, 408/409/429 and 5xx with exponential
  backoff (honouring a short Retry-After); other HTTP errors and malformed
  replies fail at once. Never raises for one request: failures are `Reply`s.
  """

  def __init__(self, base_url: str = "", model: str = "", api_key: str = "", *,
               timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 1.0,
               max_tokens: int = 512, temperature: float = 0.0, workers: int = 4,
               max_reply_bytes: int = 1 << 20):
    self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL", "")).rstrip("/")
    self.model = model or os.environ.get("RLSVR_JUDGE_MODEL", "")
    self._key = api_key or os.environ.get("OPENAI_API_KEY", "")
    if not self.base_url or not self.model:
      raise ValueError("HTTP judge needs a base URL and a model (judge.base_url / judge.model "
                       "or $OPENAI_BASE_URL / $RLSVR_JUDGE_MODEL)")
    self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
    self.max_tokens, self.temperature = max_tokens, temperature
    self.workers, self.max_reply_bytes = workers, max_reply_bytes

  def _request(self, prompt: str) -> urllib.request.Request:
    body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": self.max_tokens, "temperature": self.temperature}).encode()
    headers = {"Content-Type": "application/json"}
    if self._key:
      headers["Authorization"] = f"Bearer {self._key}"
    return urllib.request.Request(f"{self.base_url}/chat/completions", data=body,
                                  headers=headers, method="POST")

  def complete(self, prompt: str) -> Reply:
    last = ""
    for attempt in range(self.retries + 1):
      wait = self.backoff_s * 2**attempt
      try:
        with urllib.request.urlopen(self._request(prompt), timeout=self.timeout_s) as response:
          raw = response.read(self.max_reply_bytes + 1)
        if len(raw) > self.max_reply_bytes:
          return Reply(None, f"reply larger than {self.max_reply_bytes} bytes")
        try:
          content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
          return Reply(None, f"malformed reply ({type(e).__name__}): {raw[:200]!r}")
        if not isinstance(content, str):
          return Reply(None, "reply content is not text")
        return Reply(content)
      except urllib.error.HTTPError as e:
        last = f"HTTP {e.code}"
        if e.code not in (408, 409, 429) and e.code < 500:
          return Reply(None, f"{last}: {e.read(300)!r}")
        retry_after = e.headers.get("Retry-After", "") if e.headers else ""
        if retry_after.isdigit():
          wait = min(float(retry_after), 30.0)
      except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
      if attempt < self.retries:
        time.sleep(wait)
    return Reply(None, f"failed after {self.retries + 1} attempts ({last})")

  def __call__(self, prompts: Sequence[str]) -> list[Reply]:
    with concurrent.futures.ThreadPoolExecutor(max(1, self.workers)) as pool:
      return list(pool.map(self.complete, prompts))


class LocalJudge:
  """A judge model through our sampler (a `Generator`, greedy by default)."""

  def __init__(self, generate: Callable[[list[str]], list[str]]):
    self.generate = generate

  def __call__(self, prompts: Sequence[str]) -> list[Reply]:
    return [Reply(text) for text in self.generate(list(prompts))]


# ---------------------------------------------------------------- A/B aggregation


def judge_pairs(judge: Callable[[Sequence[str]], list[Reply]], items: Sequence[PairItem],
                model_outputs: Sequence[str], base_outputs: Sequence[str]) -> list[dict[str, Any]]:
  """Per item: both orders' judgements and the model's score per criterion (None if all failed)."""
  prompts = []
  for item, ours, theirs in zip(items, model_outputs, base_outputs):
    prompts += [judge_prompt(item, ours, theirs), judge_prompt(item, theirs, ours)]
  replies = judge(prompts)
  records = []
  for i, item in enumerate(items):
    judgements, scores = [], {}
    for order, reply in zip(("model_first", "base_first"), replies[2 * i:2 * i + 2]):
      verdicts = parse_judgement(reply.text, criteria_of(item)) if reply.text is not None else {}
      first, second = ("model", "base") if order == "model_first" else ("base", "model")
      winners = {c: {"A": first, "B": second, "tie": "tie"}[v] for c, v in verdicts.items()}
      error = reply.error or ("" if len(verdicts) == len(criteria_of(item)) else
                              "unparseable: missing " + ", ".join(
                                  c for c in criteria_of(item) if c not in verdicts))
      judgements.append(dict(order=order, reply=reply.text, error=error, winners=winners))
    for criterion in criteria_of(item):
      points = [_POINTS[j["winners"][criterion]] for j in judgements if criterion in j["winners"]]
      scores[criterion] = sum(points) / len(points) if points else None
    records.append(dict(id=item.id, task=item.task, model_output=model_outputs[i],
                        base_output=base_outputs[i], judgements=judgements, scores=scores))
  return records


def aggregate(records: Sequence[dict[str, Any]]) -> dict[str, float]:
  """Win rate (percent, with stderr) per criterion, failures, and position consistency."""
  from rlsvr.eval.runner import mean_stderr  # noqa: PLC0415

  metrics: dict[str, float] = {}
  criteria = list(dict.fromkeys(c for r in records for c in r["scores"]))
  for criterion in criteria:
    scores = [100.0 * r["scores"][criterion] for r in records
              if r["scores"].get(criterion) is not None]
    mean, se = mean_stderr(scores)
    name = "win_rate" if criterion == "overall" else f"win_rate/{criterion}"
    metrics[name], metrics[f"{name}_stderr"] = mean, se
    metrics[f"failures/{criterion}"] = float(sum(
        criterion not in j["winners"] for r in records for j in r["judgements"]
        if criterion in r["scores"]))
  pairs = [r["judgements"] for r in records
           if all("overall" in j["winners"] for j in r["judgements"])]
  if pairs:
    metrics["position_consistency"] = 100.0 * sum(
        a["winners"]["overall"] == b["winners"]["overall"] for a, b in pairs) / len(pairs)
  metrics["judgements"] = float(sum(len(r["judgements"]) for r in records))
  metrics["n"] = float(len(records))
  return metrics


def make_judge(ctx) -> Callable[[Sequence[str]], list[Reply]]:
  j = ctx.c.judge
  if j.kind == "http":
    return HttpJudge(j.base_url, j.model, j.api_key, timeout_s=j.timeout_s,
                     retries=j.retries, backoff_s=j.backoff_s, max_tokens=j.max_new_tokens,
                     temperature=j.temperature, workers=j.workers)
  if j.kind != "local":
    raise ValueError(f"judge.kind={j.kind!r} is not 'http' or 'local'")
  return LocalJudge(lambda prompts: ctx.generate(prompts, role="judge",
                                                 max_new_tokens=j.max_new_tokens,
                                                 temperature=j.temperature))


def evaluate(ctx) -> dict[str, Any]:
  """Every dataset of `ctx.c.datasets`: model and base answer, the judge compares both ways."""
  c = ctx.c
  judge = make_judge(ctx)
  results = {}
  for name in [d.strip() for d in c.datasets.split(",") if d.strip()]:
    items = load(name, c.data.get(name, ""), limit=c.limit)

    def run_batch(batch: list[PairItem]) -> list[dict[str, Any]]:
      prompts = [item.prompt for item in batch]
      ours = [summ_suites.clean(t) for t in ctx.generate(prompts)]
      theirs = [summ_suites.clean(t) for t in ctx.generate(prompts, role="base")]
      return judge_pairs(judge, batch, ours, theirs)

    keys = [f"{i}-{item.id}" for i, item in enumerate(items)]
    records, path = ctx.map(name, items, keys, run_batch)
    results[name] = dict(headline="win_rate", metrics=aggregate(records), records=path)
  return results
