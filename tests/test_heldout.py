"""Held-out evaluation: statistics, the log and its rewind, and the trainer's before/after runs."""
import json
import os

import numpy as np
import pytest
import scipy.stats

from rlsvr import heldout, train
from tests.conftest import smoke_config


@pytest.mark.parametrize("values", [[1.0, 0.0, 0.0, 1.0, 1.0], [0.25, 0.5], [3.0, 3.0, 3.0]])
def test_mean_and_standard_error_match_scipy(values):
  out = heldout.with_se("acc", values)
  assert out["acc"] == pytest.approx(np.mean(values))
  assert out["acc/se"] == pytest.approx(scipy.stats.sem(values), abs=1e-12)


def test_with_se_of_one_or_no_value():
  assert heldout.with_se("acc", [0.5]) == {"acc": 0.5, "acc/se": 0.0}
  assert all(np.isnan(v) for v in heldout.with_se("acc", []).values())


def test_rewind_keeps_the_evaluations_up_to_the_restored_step(tmp_path):
  for step in (0, 3, 6):
    heldout.write(str(tmp_path), step, {"acc": step / 10})
  with open(tmp_path / heldout.FILE, "a") as f:
    f.write('{"step": 9, "ac')  # the torn line of a killed run
  heldout.rewind(str(tmp_path), 3)
  assert [r["step"] for r in heldout.read(str(tmp_path))] == [0, 3]


def test_table_pairs_each_value_with_its_standard_error():
  text = heldout.table([{"step": 0, "time": 1.0, "acc": 0.25, "acc/se": 0.125, "chance": 0.2},
                        {"step": 8, "time": 2.0, "acc": 0.5, "acc/se": 0.1, "chance": 0.2}])
  lines = text.splitlines()
  assert lines[0].split() == ["held-out", "step", "0", "step", "8"]
  assert lines[1].split() == ["acc", "0.250", "±", "0.125", "0.500", "±", "0.100"]
  assert lines[2].split() == ["chance", "0.200", "0.200"]


def _spy_smoke(steps: int):
  c = smoke_config(steps=steps)
  c.heldout.size = 3
  c.spy.constrained_vote = True
  return c


def test_the_trainer_evaluates_before_and_after_and_a_resume_adds_only_the_new_end(
    tmp_path, capsys):
  workdir = str(tmp_path)
  train.train(_spy_smoke(2), workdir)
  records = heldout.read(workdir)
  assert [r["step"] for r in records] == [0, 2]
  for r in records:
    # Every vote of the constrained detectors is valid, even from a random tiny model.
    assert r["invalid_vote_rate"] == 0.0 and 0.0 <= r["detect_acc"] <= 1.0
    assert r["vote_share_spy"] + 3 * r["vote_share_civilian"] == pytest.approx(1.0)
  out = capsys.readouterr().out
  assert "held-out" in out and "step 0" in out and "step 2" in out and "detect_acc" in out
  steps = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert all(s["spy/invalid_vote_rate"] == 0.0 for s in steps)

  c = _spy_smoke(3)
  train.train(c, workdir)
  assert [r["step"] for r in heldout.read(workdir)] == [0, 2, 3]


def test_heldout_needs_an_environment_that_can_evaluate(tmp_path):
  from configs.rlvr_math import get_config

  data = tmp_path / "problems.jsonl"  # Local rows: the test needs no shared data folder.
  data.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
  c = get_config("smoke")
  c.data.source = str(data)
  c.heldout.size = 2
  with pytest.raises(ValueError, match="has no evaluate"):
    train.train(c, str(tmp_path))


def test_a_restart_before_the_first_checkpoint_evaluates_step_0_once(tmp_path, monkeypatch):
  from rlsvr import train_loop

  workdir = str(tmp_path)
  real_step = train_loop.train_one_step

  def crash(*args):
    raise RuntimeError("the machine went away")

  monkeypatch.setattr(train_loop, "train_one_step", crash)
  with pytest.raises(RuntimeError, match="went away"):
    train.train(_spy_smoke(1), workdir)  # Evaluated step 0, then died in step 1.
  assert [r["step"] for r in heldout.read(workdir)] == [0]
  monkeypatch.setattr(train_loop, "train_one_step", real_step)
  train.train(_spy_smoke(1), workdir)  # No checkpoint to resume: starts at step 0 again.
  assert [r["step"] for r in heldout.read(workdir)] == [0, 1]
