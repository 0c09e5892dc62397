"""Summarisation benchmarks (SpyRL table): ROUGE-L F1.

  python -m rlsvr.eval --config=configs/eval_summ.py --config.model=runs/spy_summ
  python -m rlsvr.eval --config=configs/eval_summ.py --config.datasets=samsum --config.limit=100
  python -m rlsvr.eval --config=configs/eval_summ.py:smoke --workdir=/tmp/eval_summ
  # side by side with the base model's results
  python -m rlsvr.eval --config=configs/eval_summ.py --config.model=runs/spy_summ \
      --config.baseline=runs/eval_summ_base/results.json

Variants: see configs/eval_common.py.
"""
from configs.eval_common import eval_config

DATASETS = ("govreport", "multi_news", "qmsum", "vcsum", "samsum")


def get_config(arg=None):
  c = eval_config("summ", DATASETS, arg, max_new_tokens=1024)
  c.max_prompt_tokens = 16384 if not arg else c.max_prompt_tokens
  if "smoke" in (arg or ""):
    c.datasets = "samsum"
  return c
