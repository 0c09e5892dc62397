"""Tests for rlsvr.envs.self_judge.templates: judge prompts as data, checked at config time."""
import pytest

from configs import rlsr_countdown, rlsr_integration
from rlsvr.envs.self_judge import tasks, templates
from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.countdown import CountdownProblem

COUNTDOWN = tasks.get_task("countdown")
PROBLEM = CountdownProblem((3, 5, 7, 2), 24)
GOOD = ("Numbers [{{nums}}], target {{target}}, answer {{answer}}. "
        "Say \\boxed{1} or \\boxed{0}.")


def _config_of(c) -> SelfJudgeConfig:
  return SelfJudgeConfig(**{k: v for k, v in c.rlsr.items() if k != "problems_per_step"})


def test_countdown_default_is_the_papers_final_prompt_4():
  assert SelfJudgeConfig().template().name == "countdown_4"
  config = _config_of(rlsr_countdown.get_config())
  assert config.template().name == "countdown_4"
  text = config.template().prompt(PROBLEM, "7*3+5-2")
  assert "ALL of the following" in text and "not an equation" in text


def test_strictness_variants_stay_ablations():
  for k in (1, 2, 3, 4):
    config = _config_of(rlsr_countdown.get_config(f"cpu,t{k}"))
    assert config.template().name == f"countdown_{k}"
  assert _config_of(rlsr_integration.get_config()).template().name == "integration_1"
  with pytest.raises(ValueError, match="lacks the placeholder"):
    _config_of(rlsr_integration.get_config("t2"))  # a Countdown prompt for integrals


def test_builtin_names():
  assert {"countdown_1", "countdown_2", "countdown_3", "countdown_4", "integration_1"} <= set(
      templates.names())


def test_load_by_name_and_by_path(tmp_path):
  assert templates.load_template("countdown_2", COUNTDOWN).name == "countdown_2"
  assert templates.load_template("", COUNTDOWN).name == "countdown_4"
  path = tmp_path / "mine.txt"
  path.write_text(GOOD + "\n")
  mine = templates.load_template(str(path), COUNTDOWN)
  # The answer is untrusted text: its placeholders are not expanded.
  assert mine.prompt(PROBLEM, "{{target}}") == (
      "Numbers [3, 5, 7, 2], target 24, answer {{target}}. Say \\boxed{1} or \\boxed{0}.")
  assert SelfJudgeConfig(judge_template=str(path)).template().texts == mine.texts


@pytest.mark.parametrize("spec,match", [
    ("countdown_9", r"unknown judge template 'countdown_9'; available: \[.*'countdown_4'"),
    ("missing/judge.txt", "does not exist"),
    (4, "template name or a .txt path"),
])
def test_bad_names(spec, match):
  with pytest.raises(ValueError, match=match):
    templates.load_template(spec, COUNTDOWN)
  with pytest.raises(ValueError, match="SelfJudgeConfig"):
    SelfJudgeConfig(judge_template=spec)


@pytest.mark.parametrize("text,match", [
    (GOOD.replace("{{target}}", "24"), r"lacks the placeholder\(s\) \{\{target\}\}"),
    (GOOD.replace("{{answer}}", "?"), r"lacks .*\{\{answer\}\}"),
    (GOOD + " {{problem}}", r"uses \{\{problem\}\}, which task 'countdown' does not fill"),
    (GOOD.replace("\\boxed{0}", "no"), r"\\boxed\{1\} or \\boxed\{0\}"),
    ("[[indefinite]]\n" + GOOD, "needs one text without"),
])
def test_templates_unfit_for_their_task(tmp_path, text, match):
  path = tmp_path / "bad.txt"
  path.write_text(text)
  with pytest.raises(ValueError, match=match):
    templates.load_template(str(path), COUNTDOWN)


def test_sectioned_templates(tmp_path):
  task = tasks.get_task("integration")
  body = "Check {{answer}} for ${{problem}}$: \\boxed{1} or \\boxed{0}."
  one = tmp_path / "one.txt"
  one.write_text(body)
  plain = templates.load_template(str(one), task)
  assert plain.render("definite", {"problem": "I", "answer": "a"}) == plain.render(
      "indefinite", {"problem": "I", "answer": "a"})
  partial = tmp_path / "partial.txt"
  partial.write_text("[[indefinite]]\n" + body)
  with pytest.raises(ValueError, match=r"needs sections \['indefinite', 'definite'\]"):
    templates.load_template(str(partial), task)
  preamble = tmp_path / "preamble.txt"
  preamble.write_text(f"Hello\n[[indefinite]]\n{body}\n[[definite]]\n{body}\n")
  with pytest.raises(ValueError, match="before its first"):
    templates.load_template(str(preamble), task)
  builtin = templates.load_template("integration_1", task)
  assert "Differentiate" in builtin.render("indefinite", {"problem": "I", "answer": "a"})
  assert "Evaluate" in builtin.render("definite", {"problem": "I", "answer": "a"})
