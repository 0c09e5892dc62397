"""Export a training checkpoint as a Hugging Face model directory.

  python -m rlsvr.export --checkpoint runs/spy_summ --out exported/ [--step 100] [--dtype bfloat16]

`--checkpoint` is a run's workdir (or its `checkpoints/` folder); the latest
step is exported unless `--step` says otherwise. Checkpoints hold the master
weights (float32); the export is cast to `--dtype`, by default the dtype the
run computed in (`model.compute_dtype`). The tokenizer of the run's
model is written alongside, so the directory loads with
`transformers.AutoModelForCausalLM.from_pretrained` and `AutoTokenizer`.
"""
from __future__ import annotations

import json
import os

from absl import app, flags, logging

flags.DEFINE_string("checkpoint", None, "Run workdir or its checkpoints/ folder.", required=True)
flags.DEFINE_string("out", None, "Output HF directory.", required=True)
flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"],
                  "Saved dtype (default: the run's compute dtype; checkpoints hold float32 "
                  "masters).")
FLAGS = flags.FLAGS


def checkpoints_dir(path: str) -> str:
  sub = os.path.join(path, "checkpoints")
  return sub if os.path.isdir(sub) else path


def export(checkpoint: str, out: str, *, step: int | None = None, dtype: str | None = None):
  """Writes the HF directory of `checkpoint` at `step`; returns (step, out path)."""
  import ml_dtypes  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr import checkpoint as ckpt  # noqa: PLC0415
  from rlsvr.model import hf, sources  # noqa: PLC0415

  step, config, params, meta = ckpt.restore_run(checkpoints_dir(checkpoint), step)
  run = json.loads(meta["config"])
  try:
    tok = sources.tokenizer_for(run["model"]["source"], run["model"].get("tokenizer", ""))
  except sources.ModelSourceError:
    tok = None  # A random-init run without a tokenizer: export the weights alone.
  dtype = dtype or meta.get("compute_dtype") or meta.get("param_dtype", "float32")
  np_dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
  return step, hf.save_pretrained(out, config, params, tokenizer=tok, dtype=np_dtype)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  step, path = export(FLAGS.checkpoint, FLAGS.out, step=FLAGS.step, dtype=FLAGS.dtype)
  print(f"exported step {step} to {path}")


if __name__ == "__main__":
  app.run(main)
