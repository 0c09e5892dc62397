"""Runs an evaluation suite: resumable per-item cache, progress bars, results files.

  results = runner.run(config, workdir)

writes into `workdir`:
  results.json         config, model, per-dataset metrics and the records file of each
  results.md           one markdown table: dataset, metric, value
  cache/<name>-<fingerprint>.jsonl
                       one scored record per item, appended as items finish; a rerun
                       with the same settings skips the items already there
  comparison.md/.png   with `config.baseline` (an earlier results.json or its folder):
                       baseline and model side by side, and a bar chart of the headline
                       metric of each dataset

The fingerprint hashes every setting that changes a record (model, sampling,
data, judge), not the ones that only select items (`limit`) or route output.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import time
from typing import Any, Callable, Sequence

_NOT_FINGERPRINTED = ("limit", "batch_size", "workdir", "baseline", "progress")


class ItemCache:
  """Append-only JSONL of finished records, keyed by `record["key"]`."""

  def __init__(self, path: str | os.PathLike[str]):
    self.path = pathlib.Path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._records: dict[str, dict[str, Any]] = {}
    if self.path.exists():
      with open(self.path, encoding="utf-8") as f:
        for line in f:
          try:
            record = json.loads(line)
          except json.JSONDecodeError:
            continue  # a line cut short by a crash: that item is redone
          self._records[record["key"]] = record

  def __contains__(self, key: str) -> bool:
    return key in self._records

  def __len__(self) -> int:
    return len(self._records)

  def get(self, key: str) -> dict[str, Any]:
    return self._records[key]

  def put(self, key: str, record: dict[str, Any]) -> None:
    record = {"key": key, **record}
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")
    self._records[key] = record


def public_config(config_dict: dict[str, Any]) -> dict[str, Any]:
  """The config without secrets (an HTTP judge's API key), as written to results.json."""
  out = {}
  for key, value in config_dict.items():
    if isinstance(value, dict):
      value = public_config(value)
    elif key == "api_key" and value:
      value = "<set>"
    out[key] = value
  return out


def fingerprint(config_dict: dict[str, Any]) -> str:
  kept = {k: v for k, v in public_config(config_dict).items() if k not in _NOT_FINGERPRINTED}
  return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclasses.dataclass
class Context:
  """What a suite needs from the runner: config, generators (built on first use), caches."""

  c: Any
  workdir: pathlib.Path
  _generators: dict[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def fingerprint(self) -> str:
    return fingerprint(self.c.to_dict())

  def generator(self, role: str = "model"):
    """The Generator of `c.model` ("model"), `c.base_model` ("base") or `c.judge.model`
    ("judge"; "" means the evaluated model judges)."""
    if role == "judge" and not self.c.judge.model:
      role = "model"
    if role not in self._generators:
      from rlsvr.eval import generation  # noqa: PLC0415  (pulls in jax)

      c = self.c
      model, tokenizer = {"model": (c.model, c.tokenizer),
                          "base": (c.get("base_model", ""), c.get("base_tokenizer", "")),
                          "judge": (c.judge.get("model", ""), c.judge.get("tokenizer", ""))}[role]
      if not model:
        raise ValueError(f"no model for role {role!r}: set the config key")
      self._generators[role] = generation.build(
          model, tokenizer=tokenizer, dtype=c.dtype, seed=c.seed, step=c.get("step") or None,
          max_prompt_tokens=c.max_prompt_tokens, batch_size=c.batch_size)
    return self._generators[role]

  def generate(self, prompts: Sequence[Any], *, role: str = "model", seed: int = 0,
               **overrides: Any) -> list[str]:
    """Responses with the config's sampling settings (`overrides` win)."""
    s = dict(max_new_tokens=self.c.sampling.max_new_tokens,
             temperature=self.c.sampling.temperature, top_p=self.c.sampling.top_p)
    s.update(overrides)
    return self.generator(role)(list(prompts), seed=self.c.seed * 7919 + seed, **s)

  def cache(self, name: str) -> ItemCache:
    return ItemCache(self.workdir / "cache" / f"{name}-{self.fingerprint}.jsonl")

  def map(self, name: str, items: Sequence[Any], keys: Sequence[str],
          fn: Callable[[list[Any]], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], str]:
    """Records of every item in order; `fn` scores a batch of items not yet cached.

    Returns the records and the cache file that holds them.
    """
    from tqdm import tqdm  # noqa: PLC0415

    if len(set(keys)) != len(keys):
      raise ValueError(f"{name}: item keys are not unique")
    cache = self.cache(name)
    todo = [i for i, k in enumerate(keys) if k not in cache]
    step = max(1, self.c.batch_size)
    with tqdm(total=len(items), initial=len(items) - len(todo), desc=name, unit="item",
              disable=not self.c.get("progress", True), dynamic_ncols=True) as bar:
      for start in range(0, len(todo), step):
        chunk = todo[start:start + step]
        records = fn([items[i] for i in chunk])
        if len(records) != len(chunk):
          raise ValueError(f"{name}: {len(records)} records for {len(chunk)} items")
        for i, record in zip(chunk, records):
          cache.put(keys[i], record)
        bar.update(len(chunk))
    return [cache.get(k) for k in keys], str(cache.path)


# ---------------------------------------------------------------- statistics


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
  """Mean and its standard error (0 for fewer than two values)."""
  n = len(values)
  if n == 0:
    return float("nan"), float("nan")
  mean = sum(values) / n
  if n < 2:
    return mean, 0.0
  var = sum((v - mean) ** 2 for v in values) / (n - 1)
  return mean, math.sqrt(var / n)


def percent_summary(name: str, values: Sequence[float]) -> dict[str, float]:
  """`name`, `name_stderr` and a 95% normal interval, in percent, plus `n`."""
  mean, se = mean_stderr([100.0 * v for v in values])
  return {name: mean, f"{name}_stderr": se, f"{name}_ci95_low": max(0.0, mean - 1.96 * se),
          f"{name}_ci95_high": min(100.0, mean + 1.96 * se), "n": len(values)}


# ---------------------------------------------------------------- reports


def _fmt(value: Any) -> str:
  if isinstance(value, float):
    return "nan" if math.isnan(value) else f"{value:.2f}"
  return str(value)


def markdown_table(results: dict[str, Any]) -> str:
  lines = [f"# {results['suite']}: {results['model']}", "", "| dataset | metric | value |",
           "|---|---|---|"]
  for dataset, r in results["datasets"].items():
    for metric, value in r["metrics"].items():
      lines.append(f"| {dataset} | {metric} | {_fmt(value)} |")
  return "\n".join(lines) + "\n"


def load_results(path: str) -> dict[str, Any]:
  """A results.json, given the file or the folder holding it."""
  p = pathlib.Path(path)
  p = p / "results.json" if p.is_dir() else p
  with open(p, encoding="utf-8") as f:
    return json.load(f)


def comparison_table(results: dict[str, Any], baseline: dict[str, Any]) -> str:
  lines = [f"# {results['suite']}: {results['model']} vs baseline {baseline['model']}", "",
           "| dataset | metric | baseline | model | delta |", "|---|---|---|---|---|"]
  for dataset, r in results["datasets"].items():
    base = baseline.get("datasets", {}).get(dataset, {}).get("metrics", {})
    for metric, value in r["metrics"].items():
      b = base.get(metric)
      both = isinstance(value, (int, float)) and isinstance(b, (int, float))
      lines.append(f"| {dataset} | {metric} | {_fmt(b) if b is not None else '-'} | "
                   f"{_fmt(value)} | {_fmt(float(value - b)) if both else '-'} |")
  return "\n".join(lines) + "\n"


def comparison_plot(results: dict[str, Any], baseline: dict[str, Any], path: str) -> None:
  """Bars of each dataset's headline metric, baseline next to model, with stderr whiskers."""
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  names, bars = [], {"baseline": ([], []), "model": ([], [])}
  for dataset, r in results["datasets"].items():
    metric = r["headline"]
    base = baseline.get("datasets", {}).get(dataset, {}).get("metrics", {})
    names.append(f"{dataset}\n{metric}")
    for who, metrics in (("baseline", base), ("model", r["metrics"])):
      bars[who][0].append(float(metrics.get(metric, float("nan"))))
      bars[who][1].append(float(metrics.get(f"{metric}_stderr", 0.0)))
  fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(names)), 3.5))
  for k, (who, (values, errors)) in enumerate(bars.items()):
    xs = [i + (k - 0.5) * 0.4 for i in range(len(names))]
    ax.bar(xs, values, width=0.4, yerr=errors, capsize=3,
           label=baseline["model"] if who == "baseline" else results["model"])
  ax.set_xticks(range(len(names)), names, fontsize=8)
  ax.set_title(results["suite"])
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write_results(results: dict[str, Any], workdir: pathlib.Path, baseline: str = "") -> None:
  workdir.mkdir(parents=True, exist_ok=True)
  with open(workdir / "results.json", "w", encoding="utf-8") as f:
    json.dump(results, f, indent=1, ensure_ascii=False, default=str)
  (workdir / "results.md").write_text(markdown_table(results), encoding="utf-8")
  if baseline:
    base = load_results(baseline)
    (workdir / "comparison.md").write_text(comparison_table(results, base), encoding="utf-8")
    comparison_plot(results, base, str(workdir / "comparison.png"))


SUITES = ("math", "summ", "pairwise", "rlsr")


def run(c, workdir: str | os.PathLike[str]) -> dict[str, Any]:
  """Evaluates `c.model` on the suite `c.suite`; writes and returns the results."""
  if c.suite not in SUITES:
    raise ValueError(f"suite={c.suite!r} is not one of {SUITES}")
  import importlib  # noqa: PLC0415

  module = importlib.import_module(f"rlsvr.eval.{c.suite}_suites" if c.suite != "pairwise"
                                   else "rlsvr.eval.pairwise")
  if c.get("baseline", ""):
    load_results(c.baseline)  # fail before the evaluation, not after it
  ctx = Context(c, pathlib.Path(workdir))
  start = time.time()
  datasets = module.evaluate(ctx)
  results = {"suite": c.suite, "model": c.model, "fingerprint": ctx.fingerprint,
             "seconds": round(time.time() - start, 1), "config": public_config(c.to_dict()),
             "datasets": datasets}
  write_results(results, ctx.workdir, c.get("baseline", ""))
  return results
