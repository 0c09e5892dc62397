"""Runner: resumable cache, fingerprints, statistics, results tables and the baseline plot."""
import json

import ml_collections
import pytest

from rlsvr.eval import runner


def test_item_cache_survives_a_cut_line(tmp_path):
  cache = runner.ItemCache(tmp_path / "c.jsonl")
  cache.put("a", {"v": 1})
  with open(tmp_path / "c.jsonl", "a") as f:
    f.write('{"key": "b", "v"')  # a crash mid-write
  again = runner.ItemCache(tmp_path / "c.jsonl")
  assert "a" in again and "b" not in again and again.get("a") == {"key": "a", "v": 1}


def config(tmp_path, **kw):
  settings = dict(model="m", seed=0, batch_size=2, limit=0, progress=False,
                  judge=dict(api_key="", model=""))
  c = ml_collections.ConfigDict({**settings, **kw})
  return runner.Context(c, tmp_path)


def test_map_skips_cached_items_on_rerun(tmp_path):
  calls = []

  def fn(batch):
    calls.append(list(batch))
    return [{"double": 2 * x} for x in batch]

  items, keys = [1, 2, 3], ["k1", "k2", "k3"]
  records, path = config(tmp_path).map("ds", items, keys, fn)
  assert [r["double"] for r in records] == [2, 4, 6] and calls == [[1, 2], [3]]
  calls.clear()
  ctx = config(tmp_path, limit=5)  # `limit` does not change the fingerprint
  records, path2 = ctx.map("ds", items + [4], keys + ["k4"], fn)
  assert calls == [[4]] and path2 == path and records[-1]["double"] == 8
  with pytest.raises(ValueError, match="unique"):
    ctx.map("ds", [1, 1], ["k", "k"], fn)


def test_fingerprint_tracks_settings_and_hides_secrets(tmp_path):
  a = config(tmp_path).fingerprint
  assert config(tmp_path, samples=4).fingerprint != a
  assert config(tmp_path, workdir="elsewhere", baseline="x").fingerprint == a
  public = runner.public_config({"judge": {"api_key": "sk-1", "model": "m"}, "k": 1})
  assert public == {"judge": {"api_key": "<set>", "model": "m"}, "k": 1}


def test_statistics():
  assert runner.mean_stderr([1.0, 0.0, 1.0, 0.0]) == pytest.approx((0.5, 0.288675, ), rel=1e-5)
  assert runner.mean_stderr([1.0]) == (1.0, 0.0)
  s = runner.percent_summary("accuracy", [1] * 6 + [0] * 2)
  assert s["accuracy"] == 75.0 and s["n"] == 8
  assert s["accuracy_ci95_low"] == pytest.approx(75 - 1.96 * s["accuracy_stderr"])
  assert s["accuracy_ci95_high"] == 100.0  # clipped to the possible range


def results(model, value):
  return {"suite": "math", "model": model, "datasets": {
      "gsm8k": {"headline": "accuracy", "metrics": {"accuracy": value, "accuracy_stderr": 1.0}},
      "aime24": {"headline": "accuracy", "metrics": {"accuracy": value / 2}}}}


def test_tables_and_baseline_plot(tmp_path):
  base_dir = tmp_path / "base"
  runner.write_results(results("base", 40.0), base_dir)
  assert "| gsm8k | accuracy | 40.00 |" in (base_dir / "results.md").read_text()
  assert json.loads((base_dir / "results.json").read_text())["model"] == "base"
  out = tmp_path / "new"
  runner.write_results(results("trained", 50.0), out, baseline=str(base_dir))
  table = (out / "comparison.md").read_text()
  assert "| gsm8k | accuracy | 40.00 | 50.00 | 10.00 |" in table
  assert (out / "comparison.png").stat().st_size > 1000


def test_unknown_suite(tmp_path):
  c = ml_collections.ConfigDict(dict(suite="nope"))
  with pytest.raises(ValueError, match="suite"):
    runner.run(c, tmp_path)


def test_missing_baseline_fails_before_evaluating(tmp_path):
  c = ml_collections.ConfigDict(dict(suite="math", baseline=str(tmp_path / "none")))
  with pytest.raises(FileNotFoundError):
    runner.run(c, tmp_path)
