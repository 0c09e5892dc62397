"""bench/spy_ceiling.py and bench/learning_spy.py end to end on the smoke game (seconds)."""
import json
import sys

from bench import learning_spy, spy_ceiling


def test_the_ceiling_bench_reports_every_scripted_detector(tmp_path, monkeypatch, capsys):
  out = tmp_path / "ceiling.json"
  monkeypatch.setattr(sys, "argv", ["spy_ceiling.py", "--config", "configs/spy_summ.py:smoke",
                                    "--games", "2", "--json", str(out)])
  spy_ceiling.main()
  got = json.loads(out.read_text())
  assert got["games"] == 2 and got["chance_detect_acc"] == 0.25
  for name in ("mask_chars", "least_recall", "most_unsupported", "missed_consensus",
               "best_per_game", "best_per_game_chance"):
    assert 0.0 <= got[f"ceiling/{name}"] <= 1.0
  assert 0.0 <= got["plain_recall"] <= 1.0
  printed = capsys.readouterr().out
  assert "scripted: missed_consensus" in printed and "model's detectors" in printed


def test_the_learning_bench_trains_each_seed_and_reads_its_outputs(tmp_path, monkeypatch,
                                                                    capsys):
  out = tmp_path / "learning.json"
  argv = ["learning_spy.py", "--config", "configs/spy_summ.py:smoke", "--seeds", "0",
          "--set", "steps=2", "--set", "heldout.size=2", "--set", "grpo.lr=1e-4",
          "--workdir", str(tmp_path / "runs"), "--json", str(out)]
  monkeypatch.setattr(sys, "argv", argv)
  learning_spy.main()
  seed = json.loads(out.read_text())["seeds"]["0"]
  assert (seed["before"]["step"], seed["after"]["step"]) == (0, 2)
  assert seed["steps"]["decision/steps"] == seed["steps"]["clue/steps"] == 1.0
  assert "ceiling/best_per_game" in seed["after"]
  # A finished seed is read back, not trained again.
  learning_spy.main()
  assert json.loads(out.read_text())["seeds"]["0"]["train_s"] == seed["train_s"]
  assert "mean over seeds [0]" in capsys.readouterr().out
