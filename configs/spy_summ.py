"""SpyRL, summarisation task (DESIGN.md "The spy game").

  python -m rlsvr.train --config=configs/spy_summ.py            # paper settings, 8 GPUs
  python -m rlsvr.train --config=configs/spy_summ.py:cpu        # SmolLM2-135M on the CPU
  python -m rlsvr.train --config=configs/spy_summ.py:cpu,detectors  # the main job (train.sh)
  python -m rlsvr.train --config=configs/spy_summ.py:smoke      # seconds, random tiny model
  python -m rlsvr.train --config=configs/spy_summ.py:sequential --config.steps=50

Variants are listed in configs/spy_common.py.
"""
from configs.spy_common import spy_config


def get_config(arg=None):
  return spy_config("summarisation", arg)
