"""RLSR, countdown (DESIGN.md "RLSR"): the model judges its own answers.

  python -m rlsvr.train --config=configs/rlsr_countdown.py              # paper settings
  python -m rlsvr.train --config=configs/rlsr_countdown.py:cpu          # SmolLM2-135M on the CPU
  python -m rlsvr.train --config=configs/rlsr_countdown.py:smoke        # seconds, random tiny model
  python -m rlsvr.train --config=configs/rlsr_countdown.py:cpu,delayed  # judge schedule
  python -m rlsvr.train --config=configs/rlsr_countdown.py:t1           # ablation: lax judge

The judge prompt is rlsvr/envs/self_judge/prompts/countdown_4.txt, the paper's final, stable
one (every condition listed, all must hold, no equation); t1 .. t3 pick the laxer templates,
`--config.rlsr.judge_template=PATH.txt` a file of your own. Variants are listed in
configs/rlsr_common.py.
"""
from configs.rlsr_common import rlsr_config


def get_config(arg=None):
  return rlsr_config("countdown", arg)
