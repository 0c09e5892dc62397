"""The main job end to end on the smoke config: outputs, exact resume, config errors."""
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from rlsvr import checkpoint, metrics, train
from rlsvr.rl.config import GRPOConfig
from tests.conftest import smoke_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_run_writes_every_output(smoke_run):
  records = metrics.read_jsonl(os.path.join(smoke_run, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  for key in ("reward/mean", "actor/pg_loss", "actor/kl", "actor/grad_norm", "spy/detect_acc",
              "response_length/mean", "perf/tokens_per_s", "perf/step_s"):
    assert key in records[-1], key
  text = open(os.path.join(smoke_run, "rollouts.txt"), encoding="utf-8").read()
  assert "step 1 |" in text and "step 2 |" in text and "spy: Player" in text
  games = [json.loads(line) for line in open(os.path.join(smoke_run, "rollouts",
                                                          "step_00000002.jsonl"))]
  assert len(games) == 2
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(smoke_run, "tb")))
  assert os.path.getsize(os.path.join(smoke_run, "curves.png")) > 1000
  assert sorted(os.listdir(os.path.join(smoke_run, "checkpoints"))) == ["1", "2"]


def tensorboard_steps(workdir):
  """(tag, step) of every scalar in workdir/tb's event files (TFRecord framing)."""
  import struct

  from tensorboardX.proto import event_pb2

  seen = []
  tb = os.path.join(workdir, "tb")
  for name in sorted(os.listdir(tb)):
    with open(os.path.join(tb, name), "rb") as f:
      data = f.read()
    pos = 0
    while pos < len(data):
      (length,) = struct.unpack("<Q", data[pos:pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
      pos += 12 + length + 4
      seen += [(v.tag, event.step) for v in event.summary.value]
  return seen


def test_a_killed_run_resumes_exactly_like_an_uninterrupted_run(tmp_path):
  """SIGKILL after step 3 (checkpoint at 2), rerun: every output holds each step once and
  the run ends where an uninterrupted one does."""
  straight = str(tmp_path / "straight")
  train.train(smoke_config(steps=4), straight)
  killed = str(tmp_path / "killed")
  proc = subprocess.Popen(
      [sys.executable, "-m", "rlsvr.train", "--config=configs/spy_summ.py:smoke",
       "--config.steps=4", "--config.checkpoint.every=2", f"--workdir={killed}"],
      cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE)
  log = os.path.join(killed, "metrics.jsonl")
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if os.path.exists(log) and len(metrics.read_jsonl(log)) >= 3:
      proc.kill()
      break
    time.sleep(0.02)
  assert proc.wait(timeout=60) == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
  assert [r["step"] for r in metrics.read_jsonl(log)] == [1, 2, 3]  # step 3 is past the save
  assert checkpoint.Checkpointer(killed).latest_step() in (1, 2)

  train.train(smoke_config(steps=4), killed)
  a, b = (metrics.read_jsonl(os.path.join(w, "metrics.jsonl")) for w in (straight, killed))
  assert [r["step"] for r in b] == [1, 2, 3, 4]
  for ra, rb in zip(a, b):
    for key in ("reward/mean", "actor/pg_loss", "actor/entropy", "actor/kl",
                "response_length/mean"):
      assert ra[key] == pytest.approx(rb[key], abs=1e-6), (ra["step"], key)
  read = lambda w, *p: open(os.path.join(w, *p), encoding="utf-8").read()
  assert read(killed, "rollouts.txt") == read(straight, "rollouts.txt")
  assert sorted(os.listdir(os.path.join(killed, "rollouts"))) == sorted(
      os.listdir(os.path.join(straight, "rollouts")))
  for step in range(1, 5):
    name = f"step_{step:08d}.jsonl"
    assert read(killed, "rollouts", name) == read(straight, "rollouts", name)
  scalars = tensorboard_steps(killed)
  assert len(scalars) == len(set(scalars)) and {s for _, s in scalars} == {1, 2, 3, 4}
  assert {t for t, _ in scalars} >= {"reward/mean", "actor/pg_loss"}
  _, _, pa = checkpoint.restore_params(os.path.join(straight, "checkpoints"))
  _, _, pb = checkpoint.restore_params(os.path.join(killed, "checkpoints"))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), pa, pb)


