"""The self-judge (RLSR) environment: the policy answers, an LLM judge rewards.

Per step: one policy call answers every problem `group_size` times (one GRPO
group per problem, group id = the problem's index in the batch); one judge
call reads each (problem, answer) and says 1 or 0. Reward:
`1[judge = 1] + format_bonus * 1[format ok]`; a judge response without a
parseable verdict counts as 0 and is counted. The judge's accuracy, TPR and
TNR are over the verdicts it gave; `judge_parse_failure_rate` is the rest.

What a problem is, the policy's prompt, the answer's extraction, the format
check, the formal verifier and the judge's facts come from the task
(`tasks.Task`, by the name `config.task`); the judge prompt is the config's
template (`templates`). The formal verifier runs on every answer for metrics
only: `true_reward` and the judge's accuracy, TPR, TNR and FPR against it.
Metrics whose denominator is empty this step (e.g. TPR with no correct
answer) are left out rather than reported as 0.

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
from rlsvr.envs.self_judge import judge
from rlsvr.envs.self_judge.config import SelfJudgeConfig
from rlsvr.envs.self_judge.tasks import Verdict
from rlsvr.model.tokenizer import encode_chat

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
        (the "online" schedule with one model). `play_episodes` may override it.
      judge_tokenizer: the judge's tokenizer when it is another model.
      pool: `workers.WorkerPool` for verifiers that need one (default pool if None).
      chat_template_kwargs: extra arguments for `apply_chat_template`.
    """
    self.config = config
    self.task = config.task_spec()
    self.judge_template = config.template()
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
    return encode_chat(tokenizer, text, chat_template_kwargs=self.chat_template_kwargs)

  @staticmethod
  def _sample(sample: SampleFn, prompt_ids: list[list[int]], max_new_tokens: int,
              sampling: Mapping[str, Any]) -> list[Completion]:
    completions = list(sample(prompt_ids, max_new_tokens=max_new_tokens, **sampling))
    if len(completions) != len(prompt_ids):
      raise ValueError(f"sample returned {len(completions)} completions for {len(prompt_ids)} "
                       "prompts")
    return completions

  def _verify(self, problems: list[Any], answers: list[_Answer]) -> list[Verdict]:
    return self.task.verify([problems[a.problem] for a in answers], [a.response for a in answers],
                            config=self.config, pool=self.pool)

  def _answer_and_judge(self, items: Sequence[Any], sample: SampleFn,
                        judge_sample: SampleFn | None):
    """Answers every problem `group_size` times, verifies and judges each answer."""
    cfg = self.config
    problems = [self.task.as_problem(item) for item in items]
    prompts = [self.encode(self.task.policy_prompt(p)) + self._prefill_ids() for p in problems]
    completions = self._sample(sample, [prompts[i] for i in range(len(problems))
                                        for _ in range(cfg.group_size)],
                               cfg.policy_max_new_tokens, cfg.sampling)
    answers = []
    for k, completion in enumerate(completions):
      response = cfg.answer_prefill + self.tokenizer.decode(list(completion.ids),
                                                            skip_special_tokens=True)
      answers.append(_Answer(k // cfg.group_size, completion, response,
                             self.task.extract_answer(response)))
    for answer, verdict in zip(answers, self._verify(problems, answers)):
      answer.verdict = verdict

    judge_ids = []
    for a in answers:
      use_answer = cfg.judge_sees == "answer" and a.answer is not None
      shown = a.answer.strip() if use_answer else a.response
      a.judge_prompt = self.judge_template.prompt(problems[a.problem], shown)
      judge_ids.append(self.encode(a.judge_prompt, judge=True) + self._verdict_prefill_ids())
    judge_kwargs = dict(cfg.judge_sampling)
    max_new = cfg.judge_max_new_tokens
    if cfg.constrained_verdict:
      judge_kwargs["choices"] = [self.judge_tokenizer.encode(v, add_special_tokens=False)
                                 for v in ("1}", "0}")]
      max_new = max(map(len, judge_kwargs["choices"]))
    for a, c in zip(answers, self._sample(judge_sample or sample, judge_ids, max_new,
                                          judge_kwargs)):
      a.judge_response = self._verdict_prefill() + self.judge_tokenizer.decode(
          list(c.ids), skip_special_tokens=True)
      a.judge_says = judge.parse_verdict(a.judge_response)
      a.reward = float(a.judge_says == 1) + cfg.format_bonus * float(a.verdict.format_ok)
    return problems, prompts, answers

  def _prefill_ids(self) -> list[int]:
    prefill = self.config.answer_prefill
    return self.tokenizer.encode(prefill, add_special_tokens=False) if prefill else []

  def _verdict_prefill(self) -> str:
    return "\\boxed{" if self.config.constrained_verdict else ""

  def _verdict_prefill_ids(self) -> list[int]:
    prefill = self._verdict_prefill()
    return self.judge_tokenizer.encode(prefill, add_special_tokens=False) if prefill else []

  def evaluate(self, items: Sequence[Any], sample: SampleFn,
               judge_sample: SampleFn | None = None, problems_per_call: int = 0
               ) -> dict[str, float]:
    """Answers and judges `items` like a step, without training rows: the true reward,
    the judge's reward, and the judge's accuracy, TPR and TNR over its parsed verdicts,
    each with its standard error over answers (`k/se`), and the unparsed share.
    `problems_per_call` > 0 plays that many problems at a time (0: all at once)."""
    from rlsvr import heldout  # noqa: PLC0415

    chunk = problems_per_call or max(len(items), 1)
    answers = [a for i in range(0, len(items), chunk)
               for a in self._answer_and_judge(items[i:i + chunk], sample,
                                               judge_sample or self.judge_sample)[2]]
    parsed = [(a.judge_says, a.verdict.correct) for a in answers if a.judge_says is not None]
    out = {**heldout.with_se("true_reward", [float(a.verdict.correct) for a in answers]),
           **heldout.with_se("reward", [a.reward for a in answers]),
           **heldout.with_se("format_rate", [float(a.verdict.format_ok) for a in answers]),
           "judge_unparsed_rate": float(np.mean([a.judge_says is None for a in answers]))}
    for name, pairs in (("judge_acc", parsed), ("judge_tpr", [p for p in parsed if p[1]]),
                        ("judge_tnr", [p for p in parsed if not p[1]])):
      if pairs:
        out.update(heldout.with_se(name, [float(s == c) for s, c in pairs]))
    return out

  def play_episodes(
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
    problems, prompts, answers = self._answer_and_judge(items, sample,
                                                        judge_sample or self.judge_sample)
    rows = [Trajectory(prompt_ids=list(prompts[a.problem]), completion_ids=list(a.completion.ids),
                       logprobs=list(a.completion.logprobs), reward=a.reward, group_id=a.problem,
                       role="policy", finish_reason=a.completion.finish_reason,
                       max_new_tokens=cfg.policy_max_new_tokens) for a in answers]
    records = [self._record(step, i, p, [a for a in answers if a.problem == i])
               for i, p in enumerate(problems)]
    text = format_record(records[0], self.task.describe(problems[0])) if records else ""
    return EpisodeBatch(trajectories=rows, metrics=_metrics(answers, rows), record_text=text,
                        records=records)

  def _record(self, step: int, index: int, problem: Any, answers: list[_Answer]) -> dict[str, Any]:
    return dict(
        step=step, problem=index, task=self.task.name, prompt=self.task.policy_prompt(problem),
        **self.task.record_facts(problem),
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
  says = [a.judge_says == 1 for a in answers]  # the reward: no verdict counts as 0
  metrics = {
      "self_judge/reward": _rate([r.reward for r in rows]),
      "self_judge/true_reward": _rate(correct),
      "self_judge/format_rate": _rate([a.verdict.format_ok for a in answers]),
      "verifier/timeouts": float(sum(a.verdict.timed_out for a in answers)),
      "self_judge/judge_positive_rate": _rate(says),
      "self_judge/judge_parse_failures": float(sum(a.judge_says is None for a in answers)),
      "self_judge/judge_parse_failure_rate": _rate([a.judge_says is None for a in answers]),
      "self_judge/response_length/mean": _rate([len(r.completion_ids) for r in rows]),
      "self_judge/response_length/clip_ratio": _rate([r.finish_reason == "length" for r in rows]),
  }
  # The judge's quality over the verdicts it gave: an unparsed verdict is no evidence either
  # way (counted as a rejection it made a judge that never answers look perfect on negatives).
  parsed = [(a.judge_says, c) for a, c in zip(answers, correct) if a.judge_says is not None]
  if parsed:
    metrics["self_judge/judge_acc"] = _rate([s == c for s, c in parsed])
  positives = [s for s, c in parsed if c]
  negatives = [s for s, c in parsed if not c]
  if positives:
    metrics["self_judge/judge_tpr"] = _rate([s == 1 for s in positives])
  if negatives:
    metrics["self_judge/judge_tnr"] = _rate([s == 0 for s in negatives])
    metrics["self_judge/judge_fpr"] = _rate([s == 1 for s in negatives])
  return metrics


def format_record(record: Mapping[str, Any], problem_line: str) -> str:
  """The human-readable rollouts.txt block of one problem (`problem_line`: `Task.describe`)."""
  header = f"step {record['step']} | {record['task']} problem {record['problem']} | {problem_line}"
  lines = [_RULE, header, _THIN, "policy prompt:", record["prompt"], _THIN,
           "judge prompt (first answer):", record["judge_prompt"]]
  for k, a in enumerate(record["answers"], 1):
    lines += [_THIN, f"answer {k}: format_ok={a['format_ok']} correct={a['correct']} "
              f"({a['reason']}) judge={a['judge_says']} reward={a['reward']:.2f}",
              a["response"], "judge:", a["judge_response"]]
  return "\n".join(lines + [_RULE])
