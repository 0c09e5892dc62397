"""Text corpora for the spy tasks: hub datasets, local files, bundled documents.

Every source yields `Document`s (id, text). Any source works for any task
(corpus swap): `load_corpus(task, source)` picks the task's default field
when none is given.

- `"bundled"`: the small generated corpus in `rlsvr.data.bundled` (the only
  built-in one of the generated "facts" task).
- `"hub"`: the task's paper dataset, streamed with `datasets`.
- a path ending in .jsonl, .json or .parquet: a local file.
- any other string: a hub dataset name, streamed.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Any, Iterator

from rlsvr.data.bundled import BUNDLED


@dataclasses.dataclass(frozen=True)
class Document:
  """One source item of a game."""

  id: str
  text: str


@dataclasses.dataclass(frozen=True)
class HubSource:
  """A hub dataset: name, text field, optional config, split."""

  name: str
  field: str
  config: str | None = None
  split: str = "train"


# The paper's corpora (DESIGN.md, "Tasks and corpora").
TASK_SOURCES = {
    "summarisation": HubSource("ccdv/govreport-summarization", "report"),
    "writing": HubSource("euclaise/writingprompts", "prompt"),
    "math": HubSource("nvidia/Nemotron-CC-Math-v1", "text", config="3"),
}
_LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


class CorpusError(ValueError):
  """A corpus, file or field that cannot be read; the message names it."""


def bundled_corpus(task: str) -> list[Document]:
  """The bundled generated corpus of `task` (see `rlsvr.data.bundled`)."""
  if task not in BUNDLED:
    raise CorpusError(f"no bundled corpus for task {task!r}; have {sorted(BUNDLED)}")
  return [Document(f"{task}-{i}", text) for i, text in enumerate(BUNDLED[task])]


def _field(row: dict[str, Any], field: str, where: str, index: int) -> str:
  if field not in row:
    raise CorpusError(f"{where}: row {index} has no field {field!r}; fields are {sorted(row)}")
  value = row[field]
  if not isinstance(value, str):
    raise CorpusError(
        f"{where}: field {field!r} of row {index} is {type(value).__name__}, not text")
  return value


def _rows_jsonl(path: str) -> Iterator[dict[str, Any]]:
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, start=1):
      if line.strip():
        try:
          yield json.loads(line)
        except json.JSONDecodeError as e:
          raise CorpusError(f"{path}: line {line_no} is not JSON ({e})") from None


def _rows_json(path: str) -> Iterator[dict[str, Any]]:
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  if not isinstance(data, list):
    raise CorpusError(f"{path}: expected a JSON list of objects")
  yield from data


def _rows_parquet(path: str) -> Iterator[dict[str, Any]]:
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top  (comes with datasets)

  for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
    yield from batch.to_pylist()


def load_local(path: str, field: str, limit: int | None = None) -> Iterator[Document]:
  """Streams `field` of a local .jsonl, .json (a list) or .parquet file."""
  if not os.path.isfile(path):
    raise CorpusError(f"corpus file not found: {path}")
  readers = {".jsonl": _rows_jsonl, ".json": _rows_json, ".parquet": _rows_parquet}
  suffix = os.path.splitext(path)[1].lower()
  if suffix not in readers:
    raise CorpusError(f"{path}: unsupported corpus file type; use one of {_LOCAL_SUFFIXES}")
  rows = itertools.islice(readers[suffix](path), limit)
  for i, row in enumerate(rows):
    if not isinstance(row, dict):
      raise CorpusError(f"{path}: row {i} is not an object")
    yield Document(str(row.get("id", i)), _field(row, field, path, i))


def load_hub(source: HubSource, limit: int | None = None) -> Iterator[Document]:
  """Streams `source.field` of a hub dataset with `datasets` (no full download)."""
  import datasets  # pylint: disable=g-import-not-at-top  (slow import, hub runs only)

  where = f"dataset {source.name!r}" + (f" (config {source.config!r})" if source.config else "")
  try:
    stream = datasets.load_dataset(source.name, source.config, split=source.split, streaming=True)
  except Exception as e:  # datasets raises many types; all mean "cannot load"
    raise CorpusError(f"cannot load {where}, split {source.split!r}: {e}") from e
  for i, row in enumerate(itertools.islice(stream, limit)):
    yield Document(str(row.get("id", i)), _field(row, source.field, where, i))


def load_corpus(
    task: str,
    source: str = "bundled",
    *,
    field: str | None = None,
    config: str | None = None,
    split: str = "train",
    limit: int | None = None,
) -> Iterator[Document]:
  """Documents for `task` from `source` (see the module docstring).

  `field` defaults to the task's paper field (report / prompt / text);
  `config` applies to hub datasets (the task's default for `"hub"`).
  """
  if task not in TASK_SOURCES and task not in BUNDLED:
    raise CorpusError(f"unknown task {task!r}; expected one of "
                      f"{sorted(set(TASK_SOURCES) | set(BUNDLED))}")
  if source == "bundled":
    return iter(bundled_corpus(task)[:limit])
  default = TASK_SOURCES.get(task)  # Generated tasks (facts) have no paper dataset.
  field = field or (default.field if default else "text")
  if source == "hub":
    if default is None:
      raise CorpusError(f"task {task!r} has no hub dataset; use the bundled corpus or a local "
                        "file")
    return load_hub(HubSource(default.name, field, config or default.config, split), limit)
  if source.lower().endswith(_LOCAL_SUFFIXES) or os.path.exists(source):
    return load_local(source, field, limit)
  return load_hub(HubSource(source, field, config, split), limit)
