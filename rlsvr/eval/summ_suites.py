"""Summarisation benchmarks (the SpyRL table): loaders, prompts, ROUGE-L.

Datasets and their local layouts (shared data folder, or the same layout anywhere):

  govreport    {document, reference} rows (debug_real / govreport_4docs; other
               `dataset` values are skipped), LongBench rows {context, answers},
               or hub ccdv/govreport-summarization {report, summary}
  multi_news   {document, reference} rows, or hub {document, summary}
  qmsum        QMSum meeting rows: every general and specific query becomes an
               item over the whole transcript (query-based summarisation)
  samsum       {dialogue, summary} rows
  vcsum        VCSum short_test rows (Chinese): a meeting segment's utterances,
               summarised as its `discussion`

ROUGE-L F1 (x100) is computed with `rouge-score`, stemming on; Chinese is
scored by characters (rouge-score's own tokenizer drops non-Latin text).
A response's `<think>...</think>` part is not scored.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Sequence

from rlsvr.data import sources
from rlsvr.data.sources import HubSource
from rlsvr.eval.generation import Prompt


@dataclasses.dataclass(frozen=True)
class SummItem:
  """A document to summarise (optionally for a query) and its reference summary."""

  id: str
  document: str
  reference: str
  query: str = ""
  language: str = "en"


_DOC_FIELDS = ("document", "report", "dialogue", "article", "context", "text")
_REF_FIELDS = ("reference", "summary", "answers", "highlights")


def _plain_rows(name: str, rows: list[dict[str, Any]]) -> list[SummItem]:
  items = []
  for i, row in enumerate(rows):
    if row.get("dataset") not in (None, name, name.replace("_", "")):
      continue  # mixed files (debug_real.jsonl) hold other datasets too
    reference = sources.first_field(row, _REF_FIELDS, name)
    if isinstance(reference, list):
      reference = reference[0]
    items.append(SummItem(str(row.get("id", row.get("_id", i))),
                          str(sources.first_field(row, _DOC_FIELDS, name)), str(reference)))
  return items


def _qmsum(rows: list[dict[str, Any]]) -> list[SummItem]:
  items = []
  for m, meeting in enumerate(rows):
    transcript = "\n".join(f"{t['speaker']}: {t['content']}" for t in meeting["meeting_transcripts"])
    queries = meeting.get("general_query_list", []) + meeting.get("specific_query_list", [])
    for q, query in enumerate(queries):
      items.append(SummItem(f"{m}-{q}", transcript, query["answer"], query=query["query"]))
  return items


def _listish(value: Any) -> Any:
  """VCSum stores some lists as Python-literal text."""
  return ast.literal_eval(value) if isinstance(value, str) else value


def _vcsum(rows: list[dict[str, Any]]) -> list[SummItem]:
  items = []
  for i, row in enumerate(rows):
    context = _listish(row["context"])
    speakers = _listish(row.get("speaker")) or [None] * len(context)
    turns = [("" if s is None else f"{s}: ") + "".join(u if isinstance(u, list) else [u])
             for s, u in zip(speakers, context)]
    items.append(SummItem(str(row.get("id", i)), "\n".join(turns), str(row["discussion"]),
                          language="zh"))
  return items


_SUITES = {
    "govreport": ("govreport/govreport_4docs.jsonl",
                  HubSource("ccdv/govreport-summarization"), "government report"),
    "multi_news": ("multi_news/multinews_representative.jsonl",
                   HubSource("alexfabbri/multi_news"), "set of news articles"),
    "qmsum": ("qmsum/test.jsonl", None, "meeting transcript"),
    "samsum": ("samsum/test.jsonl", HubSource("knkarthick/samsum"), "chat dialogue"),
    "vcsum": ("vcsum/short_test.txt", None, "meeting transcript"),
}
DATASETS = tuple(_SUITES)


def load(name: str, spec: str = "", *, limit: int = 0) -> list[SummItem]:
  """The items of dataset `name` from `spec` (see `rlsvr.data.sources`)."""
  if name not in _SUITES:
    raise ValueError(f"unknown summarisation dataset {name!r}; known: {list(_SUITES)}")
  local, hub, _ = _SUITES[name]
  # QMSum expands one meeting into many items: cut after expanding.
  rows = sources.load_rows(name, spec, local=local, hub=hub,
                        limit=0 if name in ("qmsum", "govreport") else limit)
  items = {"qmsum": _qmsum, "vcsum": _vcsum}.get(name, lambda r: _plain_rows(name, r))(rows)
  return items[:limit] if limit else items


def prompt(name: str, item: SummItem) -> Prompt:
  """The generation prompt; the document is the part cut to fit the context."""
  if item.language == "zh":
    return Prompt("请阅读以下会议片段：\n\n", item.document,
                  "\n\n请用中文简要总结这段会议的讨论内容，直接给出摘要。")
  kind = _SUITES[name][2] if name in _SUITES else "document"
  if item.query:
    return Prompt(f"Read the following {kind}.\n\n", item.document,
                  f"\n\nAnswer the following query in a few sentences: {item.query}")
  return Prompt(f"Summarize the following {kind}.\n\n", item.document,
                "\n\nWrite a concise summary covering its key points. Output only the summary.")


_THINK_RE = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def clean(response: str) -> str:
  """The scored part of a response: without its thinking, trimmed."""
  return _THINK_RE.sub("", response).strip()


class _CharTokenizer:
  """One token per non-space character: how Chinese summaries are scored."""

  def tokenize(self, text: str) -> list[str]:
    return [ch for ch in text if not ch.isspace()]


def rouge_l(predictions: Sequence[str], references: Sequence[str],
            language: str = "en") -> list[float]:
  """ROUGE-L F1 per pair, in percent; `language="zh"` scores characters."""
  from rouge_score import rouge_scorer  # noqa: PLC0415

  if language == "zh":
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_CharTokenizer())
  else:
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
  return [100.0 * scorer.score(ref, pred)["rougeL"].fmeasure
          for pred, ref in zip(predictions, references)]


def evaluate(ctx) -> dict[str, Any]:
  """Every dataset of `ctx.c.datasets`: one summary per item, ROUGE-L against the reference."""
  from rlsvr.eval.runner import mean_stderr  # noqa: PLC0415

  c = ctx.c
  results = {}
  for name in [d.strip() for d in c.datasets.split(",") if d.strip()]:
    items = load(name, c.data.get(name, ""), limit=c.limit)

    def run_batch(batch: list[SummItem], name=name) -> list[dict[str, Any]]:
      responses = ctx.generate([prompt(name, item) for item in batch])
      summaries = [clean(r) for r in responses]
      records = []
      for item, response, summary in zip(batch, responses, summaries):
        score = rouge_l([summary], [item.reference], item.language)[0]
        records.append(dict(id=item.id, query=item.query, reference=item.reference,
                            response=response, rougeL=score))
      return records

    keys = [f"{i}-{item.id}" for i, item in enumerate(items)]
    records, path = ctx.map(name, items, keys, run_batch)
    mean, se = mean_stderr([r["rougeL"] for r in records])
    results[name] = dict(headline="rougeL", records=path,
                         metrics={"rougeL": mean, "rougeL_stderr": se, "n": len(records)})
  return results
