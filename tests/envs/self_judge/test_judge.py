"""Tests for rlsvr.envs.self_judge.judge: prompts, verdict parsing, weight schedules."""
import pytest

from rlsvr.envs.self_judge import judge
from rlsvr.envs.self_judge.countdown import CountdownProblem
from rlsvr.envs.self_judge.judge import INITIAL, KEEP, POLICY, JudgeSchedule

PROBLEM = CountdownProblem((3, 5, 7, 2), 24)


def test_countdown_templates_grow_stricter():
  prompts = [judge.countdown_prompt(PROBLEM, "7*3+5-2", t) for t in (1, 2, 3, 4)]
  for text in prompts:
    assert "[3, 5, 7, 2]" in text and "24" in text and "7*3+5-2" in text
    assert "\\boxed{1}" in text and "\\boxed{0}" in text
  legality = "only +, -, *, / and parentheses"
  assert legality not in prompts[0] and legality in prompts[1] and legality in prompts[2]
  assert "exactly once" not in prompts[1] and "appears, exactly once" in prompts[2]
  assert "ALL of the following" in prompts[3] and "not an equation" in prompts[3]
  assert "exactly once" in prompts[3] and "no exponents" in prompts[3]
  assert all(len(a) < len(b) for a, b in zip(prompts[1:3], prompts[2:]))
  with pytest.raises(ValueError, match="template"):
    judge.countdown_prompt(PROBLEM, "1", 5)


def test_integration_prompt():
  text = judge.integration_prompt(r"\int 2x\,dx", "x**2", definite=False)
  assert r"\int 2x\,dx" in text and "x**2" in text and "Differentiate" in text
  assert "constant" in text
  assert "Evaluate" in judge.integration_prompt(r"\int_0^1 x\,dx", "1/2", definite=True)


@pytest.mark.parametrize("response,verdict", [
    ("\\boxed{1}", 1),
    ("It checks out. \\boxed{ 1 }", 1),
    ("\\boxed{0}", 0),
    ("first \\boxed{1} then on reflection \\boxed{0}", 0),
    ("\\boxed{0} no wait \\boxed{1}", 1),
    ("The answer is correct: 1", None),
    ("\\boxed{yes}", None),
    ("\\boxed{10}", None),
    ("\\boxed{}", None),
    ("", None),
])
def test_parse_verdict(response, verdict):
  assert judge.parse_verdict(response) == verdict


def test_fixed_and_online_schedules():
  fixed, online = JudgeSchedule("fixed"), JudgeSchedule("online")
  assert [fixed.weights_at(s) for s in (1, 50, 51, 1000)] == [INITIAL] * 4
  assert [online.weights_at(s) for s in (1, 2, 50, 1000)] == [POLICY] * 4
  assert not fixed.judge_needs_checkpoint(100) and not online.judge_needs_checkpoint(100)


def test_delayed_schedule():
  schedule = JudgeSchedule("delayed")
  assert schedule.delay_steps == 50
  got = {s: schedule.weights_at(s) for s in (1, 49, 50, 51, 100, 150)}
  assert got == {1: INITIAL, 49: INITIAL, 50: POLICY, 51: KEEP, 100: KEEP, 150: KEEP}
  assert not schedule.judge_needs_checkpoint(49) and schedule.judge_needs_checkpoint(50)
  every = JudgeSchedule("delayed", delay_steps=3, repeat=True)
  assert [every.weights_at(s) for s in range(1, 10)] == [
      INITIAL, INITIAL, POLICY, KEEP, KEEP, POLICY, KEEP, KEEP, POLICY]


def test_schedule_validation():
  with pytest.raises(ValueError, match="mode"):
    JudgeSchedule("sometimes")
  with pytest.raises(ValueError, match="delay_steps"):
    JudgeSchedule("delayed", delay_steps=0)
  with pytest.raises(ValueError, match="from 1"):
    JudgeSchedule().weights_at(0)
