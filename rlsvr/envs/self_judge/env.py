"""The self-judge (RLSR) environment: the policy answers, an LLM judge rewards.

Per step: one policy call answers every problem `group_size` times (one GRPO
group per problem, group id = the problem's index in the batch); one judge
call reads each (problem, answer) and says 1 or 0. Reward:
`1[judge = 1] + format_bonus * 1[format ok]`; a judge response without a
parseable verdict counts as 0 and is counted.

The formal verifier (Countdown check, integration verifier) runs on every
answer for metrics only: `true_reward` and the judge's accuracy, TPR, TNR and
FPR against it. Metrics whose denominator is empty this step (e.g. TPR with
no correct answer) are left out rather than reported as 0.

The judge is a separate `SampleFn` (its own weights, possibly its own
tokenizer); which weights it holds is the trainer's business
(`judge.JudgeSchedule`). Judge rows are not trajectories: only the policy is
trained.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from rlsvr.envs.base import Completion, EpisodeBatch, SampleFn, Trajectory
from rlsvr.envs.self_judge import countdown, judge
from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.countdown import Verdict

_RULE, _THIN = "=" * 100, "-" * 100


@dataclasses.dataclass
class _Answer:
  problem: int
  completion: Completion
  response: str
  answer: str | None
  verdict: Verdict | None = None
  judge_prompt: str = ""
  judge_response: str = ""
  judge_says: int | None = None
  reward: float = 0.0


def _problem_of(task: str, item: Any) -> Any:
  if task == "countdown":
    return item if isinstance(item, countdown.CountdownProblem) else (
        countdown.CountdownProblem.from_mapping(item))
  from rlsvr.envs.self_judge import integration  # pylint: disable=g-import-not-at-top
  if isinstance(item, integration.Problem):
    return item
  if isinstance(item, str):
    return integration.Problem.from_latex(item)
  return integration.Problem.from_latex(item.get("latex") or item["problem"], item.get("answer"))


class SelfJudgeEnv:
  """Plays RLSR steps; implements `rlsvr.envs.base.Environment`."""

  def __init__(
      self,
      config: SelfJudgeConfig,
      tokenizer: Any,
      *,
      judge_sample: SampleFn | None = None,
      judge_tokenizer: Any = None,
      pool: Any = None,
      chat_template_kwargs: Mapping[str, Any] | None = None,
  ):
    """Args:
      config: the environment.
      tokenizer: the policy's HF-like tokenizer (`apply_chat_template`, `decode`).
      judge_sample: the judge's sampler; None means the policy's `sample` judges
        (the "online" schedule with one model). `play` may override it.
      judge_tokenizer: the judge's tokenizer when it is another model.
      pool: `workers.WorkerPool` for the integration verifier (default pool if None).
      chat_template_kwargs: extra arguments for `apply_chat_template`.
    """
    self.config = config
    self.tokenizer = tokenizer
    self.judge_tokenizer = judge_tokenizer or tokenizer
    self.judge_sample = judge_sample
    self.pool = pool
    self.chat_template_kwargs = dict(chat_template_kwargs or {})

  def state_dict(self) -> dict[str, Any]:
    return {}  # judge weights live with the trainer; the env keeps no state

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    del state

  def encode(self, text: str, *, judge: bool = False) -> list[int]:
    """Prompt ids: `text` as one user message through the policy's (or judge's) chat template."""
    tokenizer = self.judge_tokenizer if judge else self.tokenizer
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True,
        **self.chat_template_kwargs)
    if isinstance(out, Mapping):  # transformers 5 may return a BatchEncoding
      out = out["input_ids"]
    return [int(t) for t in out]

  @staticmethod
  def _sample(sample: SampleFn, prompt_ids: list[list[int]], max_new_tokens: int,
              sampling: Mapping[str, Any]) -> list[Completion]:
    completions = list(sample(prompt_ids, max_new_tokens=max_new_tokens, **sampling))
    if len(completions) != len(prompt_ids):
      raise ValueError(f"sample returned {len(completions)} completions for {len(prompt_ids)} "
                       "prompts")
    return completions

  def policy_prompt(self, problem: Any) -> str:
    if self.config.task == "countdown":
      return countdown.prompt(problem)
    from rlsvr.envs.self_judge import integration  # pylint: disable=g-import-not-at-top
    return integration.prompt(problem)

  def judge_prompt(self, problem: Any, shown: str) -> str:
    if self.config.task == "countdown":
      return judge.countdown_prompt(problem, shown, self.config.judge_template)
    return judge.integration_prompt(problem.display(), shown, problem.definite)

  def _verify(self, problems: list[Any], answers: list[_Answer]) -> list[Verdict]:
    cfg = self.config
    if cfg.task == "countdown":
      return [countdown.check(a.response, problems[a.problem].nums, problems[a.problem].target)
              for a in answers]
    from rlsvr.envs.self_judge import integration  # pylint: disable=g-import-not-at-top
    return integration.check_answers(
        [problems[a.problem] for a in answers], [a.answer for a in answers], "sympy",
        pool=self.pool, time_limit=cfg.verifier_time_limit_s,
        integral_time_limit=cfg.integral_time_limit_s)

  def play(
      self,
      items: Sequence[Any],
      sample: SampleFn,
      rng: np.random.Generator,
      step: int,
      judge_sample: SampleFn | None = None,
  ) -> EpisodeBatch:
    """Answers, verifies and judges every item `group_size` times; see the module docstring."""
    del rng  # sampling randomness lives in the sampler; problems come in order
    cfg = self.config
    problems = [_problem_of(cfg.task, item) for item in items]
    prompts = [self.encode(self.policy_prompt(p)) for p in problems]
    completions = self._sample(sample, [prompts[i] for i in range(len(problems))
                                        for _ in range(cfg.group_size)],
                               cfg.policy_max_new_tokens, cfg.sampling)
    answers = []
    for k, completion in enumerate(completions):
      response = self.tokenizer.decode(list(completion.ids), skip_special_tokens=True)
      answers.append(_Answer(k // cfg.group_size, completion, response,
                             countdown.extract_answer(response)))
    for answer, verdict in zip(answers, self._verify(problems, answers)):
      answer.verdict = verdict

    judge_ids = []
    for a in answers:
      use_answer = cfg.judge_sees == "answer" and a.answer is not None
      shown = a.answer.strip() if use_answer else a.response
      a.judge_prompt = self.judge_prompt(problems[a.problem], shown)
      judge_ids.append(self.encode(a.judge_prompt, judge=True))
    judge_fn = judge_sample or self.judge_sample or sample
    for a, c in zip(answers, self._sample(judge_fn, judge_ids, cfg.judge_max_new_tokens,
                                          cfg.judge_sampling)):
      a.judge_response = self.judge_tokenizer.decode(list(c.ids), skip_special_tokens=True)
      a.judge_says = judge.parse_verdict(a.judge_response)
      a.reward = float(a.judge_says == 1) + cfg.format_bonus * float(a.verdict.format_ok)

    rows = [Trajectory(prompt_ids=list(prompts[a.problem]), completion_ids=list(a.completion.ids),
                       logprobs=list(a.completion.logprobs), reward=a.reward, group_id=a.problem,
                       role="policy", finish_reason=a.completion.finish_reason) for a in answers]
    records = [self._record(step, i, p, [a for a in answers if a.problem == i])
               for i, p in enumerate(problems)]
    return EpisodeBatch(trajectories=rows, metrics=_metrics(answers, rows),
                        record_text=format_record(records[0]) if records else "", records=records)

  def _record(self, step: int, index: int, problem: Any, answers: list[_Answer]) -> dict[str, Any]:
    if self.config.task == "countdown":
      facts = dict(nums=list(problem.nums), target=problem.target)
    else:
      facts = dict(latex=problem.display(), definite=problem.definite)
    return dict(
        step=step, problem=index, task=self.config.task, prompt=self.policy_prompt(problem),
        **facts,
        answers=[dict(response=a.response, answer=a.answer, format_ok=a.verdict.format_ok,
                      correct=a.verdict.correct, reason=a.verdict.reason,
                      judge_response=a.judge_response, judge_says=a.judge_says, reward=a.reward,
                      num_tokens=len(a.completion.ids), finish_reason=a.completion.finish_reason)
                 for a in answers],
        judge_prompt=answers[0].judge_prompt if answers else "")


def _rate(hits: Sequence[bool]) -> float:
  return float(np.mean(hits))


def _metrics(answers: list[_Answer], rows: list[Trajectory]) -> dict[str, float]:
  if not answers:
    return {}
  correct = [a.verdict.correct for a in answers]
  says = [a.judge_says == 1 for a in answers]  # parse failures count as 0
  metrics = {
      "self_judge/reward": _rate([r.reward for r in rows]),
      "self_judge/true_reward": _rate(correct),
      "self_judge/format_rate": _rate([a.verdict.format_ok for a in answers]),
      "verifier/timeouts": float(sum(a.verdict.timed_out for a in answers)),
      "self_judge/judge_positive_rate": _rate(says),
      "self_judge/judge_acc": _rate([s == c for s, c in zip(says, correct)]),
      "self_judge/judge_parse_failures": float(sum(a.judge_says is None for a in answers)),
      "self_judge/judge_parse_failure_rate": _rate([a.judge_says is None for a in answers]),
      "self_judge/response_length/mean": _rate([len(r.completion_ids) for r in rows]),
      "self_judge/response_length/clip_ratio": _rate([r.finish_reason == "length" for r in rows]),
  }
  positives = [s for s, c in zip(says, correct) if c]
  negatives = [s for s, c in zip(says, correct) if not c]
  if positives:
    metrics["self_judge/judge_tpr"] = _rate(positives)
  if negatives:
    metrics["self_judge/judge_tnr"] = 1.0 - _rate(negatives)
    metrics["self_judge/judge_fpr"] = _rate(negatives)
  return metrics


def format_record(record: Mapping[str, Any]) -> str:
  """The human-readable rollouts.txt block of one problem."""
  what = (f"nums={record['nums']} target={record['target']}" if record["task"] == "countdown"
          else f"integral: {record['latex']}")
  lines = [_RULE, f"step {record['step']} | {record['task']} problem {record['problem']} | {what}",
           _THIN, "policy prompt:", record["prompt"], _THIN, "judge prompt (first answer):",
           record["judge_prompt"]]
  for k, a in enumerate(record["answers"], 1):
    lines += [_THIN, f"answer {k}: format_ok={a['format_ok']} correct={a['correct']} "
              f"({a['reason']}) judge={a['judge_says']} reward={a['reward']:.2f}",
              a["response"], "judge:", a["judge_response"]]
  return "\n".join(lines + [_RULE])
