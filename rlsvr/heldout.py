"""Held-out evaluation before and after training: `heldout.jsonl` and the console table.

An environment that can score the policy on held-out episodes implements
`Experiment.evaluate(sample, policy_params) -> dict[str, float]` (see
`rlsvr.envs.registry.Experiment`). With `heldout.size > 0` the trainer calls it
on the initial weights (step 0, a fresh run) and after the last step, with
sampler keys fixed by (seed, call) so both evaluations draw the same random
numbers: the difference between them is the training, not the noise of
sampling. A value `k` may come with its standard error as `k/se`.

Each evaluation is one JSON line `{"step": s, "time": t, ...}`; a resumed run
drops the lines past its restored step (`rewind`), like every other output.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping, Sequence

from rlsvr.eval.runner import mean_stderr

FILE = "heldout.jsonl"
SE = "/se"


def with_se(name: str, values: Sequence[float]) -> dict[str, float]:
  """{name: mean, name/se: standard error} of per-episode values."""
  mean, se = mean_stderr(values)
  return {name: mean, name + SE: se}


def read(workdir: str) -> list[dict[str, Any]]:
  path = os.path.join(workdir, FILE)
  if not os.path.exists(path):
    return []
  out = []
  with open(path) as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:  # A torn last line of a killed run.
        continue
  return out


def write(workdir: str, step: int, result: Mapping[str, float]) -> dict[str, Any]:
  record = {"step": step, "time": time.time(), **{k: float(v) for k, v in result.items()}}
  with open(os.path.join(workdir, FILE), "a") as f:
    f.write(json.dumps(record) + "\n")
  return record


def rewind(workdir: str, step: int) -> None:
  """Keeps the evaluations of steps <= `step` (the restored checkpoint)."""
  path = os.path.join(workdir, FILE)
  if not os.path.exists(path):
    return
  kept = [r for r in read(workdir) if r.get("step", -1) <= step]
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in kept)
  os.replace(tmp, path)


def _cell(record: Mapping[str, Any] | None, key: str) -> str:
  if record is None or key not in record:
    return "-"
  se = record.get(key + SE)
  return f"{record[key]:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def table(records: Sequence[Mapping[str, Any]]) -> str:
  """A text table: one row per metric, one column per evaluation (by step)."""
  if not records:
    return ""
  keys = [k for k in records[0] if k not in ("step", "time") and not k.endswith(SE)]
  for r in records[1:]:
    keys += [k for k in r if k not in keys and k not in ("step", "time") and not k.endswith(SE)]
  header = ["held-out"] + [f"step {r['step']}" for r in records]
  rows = [[k] + [_cell(r, k) for r in records] for k in keys]
  widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
  fmt = lambda row: "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
  return "\n".join([fmt(header), *map(fmt, rows)])
