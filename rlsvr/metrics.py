"""Run outputs: console progress, `metrics.jsonl`, TensorBoard events, curve plots, rollouts."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
from typing import Any, Mapping

from rlsvr import heldout
from rlsvr.rl.rollout import EpisodeBatch

# Console columns: (metric, label, format); the environment's own go between the two.
# Missing metrics are skipped.
# `flat`: the share of played groups whose raw rewards are all equal (no learning signal);
# `kept`: under grpo.filter_groups, the groups with signal the update trains on.
_CONSOLE_HEAD = (("phase", "phase", "{}"), ("reward/mean", "reward", "{:+.3f}"),
                 ("frac_reward_zero_std", "flat", "{:.2f}"),
                 ("filter/groups_kept", "kept", "{:.0f}"),
                 ("actor/kl", "kl", "{:.4f}"), ("actor/pg_loss", "pg", "{:+.3f}"))
_CONSOLE_TAIL = (("perf/tokens_per_s", "tok/s", "{:.0f}"), ("perf/step_s", "s/step", "{:.1f}"))


def _scalar(v: Any) -> float | None:
  try:
    f = float(v)
  except (TypeError, ValueError):
    return None
  return f if math.isfinite(f) else None


def summary_writer():
  """tensorboardX's `SummaryWriter` class, imported without torch.

  tensorboardX imports torch when it is installed (2-4 s of every run's start-up, for
  tensor types that scalars never need); a torch that is not imported yet is hidden
  from that one import. A torch imported before (by a reward function, say) is left as
  it is.
  """
  if "torch" in sys.modules or "tensorboardX" in sys.modules:
    from tensorboardX import SummaryWriter  # noqa: PLC0415 (optional output)
    return SummaryWriter
  sys.modules["torch"] = None  # `import torch` raises ImportError, which tensorboardX allows.
  try:
    from tensorboardX import SummaryWriter  # noqa: PLC0415
  finally:
    del sys.modules["torch"]
  return SummaryWriter


class MetricsWriter:
  """Writes each step's metrics to the console, `metrics.jsonl` and TensorBoard.

  `enabled=False` (every process but the first of a multi-host run) writes nothing.
  """

  def __init__(self, workdir: str, total_steps: int, *,
               console: tuple[tuple[str, str, str], ...] = (), tensorboard: bool = True,
               wandb_project: str = "", run_config: Mapping[str, Any] | None = None,
               stream=None, enabled: bool = True):
    self.workdir = workdir
    self.total_steps = total_steps
    self.stream = stream or sys.stdout  # Looked up now: a redirected stdout is honoured.
    self.enabled = enabled
    self.columns = (*_CONSOLE_HEAD, *console, *_CONSOLE_TAIL)
    if not enabled:
      return
    self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")
    self.tb = None
    if tensorboard:
      self.tb = summary_writer()(os.path.join(workdir, "tb"))
    self.wandb = None
    if wandb_project:
      try:
        import wandb  # noqa: PLC0415
      except ImportError as e:
        raise RuntimeError("log.wandb_project is set but `wandb` is not installed") from e
      self.wandb = wandb.init(project=wandb_project, config=dict(run_config or {}), dir=workdir)
    self.start = time.time()
    self.first_step: int | None = None

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    if not self.enabled:
      return
    record = {"step": step, "time": time.time()}
    record.update({k: (v if isinstance(v, str) else _scalar(v)) for k, v in metrics.items()})
    self.jsonl.write(json.dumps(record) + "\n")
    self.jsonl.flush()
    scalars = {k: v for k, v in record.items() if isinstance(v, float) and k != "time"}
    if self.tb is not None:
      for k, v in scalars.items():
        self.tb.add_scalar(k, v, step)
      self.tb.flush()
    if self.wandb is not None:
      self.wandb.log(scalars, step=step)
    self._console(step, record)

  def _console(self, step: int, record: Mapping[str, Any]) -> None:
    if self.first_step is None:
      self.first_step, self.start = step - 1, time.time() - (record.get("perf/step_s") or 0)
    done = step - self.first_step
    per_step = (time.time() - self.start) / max(done, 1)
    eta = per_step * (self.total_steps - step)
    parts = [f"step {step}/{self.total_steps}"]
    for key, label, fmt in self.columns:
      if record.get(key) is not None:
        parts.append(f"{label} {fmt.format(record[key])}")
    parts.append(f"eta {eta / 60:.1f}m")
    print(" | ".join(parts), file=self.stream, flush=True)

  def close(self) -> None:
    if not self.enabled:
      return
    self.jsonl.close()
    if self.tb is not None:
      self.tb.close()
    if self.wandb is not None:
      self.wandb.finish()


def read_jsonl(path: str) -> list[dict[str, Any]]:
  """The records of a metrics.jsonl; a torn last line (crash mid-write) is skipped."""
  out = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return out


def _write_atomically(path: str, text: str) -> None:
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


def rewind(workdir: str, step: int) -> None:
  """Cuts every output of `workdir` back to `step` (the restored checkpoint; 0: none).

  A run killed after its last checkpoint logged steps that its rerun plays
  again: dropping them first means each step is logged exactly once (the
  held-out evaluations too).
  `metrics.jsonl` keeps one record per step <= `step` (the last written, torn
  lines dropped); TensorBoard's events, derived data, are rebuilt from it; the
  rollouts are cut by `RolloutWriter.rewind`.
  """
  heldout.rewind(workdir, step)
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return
  by_step = {r["step"]: r for r in read_jsonl(path) if 0 < r.get("step", 0) <= step}
  records = [by_step[s] for s in sorted(by_step)]
  _write_atomically(path, "".join(json.dumps(r) + "\n" for r in records))
  RolloutWriter(workdir).rewind(step)
  tb = os.path.join(workdir, "tb")
  if os.path.isdir(tb):
    shutil.rmtree(tb)
    # Its own file suffix: event files are named by the second they open in, and the run's
    # writer opens next.
    with summary_writer()(tb, filename_suffix=".replayed") as writer:
      for r in records:
        for k, v in r.items():
          if isinstance(v, float) and k not in ("step", "time"):
            writer.add_scalar(k, v, r["step"], walltime=r.get("time"))


# Curves worth a picture; an environment adds its own panels after the reward. Each panel
# shows the keys that exist.
PLOT_HEAD = (("reward", ("reward/mean",)),)
PLOT_TAIL = (("KL to reference", ("actor/kl",)), ("response length", ("response_length/mean",)))


def plot_curves(workdir: str, out_name: str = "curves.png",
                panels: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> str | None:
  """Plots the curves of `workdir/metrics.jsonl` to a PNG (`panels`: the environment's, as
  (title, metric keys)); returns its path, or None when nothing is plottable."""
  import matplotlib  # noqa: PLC0415
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  records = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  panels = [(title, [k for k in keys if any(r.get(k) is not None for r in records)])
            for title, keys in (*PLOT_HEAD, *panels, *PLOT_TAIL)]
  panels = [(t, ks) for t, ks in panels if ks]
  if not records or not panels:
    return None
  fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.5), squeeze=False)
  for ax, (title, keys) in zip(axes[0], panels):
    for k in keys:
      points = [(r["step"], r[k]) for r in records if r.get(k) is not None]
      ax.plot(*zip(*points), marker="o", markersize=3, label=k)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
  fig.suptitle(os.path.basename(os.path.normpath(workdir)))
  fig.tight_layout()
  path = os.path.join(workdir, out_name)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


class RolloutWriter:
  """Appends each step's `record_text` to `workdir/rollouts.txt` and writes its records.

  The records go to `workdir/rollouts/step_XXXXXXXX.jsonl`, one episode a line.
  The text file is flushed every step so `tail -f` follows training.
  `enabled=False` (every process but the first of a multi-host run) writes nothing.
  """

  def __init__(self, workdir: str, enabled: bool = True):
    self.workdir = workdir
    self.enabled = enabled
    if enabled:
      os.makedirs(os.path.join(workdir, "rollouts"), exist_ok=True)

  @property
  def text_path(self) -> str:
    return os.path.join(self.workdir, "rollouts.txt")

  def jsonl_path(self, step: int) -> str:
    return os.path.join(self.workdir, "rollouts", f"step_{step:08d}.jsonl")

  @property
  def index_path(self) -> str:
    """Where each step's text starts in rollouts.txt (byte offsets), for `rewind`."""
    return os.path.join(self.workdir, "rollouts", "index.jsonl")

  def write(self, step: int, batch: EpisodeBatch) -> None:
    if not self.enabled:
      return
    offset = os.path.getsize(self.text_path) if os.path.exists(self.text_path) else 0
    with open(self.index_path, "a", encoding="utf-8") as index:
      index.write(json.dumps({"step": step, "offset": offset}) + "\n")
    with open(self.text_path, "a", encoding="utf-8") as f:
      f.write(batch.record_text)
      f.flush()
    _write_atomically(self.jsonl_path(step), "".join(
        json.dumps(record, ensure_ascii=False) + "\n" for record in batch.records))

  def rewind(self, step: int) -> None:
    """Drops what was written for steps after `step`: the text past that step's end, the
    per-step JSONL files, their index entries."""
    steps = os.path.join(self.workdir, "rollouts")
    if not os.path.isdir(steps):
      return
    for name in os.listdir(steps):
      match = re.fullmatch(r"step_(\d+)\.jsonl(\.tmp)?", name)
      if match and (int(match.group(1)) > step or match.group(2)):
        os.remove(os.path.join(steps, name))
    index = read_jsonl(self.index_path) if os.path.exists(self.index_path) else []
    later = [e["offset"] for e in index if e["step"] > step]
    if later and os.path.exists(self.text_path):
      with open(self.text_path, "r+b") as f:
        f.truncate(min(later))
    elif step == 0 and os.path.exists(self.text_path):
      os.remove(self.text_path)
    if os.path.exists(self.index_path):
      _write_atomically(self.index_path, "".join(
          json.dumps(e) + "\n" for e in index if e["step"] <= step))
