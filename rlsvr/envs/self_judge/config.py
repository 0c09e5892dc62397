"""Configuration of the self-judge (RLSR) environment: one frozen dataclass."""
from __future__ import annotations

import dataclasses
from typing import Any

from rlsvr.envs.self_judge import judge, tasks, templates


@dataclasses.dataclass(frozen=True)
class SelfJudgeConfig:
  """How problems are answered, judged and rewarded.

  Attributes:
    task: a task name (`tasks.names()`: "countdown", "integration") or
      "package.module:name" of a module that registers one.
    group_size: answers per problem (G); one GRPO group per problem.
    judge_template: the judge prompt: "" (the task's default; Countdown's is
      "countdown_4", the paper's final prompt), a built-in name
      (`templates.names()`: "countdown_1" .. "countdown_4", "integration_1")
      or the path of a `.txt` template (`templates` says how to write one).
    format_bonus: reward for a well-formed `<answer>` (added to 1[judge = 1]).
    judge_sees: "answer" (the last `<answer>` block, or the whole response
      when there is none) or "response" (always the whole response).
    judge_weights, judge_delay_steps, judge_repeat: the judge-weights
      schedule (`judge.JudgeSchedule`), applied by the trainer.
    policy_max_new_tokens, judge_max_new_tokens: length limits per call.
    answer_prefill: text every policy reply starts with (after the chat
      template's assistant header; e.g. "<answer>"); the answer extraction,
      the verifier and the judge read it + the completion, and it is not
      trained on. For models too small to follow the format; "" : none.
    constrained_verdict: the judge's reply is `\\boxed{` and then `1}` or
      `0}`, drawn by the sampler from the judge's distribution restricted to
      these two (`rlsvr.sampling.choices`; no reasoning, judge_max_new_tokens
      unused). For judges too small to write a parseable verdict.
    sampling, judge_sampling: extra keyword arguments for the policy's and
      the judge's `sample` calls (temperature, top_p, ...).
    verifier_time_limit_s, integral_time_limit_s: safety-net time limits of
      the integration verifier, per answer and stage and per problem value.
      Its decisions are bounded by operation counts; an answer that hits the
      limit is scored as unparseable and counted in `verifier/timeouts`.
  """

  task: str = "countdown"
  group_size: int = 8
  judge_template: str = ""
  format_bonus: float = 0.1
  judge_sees: str = "answer"
  judge_weights: str = "fixed"
  judge_delay_steps: int = 50
  judge_repeat: bool = False
  policy_max_new_tokens: int = 1024
  judge_max_new_tokens: int = 1024
  answer_prefill: str = ""
  constrained_verdict: bool = False
  sampling: dict[str, Any] = dataclasses.field(default_factory=dict)
  judge_sampling: dict[str, Any] = dataclasses.field(default_factory=dict)
  verifier_time_limit_s: float = 30.0
  integral_time_limit_s: float = 300.0

  def __post_init__(self):
    checks = [
        (self.group_size >= 1, "group_size must be >= 1"),
        (self.judge_sees in ("answer", "response"), "judge_sees must be 'answer' or 'response'"),
        (self.judge_weights in judge.JUDGE_MODES, f"judge_weights must be in {judge.JUDGE_MODES}"),
        (self.judge_delay_steps >= 1, "judge_delay_steps must be >= 1"),
        (self.verifier_time_limit_s > 0 and self.integral_time_limit_s > 0,
         "verifier time limits must be > 0"),
    ]
    for ok, message in checks:
      if not ok:
        raise ValueError(f"SelfJudgeConfig: {message}")
    try:
      self.template()  # loads the task and reads the template: bad names fail here, not mid-run
    except ValueError as e:
      raise ValueError(f"SelfJudgeConfig: {e}") from None

  def task_spec(self) -> tasks.Task:
    return tasks.get_task(self.task)

  def template(self) -> templates.JudgeTemplate:
    return templates.load_template(self.judge_template, self.task_spec())

  def schedule(self) -> judge.JudgeSchedule:
    return judge.JudgeSchedule.from_config(self)
