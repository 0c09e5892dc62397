"""Where datasets come from: the shared data folder, local files, the HF hub.

The evaluation suites and the environments read their rows through here. A
dataset spec (e.g. `--config.data.<dataset>=SPEC` of an eval config) is one of:

  ""                     the dataset's file under the shared data folder
  "hub"                  the dataset's default hub name (needs network or the HF cache)
  "hub:<org/name>[:cfg]" another hub dataset (and config)
  <path>                 a local .jsonl, .json, .csv, .parquet or JSON-lines .txt file

The shared data folder is `$RLSVR_DATA` when set, else `../shared/data`
relative to the repository root. Data is read in place, never copied.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
from typing import Any

ENV_VAR = "RLSVR_DATA"
_REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


class DataError(ValueError):
  """A dataset that cannot be read; the message says which and how to fix it."""


@dataclasses.dataclass(frozen=True)
class HubSource:
  """A hub dataset: name, optional config, split."""

  name: str
  config: str | None = None
  split: str = "test"


def shared_data_dir() -> pathlib.Path:
  """`$RLSVR_DATA`, else `../shared/data` next to the repository."""
  return pathlib.Path(os.environ.get(ENV_VAR) or _REPO_ROOT.parent / "shared" / "data")


def shared_file(relative: str) -> pathlib.Path:
  """A file under the shared data folder; DataError naming the fix when it is absent."""
  path = shared_data_dir() / relative
  if not path.is_file():
    raise DataError(f"{path} not found: set ${ENV_VAR} to the shared data folder, or point "
                    "--config.data.<dataset> at a local file or 'hub'")
  return path


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
  """Rows of a local file: JSON lines (.jsonl/.txt), JSON (a list, or an object holding one
  under "problems"/"data"/"rows"), CSV or parquet."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(f"data file not found: {path}")
  suffix = path.suffix.lower()
  if suffix in (".jsonl", ".txt"):
    rows = []
    with open(path, encoding="utf-8") as f:
      for line_no, line in enumerate(f, 1):
        if line.strip():
          try:
            rows.append(json.loads(line))
          except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {line_no} is not JSON ({e})") from None
    return rows
  if suffix == ".json":
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
    if isinstance(data, dict):
      data = next((data[k] for k in ("problems", "data", "rows") if isinstance(data.get(k), list)),
                  None)
    if not isinstance(data, list):
      raise DataError(f"{path}: expected a JSON list of rows (or an object with 'problems')")
    return data
  if suffix == ".csv":
    with open(path, encoding="utf-8", newline="") as f:
      return list(csv.DictReader(f))
  if suffix == ".parquet":
    import pyarrow.parquet as pq  # noqa: PLC0415  (comes with datasets)

    return pq.read_table(path).to_pylist()
  raise DataError(f"{path}: unsupported file type {suffix!r} (.jsonl .json .csv .parquet .txt)")


def load_hub(source: HubSource, limit: int = 0) -> list[dict[str, Any]]:
  """Rows of a hub dataset; DataError at once when offline and not cached."""
  import datasets  # noqa: PLC0415  (slow import; hub runs only)

  where = f"hub dataset {source.name!r}" + (f" (config {source.config!r})" if source.config else "")
  try:
    split = f"{source.split}[:{limit}]" if limit else source.split
    return list(datasets.load_dataset(source.name, source.config, split=split))
  except Exception as e:  # noqa: BLE001  (datasets raises many types; all mean "cannot load")
    raise DataError(f"cannot load {where}, split {source.split!r} ({type(e).__name__}: "
                    f"{str(e)[:200]}). Offline? Point --config.data.<dataset> at a local file."
                    ) from None


def load_rows(dataset: str, spec: str, *, local: str | None, hub: HubSource | None,
              limit: int = 0) -> list[dict[str, Any]]:
  """Rows of `dataset` from `spec` (module docstring); `local` is the shared-folder file."""
  if spec.startswith("hub"):
    if spec == "hub":
      if hub is None:
        raise DataError(f"{dataset} has no hub dataset; give a local file")
      source = hub
    else:
      name, _, config = spec[len("hub:"):].partition(":")
      source = HubSource(name, config or None, hub.split if hub else "test")
    rows = load_hub(source, limit)
  elif spec:
    rows = read_rows(spec)
  elif local is None:
    raise DataError(f"{dataset} is not in the shared data folder: set --config.data.{dataset} "
                    "to a local file or 'hub'")
  else:
    rows = read_rows(shared_file(local))
  return rows[:limit] if limit else rows


def first_field(row: dict[str, Any], names: tuple[str, ...], where: str) -> Any:
  """The value of the first of `names` present in `row`."""
  for name in names:
    if row.get(name) not in (None, ""):
      return row[name]
  raise DataError(f"{where}: a row has none of the fields {names}; it has {sorted(row)}")