def test_an_unreadable_latest_checkpoint_falls_back_to_the_previous_one(smoke_run, tmp_path,
                                                                         capfd):
  workdir = str(tmp_path / "corrupt")
  shutil.copytree(smoke_run, workdir)
  data = os.path.join(workdir, "checkpoints", "2", "state", "ocdbt.process_0", "d")
  for name in os.listdir(data):  # truncated array data, as a full disk leaves it
    with open(os.path.join(data, name), "r+b") as f:
      f.truncate(10)
  train.train(smoke_config(steps=3), workdir)
  err = capfd.readouterr().err
  assert "unreadable checkpoint(s) step 2" in err and "resuming from step 1" in err
  assert [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [
      1, 2, 3]
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2", "3"]
  assert len(os.listdir(os.path.join(workdir, "checkpoints_unreadable"))) == 1


def test_no_readable_checkpoint_is_a_clear_error(smoke_run, tmp_path):
  workdir = str(tmp_path / "gone")
  shutil.copytree(smoke_run, workdir)
  for step in ("1", "2"):
    shutil.rmtree(os.path.join(workdir, "checkpoints", step, "env"))  # an item is missing
  with pytest.raises(RuntimeError, match="no readable checkpoint .*step 2: .*step 1: "):
    train.train(smoke_config(steps=3), workdir)


def test_a_rerun_with_a_changed_config_refuses_to_append(smoke_run, tmp_path):
  workdir = str(tmp_path / "changed")
  shutil.copytree(smoke_run, workdir)
  c = smoke_config(steps=3)
  c.grpo.lr, c.spy.beta, c.log.tensorboard = 3e-4, 0.5, False  # the last cannot change results
  with pytest.raises(ValueError, match="different config") as e:
    train.train(c, workdir)
  assert "grpo.lr: 1e-05 -> 0.0003" in str(e.value) and "spy.beta" in str(e.value)
  assert "log.tensorboard" not in str(e.value) and "steps" not in str(e.value)
  assert len(metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))) == 2  # untouched
  c.resume_with_changes = True
  train.train(c, workdir)
  assert [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [
      1, 2, 3]


def test_a_save_cut_off_midway_is_ignored_on_resume(smoke_run, tmp_path):
  """What SIGKILL during an orbax save leaves: a step folder still under its temporary
  name (orbax renames it only once complete). Resume must use the last complete step."""
  workdir = str(tmp_path / "killed")
  shutil.copytree(smoke_run, workdir)
  partial = os.path.join(workdir, "checkpoints", "3.orbax-checkpoint-tmp", "state")
  os.makedirs(partial)
  with open(os.path.join(partial, "half_written"), "wb") as f:
    f.write(b"\0" * 100)
  assert checkpoint.Checkpointer(workdir).latest_step() == 2
  train.train(smoke_config(steps=3), workdir)
  assert [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [
      1, 2, 3]


@pytest.mark.parametrize("name", ["spy_write", "spy_math", "rlsr_integration"])
def test_every_config_smoke_variant_runs(name, tmp_path):
  """spy_summ and rlsr_countdown run in the tests above and in test_experiment.py; spy_math
  runs with dynamic sampling (grpo.filter_groups), spy_write with packed update batches
  (grpo.pack_tokens: both phases' rows, each detector's prompt shared by its rows)."""
  config = importlib.import_module(f"configs.{name}").get_config("smoke")
  config.steps = 2
  filtered = name == "spy_math"
  if filtered:
    config.grpo.filter_groups, config.grpo.max_num_gen_batches = True, 2
  if name == "spy_write":
    config.grpo.pack_tokens = 256
  workdir = str(tmp_path / name)
  train.train(config, workdir)
  rows = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in rows] == [1, 2]
  assert os.path.getsize(os.path.join(workdir, "rollouts.txt")) > 0
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "2"))
  for row in rows:
    assert ("filter/rounds" in row) == filtered
    assert 0 <= row["rollout_corr/ratio_mean"] and "actor/ppo_kl" in row
    assert row["perf/update_slots_per_token"] > 0
  if filtered:  # The stream position is checkpointed: every round drew its own games.
    with open(os.path.join(workdir, "checkpoints", "2", "env", "metadata")) as f:
      saved = json.load(f)  # orbax's JSON item
    rounds = sum(r["filter/rounds"] for r in rows)
    assert saved["items_consumed"] == rounds * config.spy.games_per_step


@pytest.mark.parametrize("key,value,match", [
    ("model.param_dtype", "float16", "model.param_dtype"),
    ("model.compute_dtype", "int8", "model.compute_dtype"),
    ("grpo.updates_per_batch", 0, "grpo"),
    ("grpo.pack_tokens", -1, "grpo"),
    ("grpo.rollout_is", "geometric", "grpo"),
    ("spy.baseline_order", "after", "spy"),
    ("steps", 0, "steps"),
    ("heldout.per_call", -1, "heldout.per_call"),
    ("spy.mask_fraction", 1.5, "spy"),
    ("spy.variant", "triple", "spy"),
    ("grpo.agg_mode", "seq-mean", "grpo"),
    ("grpo.kl_kind", "k9", "grpo"),
    ("grpo.overlong_buffer", 8, "overlong_buffer=8 must be below the completion limit"),
])
def test_bad_configs_fail_before_any_model_is_loaded(monkeypatch, tmp_path, key, value, match):
  from rlsvr.model import sources

  monkeypatch.setattr(sources, "load_model", lambda *a, **k: pytest.fail("model was loaded"))
  c = smoke_config()
  section, _, name = key.rpartition(".")
  setattr(c[section] if section else c, name, value)
  with pytest.raises(ValueError, match=match):
    train.train(c, str(tmp_path))


