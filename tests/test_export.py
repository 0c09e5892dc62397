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
