"""The main job end to end on the smoke config: outputs, exact resume, config errors."""
import json
import os
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
  train.train(smoke_config(steps=3), straight)
  resumed = str(tmp_path / "resumed")
  train.train(smoke_config(steps=2), resumed)
  train.train(smoke_config(steps=3), resumed)
  a = metrics.read_jsonl(os.path.join(straight, "metrics.jsonl"))
  b = metrics.read_jsonl(os.path.join(resumed, "metrics.jsonl"))
  assert [r["step"] for r in b] == [1, 2, 3]
  for key in ("reward/mean", "actor/pg_loss", "actor/entropy", "response_length/mean"):
    assert a[-1][key] == pytest.approx(b[-1][key], abs=1e-6), key
  _, _, pa = checkpoint.restore_params(os.path.join(straight, "checkpoints"))
  _, _, pb = checkpoint.restore_params(os.path.join(resumed, "checkpoints"))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), pa, pb)


@pytest.mark.parametrize("key,value,match", [
    ("model.dtype", "float16", "model.dtype"),
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
