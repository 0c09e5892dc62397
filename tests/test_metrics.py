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
