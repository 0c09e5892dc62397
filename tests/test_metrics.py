"""Run outputs: JSONL survives torn lines, console shows progress, plots are written."""
import io
import json
import os

from rlsvr import metrics


def test_writer_outputs_and_plot(tmp_path):
  stream = io.StringIO()
  writer = metrics.MetricsWriter(str(tmp_path), total_steps=3, stream=stream)
  for step in (1, 2, 3):
    writer.write(step, {"reward/mean": 0.1 * step, "actor/kl": 0.01, "phase": "clue",
                        "spy/detect_acc": step / 3, "perf/step_s": 2.0, "nan": float("nan")})
  writer.close()
  lines = stream.getvalue().splitlines()
  assert lines[0].startswith("step 1/3") and "reward +0.100" in lines[0] and "eta" in lines[0]
  records = metrics.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2, 3]
  assert records[0]["nan"] is None and records[0]["phase"] == "clue"
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))
  png = metrics.plot_curves(str(tmp_path))
  assert png and os.path.getsize(png) > 1000


def test_torn_last_line_is_skipped(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "rew')
  assert metrics.read_jsonl(str(path)) == [{"step": 1}]
  assert metrics.plot_curves(str(tmp_path)) is None  # nothing plottable


def test_tensorboard_scalars_are_written_without_importing_torch(tmp_path):
  """A run's start-up does not pay for torch (2-4 s) to write scalars; a torch imported
  later in the same process still works."""
  import subprocess
  import sys

  code = f"""
import sys
from rlsvr import metrics
w = metrics.MetricsWriter({str(tmp_path)!r}, total_steps=1, stream=open("/dev/null", "w"))
w.write(1, {{"reward/mean": 0.5}})
w.close()
assert "torch" not in sys.modules, "torch was imported"
import torch
assert torch.ones(2).sum().item() == 2.0
"""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": repo}, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  events = [f for f in os.listdir(tmp_path / "tb") if f.startswith("events.out.tfevents")]
  assert events and os.path.getsize(tmp_path / "tb" / events[0]) > 0
