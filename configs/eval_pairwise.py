"""Pairwise A/B win rate of a model against its base (SpyRL), judged both orders.

  # an OpenAI-compatible judge (key from $OPENAI_API_KEY)
  python -m rlsvr.eval --config=configs/eval_pairwise.py --config.model=runs/spy_write \
      --config.base_model=hub:Qwen/Qwen3-4B-Instruct-2507 --config.judge.kind=http \
      --config.judge.base_url=https://api.openai.com/v1 --config.judge.model=gpt-4.1
  # a local judge through our sampler
  python -m rlsvr.eval --config=configs/eval_pairwise.py --config.model=runs/spy_summ \
      --config.judge.model=hub:Qwen/Qwen3-32B --config.datasets=govreport
  python -m rlsvr.eval --config=configs/eval_pairwise.py:smoke --workdir=/tmp/eval_ab

Summarisation datasets are judged overall; writingprompts and writingbench on
novelty, emotion, coherence, consistency and overall. Variants: configs/eval_common.py.
"""
from configs.eval_common import eval_config
from configs.eval_summ import DATASETS as SUMM_DATASETS

DATASETS = ("writingprompts", "writingbench") + SUMM_DATASETS


def get_config(arg=None):
  c = eval_config("pairwise", DATASETS, arg, max_new_tokens=1024)
  c.datasets = "writingprompts,writingbench,govreport"
  c.base_model = "hub:Qwen/Qwen3-4B-Instruct-2507"  # The model before training.
  c.base_tokenizer = ""
  if "cpu" in (arg or ""):
    c.base_model = "smollm2"
  if "smoke" in (arg or ""):
    c.base_model = "random:tiny"
    c.base_tokenizer = "qwen3"
    c.datasets = "writingprompts"
  return c
