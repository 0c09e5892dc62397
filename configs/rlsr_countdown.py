"""RLSR, countdown (DESIGN.md "RLSR"): the model judges its own answers.

  python -m rlsvr.train --config=configs/rlsr_countdown.py              # paper settings
  python -m rlsvr.train --config=configs/rlsr_countdown.py:cpu          # SmolLM2-135M on the CPU
  python -m rlsvr.train --config=configs/rlsr_countdown.py:smoke        # seconds, random tiny model
  python -m rlsvr.train --config=configs/rlsr_countdown.py:cpu,delayed  # judge schedule

Variants are listed in configs/rlsr_common.py.
"""
from configs.rlsr_common import rlsr_config


def get_config(arg=None):
  return rlsr_config("countdown", arg)
