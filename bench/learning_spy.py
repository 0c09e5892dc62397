"""Does the spy game teach? The main job's training over several seeds, before and after.

  python bench/learning_spy.py                          # spy_summ.py:cpu, seeds 0,1,2
  python bench/learning_spy.py --seeds 0 --set steps=12 --set grpo.lr=3e-5
  python bench/learning_spy.py --config configs/spy_summ.py:cpu,reports --json out.json
  python bench/learning_spy.py --seeds 2 --merge seed0.json --merge seed1.json  # pool seeds

Trains `--config` once per seed through `rlsvr.train.train` (the trainer the
README's command runs; `--set key=value` overrides config keys) in
`--workdir/seed_N`, and reads what the runs wrote: `heldout.jsonl` (the
held-out games before and after training, with the scripted detectors'
ceiling, vote shares and the players' recall of the document, in the game and
with the plain task prompt) and `metrics.jsonl` (per step: phase, detection
accuracy, share of trained groups without reward spread, gradient norm).

Prints one table per seed and the mean over seeds (with the standard error
across seeds), and the training time per seed. A finished seed's workdir is
reused, so a rerun only reports (`--fresh` trains again). `--merge` adds the
seeds of earlier runs' `--json` files (the same recipe, other machines or
sessions) to the mean; their config and `--set` are printed beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_config  # noqa: E402

HELDOUT_KEYS = ("detect_acc", "caught", "ceiling/best_per_game", "ceiling/mask_chars",
                "ceiling/missed_consensus", "ceiling/least_recall", "vote_share_spy",
                "vote_share_civilian", "abstain_rate", "recall/civilian", "recall/spy",
                "plain_recall")


def train_seed(spec: str, seed: int, sets: list[str], workdir: str, fresh: bool) -> float:
  """Trains one seed unless its run finished; returns the training time in seconds."""
  from rlsvr import heldout, train  # noqa: PLC0415

  c = load_config(spec, sets)
  c.seed = seed
  if fresh and os.path.isdir(workdir):
    shutil.rmtree(workdir)
  done = [r for r in heldout.read(workdir) if r["step"] == c.steps]
  timing = os.path.join(workdir, "bench_seconds.txt")
  if done and os.path.exists(timing):
    return float(open(timing).read())
  t0 = time.time()
  train.train(c, workdir)
  seconds = round(time.time() - t0, 1)
  with open(timing, "w") as f:
    f.write(f"{seconds:.1f}")
  return seconds


def step_diagnostics(workdir: str) -> dict[str, float]:
  """Per phase: steps, mean detection accuracy, share of groups dropped, grad norm."""
  from rlsvr import metrics  # noqa: PLC0415

  rows = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  out: dict[str, float] = {}
  for phase, flag in (("decision", 1.0), ("clue", 0.0)):
    mine = [r for r in rows if r.get("spy/phase_decision") == flag]
    if not mine:
      continue
    kept = sum(r.get("filter/groups_kept", 0.0) for r in mine)
    dropped = sum(r.get("filter/groups_dropped", 0.0) for r in mine)
    out[f"{phase}/steps"] = float(len(mine))
    out[f"{phase}/detect_acc"] = float(np.mean([r["spy/detect_acc"] for r in mine]))
    # With dynamic sampling, the share of played groups it dropped; without it, every
    # group trains and the trainer logs the share without spread.
    out[f"{phase}/no_spread_share"] = (
        dropped / (kept + dropped) if kept + dropped else
        float(np.mean([r.get("frac_reward_zero_std", np.nan) for r in mine])))
    out[f"{phase}/grad_norm"] = float(np.mean([r.get("actor/grad_norm", np.nan) for r in mine]))
  out["step_s"] = float(np.mean([r["perf/step_s"] for r in rows]))
  return out


def seed_table(workdir: str) -> tuple[dict[str, float], dict[str, float]]:
  from rlsvr import heldout  # noqa: PLC0415

  records = heldout.read(workdir)
  return records[0], records[-1]


def fmt(record, key) -> str:
  if key not in record:
    return "-"
  se = record.get(key + "/se")
  return f"{record[key]:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/spy_summ.py:cpu")
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--set", action="append", default=[], help="config key=value")
  parser.add_argument("--workdir", default="/tmp/rlsvr_learning_spy")
  parser.add_argument("--fresh", action="store_true")
  parser.add_argument("--json", default=None)
  parser.add_argument("--merge", action="append", default=[],
                      help="an earlier run's --json: its seeds join the table and the mean")
  args = parser.parse_args()

  seeds = [int(s) for s in args.seeds.split(",") if s]
  results: dict[int, dict] = {}
  merged = []
  for path in args.merge:
    with open(path) as f:
      earlier = json.load(f)
    print(f"merged from {path}: {earlier['config']} {' '.join(earlier['set'])}")
    merged.append({"from": os.path.basename(path), "config": earlier["config"],
                   "set": earlier["set"], "seeds": sorted(map(int, earlier["seeds"]))})
    for seed, result in earlier["seeds"].items():
      if int(seed) in results or int(seed) in seeds:
        raise SystemExit(f"seed {seed} of {path} is already in the table")
      results[int(seed)] = result
  for seed in seeds:
    workdir = os.path.join(args.workdir, f"seed_{seed}")
    seconds = train_seed(args.config, seed, args.set, workdir, args.fresh)
    before, after = seed_table(workdir)
    results[seed] = {"train_s": seconds, "before": before, "after": after,
                     "steps": step_diagnostics(workdir)}
  for seed, result in sorted(results.items()):
    print_seed(seed, result)
  print_mean(results, f"{args.config} {' '.join(args.set)}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"config": args.config, "set": args.set, "seeds": results,
                 **({"merged": merged} if merged else {})}, f, indent=1)


def print_seed(seed: int, result: dict) -> None:
  before, after = result["before"], result["after"]
  print(f"\n== seed {seed}: {result['train_s'] / 60:.1f} min of training (held-out "
        f"evaluations included), steps {before['step']} -> {after['step']}")
  width = max(map(len, HELDOUT_KEYS))
  for key in HELDOUT_KEYS:
    print(f"  {key.ljust(width)}  {fmt(before, key):>15}  ->  {fmt(after, key):>15}")
  for key, value in result["steps"].items():
    print(f"  {key.ljust(width)}  {value:.3f}")


def print_mean(results: dict[int, dict], title: str) -> None:
  seeds = sorted(results)
  width = max(map(len, HELDOUT_KEYS))
  print(f"\n== {title}: mean over seeds {seeds} (± standard error across seeds)")
  for key in HELDOUT_KEYS:
    cells = []
    for when in ("before", "after"):
      values = [results[s][when][key] for s in seeds if key in results[s][when]]
      se = np.std(values, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
      cells.append(f"{np.mean(values):.3f} ± {se:.3f}" if values else "-")
    print(f"  {key.ljust(width)}  {cells[0]:>15}  ->  {cells[1]:>15}")
  print("  training minutes per seed: "
        + ", ".join(f"{results[s]['train_s'] / 60:.1f}" for s in seeds))

if __name__ == "__main__":
  main()