def test_cli_rejects_unknown_keys_and_wrong_types():
  for override, match in (("--config.spy.nonexistent=1", "nonexistent"),
                          ("--config.steps=many", "steps")):
    out = subprocess.run(
        [sys.executable, "-m", "rlsvr.train", "--config=configs/spy_summ.py:smoke", override],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode != 0
    assert match in out.stderr, out.stderr[-2000:]


def test_a_config_that_does_not_fit_is_refused_with_its_plan(monkeypatch, tmp_path):
  from rlsvr import plan
  from rlsvr.model import sources

  monkeypatch.setattr(sources, "load_model", lambda *a, **k: pytest.fail("model was loaded"))
  monkeypatch.setattr(plan, "detect_device_memory", lambda: 16 * 2**30)
  c = smoke_config()
  c.model.source = "random:qwen3-8b"  # 8.2B params: ~125 GiB of state on one 16 GiB device.
  with pytest.raises(ValueError, match="does not fit") as e:
    train.train(c, str(tmp_path))
  assert "AdamW" in str(e.value) and "DOES NOT FIT" in str(e.value)
  c.check_memory = False  # The override reaches the model load.
  with pytest.raises(pytest.fail.Exception, match="model was loaded"):
    train.train(c, str(tmp_path))



def test_dr_grpo_divides_by_the_longest_completion_the_environment_allows():
  """seq-mean-token-sum-norm left at 0 divides by the configured limit, as verl's fixed
  padding does, not by the batch's length bucket (which moves with its longest row)."""
  from configs import rlvr_math, spy_summ

  for config, limit in ((spy_summ.get_config("smoke"), 8), (rlvr_math.get_config("smoke"), None)):
    config.grpo.loss_type = "dr_grpo"
    limit = limit or config.reward_fn.max_new_tokens
    assert train.grpo_config(config).loss_scale_factor == limit
    config.grpo.loss_scale_factor = 3.0  # A factor given is kept.
    assert train.grpo_config(config).loss_scale_factor == 3.0
  with pytest.raises(ValueError, match="max completion length"):
    GRPOConfig(agg_mode="seq-mean-token-sum-norm")


def test_a_read_error_that_may_pass_is_retried_and_never_discards_anything(
    smoke_run, tmp_path, monkeypatch):
  """An I/O error on the newest checkpoint is retried (and then it reads); one that keeps
  failing stops the run with every checkpoint and output as it was."""
  import errno

  monkeypatch.setattr(checkpoint, "RETRY_DELAYS_S", (0.0, 0.0))
  real = checkpoint.Checkpointer._restore_step
  calls = []

  def flaky(self, state, step, fail_times):
    calls.append(step)
    if len(calls) <= fail_times:
      raise OSError(errno.EIO, "Input/output error")  # as a network file system says
    return real(self, state, step)

  workdir = str(tmp_path / "flaky")
  shutil.copytree(smoke_run, workdir)
  monkeypatch.setattr(checkpoint.Checkpointer, "_restore_step",
                      lambda self, state, step: flaky(self, state, step, fail_times=2))
  train.train(smoke_config(steps=3), workdir)
  assert calls[:3] == [2, 2, 2]  # step 2 read on the third attempt, not set aside
  assert not os.path.exists(os.path.join(workdir, "checkpoints_unreadable"))
  assert [r["step"] for r in metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [
      1, 2, 3]

  workdir = str(tmp_path / "down")
  shutil.copytree(smoke_run, workdir)
  outputs = {name: open(os.path.join(workdir, name), "rb").read()
             for name in ("metrics.jsonl", "rollouts.txt")}
  calls.clear()
  monkeypatch.setattr(checkpoint.Checkpointer, "_restore_step",
                      lambda self, state, step: flaky(self, state, step, fail_times=99))
  with pytest.raises(checkpoint.CheckpointReadError, match="may pass"):
    train.train(smoke_config(steps=3), workdir)
  assert calls == [2, 2, 2]  # three attempts at the newest step, no fall back to step 1
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
  assert not os.path.exists(os.path.join(workdir, "checkpoints_unreadable"))
  for name, content in outputs.items():
    assert open(os.path.join(workdir, name), "rb").read() == content, name


@pytest.mark.parametrize("error,bad", [
    (OSError(5, "Input/output error"), False),
    (MemoryError(), False),
    (TimeoutError("read timed out"), False),
    (ValueError("UNAVAILABLE: GCS backend unavailable"), False),
    (ValueError("RESOURCE_EXHAUSTED: out of memory allocating 4 GiB"), False),
    (FileNotFoundError(2, "No such file or directory"), True),
    (ValueError("DATA_LOSS: Error reading local file: truncated"), True),
    (json.JSONDecodeError("Expecting value", "", 0), True),
])
def test_only_errors_that_show_bad_files_set_a_checkpoint_aside(error, bad):
  assert checkpoint.files_are_bad(error) == bad
