"""Export a training checkpoint as a Hugging Face model directory (or a PEFT adapter).

  python -m rlsvr.export --checkpoint runs/spy_summ --out exported/ [--step 100] [--dtype bfloat16]
  python -m rlsvr.export --checkpoint runs/lora_run --out adapter/ --adapter

`--checkpoint` is a run's workdir (or its `checkpoints/` folder); the latest
step is exported unless `--step` says otherwise. Checkpoints hold the master
weights (float32); the export is cast to `--dtype`, by default the dtype the
run computed in (`model.compute_dtype`). The tokenizer of the run's
model is written alongside, so the directory loads with
`transformers.AutoModelForCausalLM.from_pretrained` and `AutoTokenizer`.

A LoRA run (`model.lora.rank > 0`) exports its base with the adapters merged in; with
`--adapter`, the adapters alone as a PEFT directory (float32) that
`peft.PeftModel.from_pretrained(base_model, out)` loads onto the run's base model.
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
flags.DEFINE_bool("adapter", False, "LoRA runs: write the adapters as a PEFT adapter "
                  "directory instead of merged weights.")
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


def export_adapter(checkpoint: str, out: str, *, step: int | None = None):
  """Writes the PEFT adapter directory of a LoRA run's checkpoint; returns (step, out path)."""
  from rlsvr import checkpoint as ckpt  # noqa: PLC0415
  from rlsvr.model import lora as lora_lib  # noqa: PLC0415

  step, config, adapters, meta = ckpt.restore_trained(checkpoints_dir(checkpoint), step)
  lora = lora_lib.from_dict(meta.get("lora"))
  if lora is None:
    raise ValueError(f"{checkpoint} is a full-weight run (model.lora.rank=0): it has no "
                     "adapters; export it without --adapter")
  source = json.loads(meta["config"])["model"]["source"]
  return step, lora_lib.save_peft_adapter(out, config, lora, adapters,
                                          base_model_name=source.removeprefix("hub:"))


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  if FLAGS.adapter:
    step, path = export_adapter(FLAGS.checkpoint, FLAGS.out, step=FLAGS.step)
  else:
    step, path = export(FLAGS.checkpoint, FLAGS.out, step=FLAGS.step, dtype=FLAGS.dtype)
  print(f"exported step {step} to {path}")


if __name__ == "__main__":
  app.run(main)
