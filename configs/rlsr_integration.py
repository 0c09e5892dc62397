"""RLSR, integration (DESIGN.md "RLSR"): the model judges its own answers.

  python -m rlsvr.train --config=configs/rlsr_integration.py              # paper settings
  python -m rlsvr.train --config=configs/rlsr_integration.py:cpu          # SmolLM2-135M on the CPU
  python -m rlsvr.train --config=configs/rlsr_integration.py:smoke        # seconds, random tiny model
  python -m rlsvr.train --config=configs/rlsr_integration.py:cpu,delayed  # judge schedule

The judge prompt is rlsvr/envs/self_judge/prompts/integration_1.txt (differentiate the
candidate and compare with the integrand; definite integrals: compare values);
`--config.rlsr.judge_template=PATH.txt` picks a file of your own. Variants are listed in
configs/rlsr_common.py.
"""
from configs.rlsr_common import rlsr_config


def get_config(arg=None):
  return rlsr_config("integration", arg)
