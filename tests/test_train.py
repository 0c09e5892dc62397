"""The main job end to end on the smoke config: outputs, exact resume, config errors."""
import importlib
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlsvr import checkpoint, metrics, train
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


def test_resume_continues_exactly_like_an_uninterrupted_run(smoke_run, tmp_path):
  straight = str(tmp_path / "straight")
  train.train(smoke_config(steps=4), straight)
  resumed = str(tmp_path / "resumed")
  shutil.copytree(smoke_run, resumed)  # a finished 2-step run
  train.train(smoke_config(steps=4), resumed)
  a = metrics.read_jsonl(os.path.join(straight, "metrics.jsonl"))
  b = metrics.read_jsonl(os.path.join(resumed, "metrics.jsonl"))
  assert [r["step"] for r in b] == [1, 2, 3, 4]
  for step in (3, 4):
    for key in ("reward/mean", "actor/pg_loss", "actor/entropy", "actor/kl",
                "response_length/mean"):
      assert a[step - 1][key] == pytest.approx(b[step - 1][key], abs=1e-6), (step, key)
  _, _, pa = checkpoint.restore_params(os.path.join(straight, "checkpoints"))
  _, _, pb = checkpoint.restore_params(os.path.join(resumed, "checkpoints"))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), pa, pb)


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
  runs with dynamic sampling (grpo.filter_groups)."""
  config = importlib.import_module(f"configs.{name}").get_config("smoke")
  config.steps = 2
  filtered = name == "spy_math"
  if filtered:
    config.grpo.filter_groups, config.grpo.max_num_gen_batches = True, 2
  workdir = str(tmp_path / name)
  train.train(config, workdir)
  rows = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in rows] == [1, 2]
  assert os.path.getsize(os.path.join(workdir, "rollouts.txt")) > 0
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "2"))
  for row in rows:
    assert ("filter/rounds" in row) == filtered
    assert 0 <= row["rollout_corr/ratio_mean"] and "actor/ppo_kl" in row
  if filtered:  # The stream position is checkpointed: every round drew its own games.
    with open(os.path.join(workdir, "checkpoints", "2", "env", "metadata")) as f:
      saved = json.load(f)  # orbax's JSON item
    rounds = sum(r["filter/rounds"] for r in rows)
    assert saved["items_consumed"] == rounds * config.spy.games_per_step


@pytest.mark.parametrize("key,value,match", [
    ("model.param_dtype", "float16", "model.param_dtype"),
    ("model.compute_dtype", "int8", "model.compute_dtype"),
    ("grpo.updates_per_batch", 0, "grpo"),
    ("grpo.rollout_is", "geometric", "grpo"),
    ("spy.baseline_order", "after", "spy"),
    ("steps", 0, "steps"),
    ("spy.mask_fraction", 1.5, "spy"),
    ("spy.variant", "triple", "spy"),
    ("grpo.agg_mode", "seq-mean", "grpo"),
    ("grpo.kl_kind", "k9", "grpo"),
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

