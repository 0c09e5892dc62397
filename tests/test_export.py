"""`python -m rlsvr.export`: a training checkpoint becomes an HF directory transformers loads."""
import os
import subprocess
import sys

import numpy as np
import torch
import transformers

from rlsvr import checkpoint
from rlsvr.model import qwen3
from tests.model.hf_reference import hf_logits, left_padded

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_export_cli_round_trip(smoke_run, tmp_path):
  out = tmp_path / "hf"
  proc = subprocess.run([sys.executable, "-m", "rlsvr.export", "--checkpoint", smoke_run,
                         "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                        timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "exported step 2" in proc.stdout
  model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  tok = transformers.AutoTokenizer.from_pretrained(out)
  assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
  step, config, params = checkpoint.restore_params(os.path.join(smoke_run, "checkpoints"))
  assert step == 2
  tokens, mask = left_padded([20, 9], config.vocab_size)
  real = mask.astype(bool)
  np.testing.assert_allclose(hf_logits(model, tokens, mask)[real],
                             np.asarray(qwen3.apply(config, params, tokens, mask))[real], atol=1e-4)


def test_export_of_an_earlier_step_in_bfloat16(smoke_run, tmp_path):
  from rlsvr import export

  step, path = export.export(smoke_run, str(tmp_path / "bf16"), step=1, dtype="bfloat16")
  assert step == 1
  model = transformers.AutoModelForCausalLM.from_pretrained(path)
  assert model.dtype == torch.bfloat16


def test_export_defaults_to_the_runs_compute_dtype_and_keeps_the_fp32_masters(tmp_path):
  import json

  import safetensors.numpy

  from rlsvr import export
  from rlsvr.rl.train_step import GRPOConfig, init_train_state
  from tests.rl.tiny import CONFIG, random_params

  state = init_train_state(CONFIG, GRPOConfig(compute_dtype="bfloat16"), random_params())
  meta = {"model_config": CONFIG.to_hf_dict("bfloat16"), "param_dtype": "float32",
          "compute_dtype": "bfloat16", "config": json.dumps({"model": {"source": "random:tiny"}})}
  saver = checkpoint.Checkpointer(str(tmp_path / "run"))
  saver.save(1, state, {}, meta)
  saver.close()
  _, default = export.export(str(tmp_path / "run"), str(tmp_path / "default"))
  _, full = export.export(str(tmp_path / "run"), str(tmp_path / "fp32"), dtype="float32")
  read = lambda d: safetensors.numpy.load_file(os.path.join(d, "model.safetensors"))
  # safetensors.numpy reads bf16 as ml_dtypes.bfloat16: 2-byte elements.
  assert {v.dtype.itemsize for v in read(default).values()} == {2}
  masters = read(full)
  q = np.asarray(state.params["layers"]["attn"]["q_proj"])
  assert {v.dtype for v in masters.values()} == {np.dtype(np.float32)}
  np.testing.assert_array_equal(masters["model.layers.0.self_attn.q_proj.weight"],
                                q[0].reshape(q.shape[1], -1).T)
