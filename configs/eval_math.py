"""Math and reasoning benchmarks (SpyRL table): pass@1 with a 95% interval.

  python -m rlsvr.eval --config=configs/eval_math.py --config.model=runs/spy_math
  python -m rlsvr.eval --config=configs/eval_math.py --config.model=HF_DIR --config.limit=50
  python -m rlsvr.eval --config=configs/eval_math.py:smoke --workdir=/tmp/eval_math
  # GPQA-Diamond is not shipped: add it with its CSV
  python -m rlsvr.eval --config=configs/eval_math.py --config.datasets=gpqa_diamond \
      --config.data.gpqa_diamond=/path/gpqa_diamond.csv
  # pass@1 averaged over 16 samples (AIME)
  python -m rlsvr.eval --config=configs/eval_math.py --config.datasets=aime24,aime25 \
      --config.samples=16 --config.sampling.temperature=0.6 --config.sampling.top_p=0.95

Variants: see configs/eval_common.py.
"""
from configs.eval_common import eval_config

DATASETS = ("gsm8k", "math500", "aime24", "aime25", "amc23", "minerva_math", "mmlu_pro",
            "gpqa_diamond")


def get_config(arg=None):
  c = eval_config("math", DATASETS, arg, max_new_tokens=4096)
  c.datasets = ",".join(d for d in DATASETS if d != "gpqa_diamond")  # GPQA: give its file.
  if "smoke" in (arg or ""):
    c.datasets = "gsm8k,math500"
  return c
