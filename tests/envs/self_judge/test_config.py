"""Tests for rlsvr.envs.self_judge.config."""
import dataclasses

import pytest

from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.judge import JudgeSchedule


def test_defaults_and_schedule():
  config = SelfJudgeConfig()
  assert (config.task, config.group_size, config.format_bonus) == ("countdown", 8, 0.1)
  assert config.schedule() == JudgeSchedule("fixed", 50, False)
  delayed = SelfJudgeConfig(judge_weights="delayed", judge_delay_steps=10, judge_repeat=True)
  assert delayed.schedule() == JudgeSchedule("delayed", 10, True)
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.task = "integration"  # type: ignore[misc]


@pytest.mark.parametrize("field,value", [
    ("task", "chess"), ("group_size", 0), ("judge_template", "countdown_5"),
    ("judge_template", 4), ("judge_sees", "all"),
    ("judge_weights", "sometimes"), ("judge_delay_steps", 0), ("verifier_time_limit_s", 0.0),
])
def test_validation(field, value):
  with pytest.raises(ValueError, match="SelfJudgeConfig"):
    SelfJudgeConfig(**{field: value})
