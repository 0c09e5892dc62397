"""RLSR: Countdown and Integration Bee accuracy, and the generator-verifier gap (Figure 4).

  python -m rlsvr.eval --config=configs/eval_rlsr.py --config.model=runs/rlsr_countdown
  python -m rlsvr.eval --config=configs/eval_rlsr.py --config.datasets=integration_bee_hard
  python -m rlsvr.eval --config=configs/eval_rlsr.py --config.gap=False   # accuracy only
  python -m rlsvr.eval --config=configs/eval_rlsr.py --config.data.countdown=generate
  python -m rlsvr.eval --config=configs/eval_rlsr.py:smoke --workdir=/tmp/eval_rlsr

Variants: see configs/eval_common.py.
"""
from configs.eval_common import eval_config

DATASETS = ("countdown", "integration_bee", "integration_bee_hard")


def get_config(arg=None):
  c = eval_config("rlsr", DATASETS, arg, model="hub:Qwen/Qwen2.5-7B-Instruct",
                  max_new_tokens=2048)
  c.datasets = "countdown,integration_bee"
  c.limit = c.limit or 500  # The TinyZero test file has 2001 problems.
  c.gap = True  # Also measure the generator-verifier gap.
  c.gap_limit = 100  # Problems (x2 candidates) in the gap's balanced set; 0: all.
  if "smoke" in (arg or ""):
    c.datasets = "countdown"
    c.gap_limit = 2
  return c
