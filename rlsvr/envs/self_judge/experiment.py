"""RLSR as a registered environment (`env = "rlsr"`): config, problems, the judge's weights.

The policy answers each problem G times; a judge model (by default the policy's
initial weights) rewards the answers. `rlsvr.envs.self_judge.env` plays a step;
this module owns what the trainer needs around it: the judge's sampler and
weights (fixed, delayed copy, online), their checkpointing, and the plan.
"""
from __future__ import annotations

import itertools
from typing import Any

from rlsvr import seeding
from rlsvr.envs import registry
from rlsvr.envs.items import ItemStream, StreamExperiment, round_rng
from rlsvr.envs.spy.experiment import sampling_of


def self_judge_config(c):
  from rlsvr.envs.self_judge.config import SelfJudgeConfig  # noqa: PLC0415

  fields = {k: v for k, v in c.rlsr.items() if k != "problems_per_step"}
  judge_sampling = dict(temperature=c.judge.temperature, top_p=1.0, top_k=0)
  return SelfJudgeConfig(**fields, sampling=sampling_of(c), judge_sampling=judge_sampling)


def check(c) -> None:
  try:
    cfg = self_judge_config(c)
    if c.rlsr.problems_per_step < 1:
      raise ValueError("problems_per_step must be >= 1")
    if c.judge.source and cfg.judge_weights != "fixed":
      raise ValueError("a judge with its own judge.source can only use judge_weights='fixed' "
                       "(delayed/online copy the policy's weights into the judge)")
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (rlsr.*): {e}") from None


def rlsr_problems(c) -> list[Any]:
  """The problem set named by `data.source` for `rlsr.task` (see the task's `load_problems`)."""
  from rlsvr.envs.self_judge.tasks import get_task  # noqa: PLC0415

  return get_task(c.rlsr.task).load_problems(c.data.source, split=c.data.split,
                                             limit=c.data.limit or None, seed=c.seed)


class SelfJudgeExperiment(StreamExperiment):
  """RLSR: the policy answers each problem G times; a judge model rewards the answers.

  With `heldout.size > 0` the last min(size, problems // 2) problems are held out of
  training; `evaluate` answers and judges them (the judge as the schedule has it now),
  `problems_per_step` at a time (the step's sampler shapes).
  """

  def __init__(self, ctx: registry.BuildContext):
    from rlsvr.envs.self_judge.env import SelfJudgeEnv  # noqa: PLC0415
    from rlsvr.model import sources  # noqa: PLC0415
    from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
    from rlsvr.sampling import Sampler  # noqa: PLC0415

    c = self.c = ctx.config
    cfg = self_judge_config(c)
    self.schedule = cfg.schedule()
    if c.judge.source:  # Another model judges, with its own tokenizer and sampler.
      mesh = ctx.mesh
      jconfig, self.judge_params, jtok = sources.load_model(
          c.judge.source, dtype=c.model.compute_dtype, mesh=mesh if mesh.size > 1 else None,
          seed=c.seed, tokenizer=c.judge.tokenizer)
    else:
      jconfig, jtok, self.judge_params = ctx.model_config, ctx.tokenizer, ctx.initial_params
      if self.schedule.mode == "online":  # It reads the policy's weights: keep no copy.
        self.judge_params = None
    self.judge_sampler = Sampler(jconfig, eos_ids=stop_ids(jconfig, jtok), tokenizer=jtok,
                                 max_rows=c.sampling.max_rows,
                                 max_cache_tokens=c.sampling.max_cache_tokens)
    self.env = SelfJudgeEnv(cfg, ctx.tokenizer, judge_tokenizer=jtok,
                            chat_template_kwargs=ctx.chat_template_kwargs)
    problems = rlsr_problems(c)
    held = min(c.heldout.size, len(problems) // 2)
    self.heldout_problems = problems[len(problems) - held:] if held else []
    self.items = ItemStream(problems[:len(problems) - held], c.rlsr.problems_per_step,
                            seeding.derive(c.seed, "items"))
    self._judge_calls = (0, itertools.count())  # (step, counter): rounds of a step share it

  def play_round(self, step: int, sample, policy_params, round_: int = 0):
    """One round of `step`; `policy_params` are the sampler's (compute-dtype) weights."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    weights = self.schedule.weights_at(step)
    if weights == "policy" and self.schedule.mode == "delayed" and round_ == 0:
      # A copy, not an alias: the train step donates (invalidates) the policy's buffers.
      self.judge_params = jax.tree.map(jnp.copy, policy_params)
    judge_params = policy_params if self.schedule.mode == "online" else self.judge_params
    if self._judge_calls[0] != step:
      self._judge_calls = (step, itertools.count())
    calls = self._judge_calls[1]

    def judge_sample(prompts, **kw):
      seed = seeding.derive(self.c.seed, "judge", step, next(calls))
      return self.judge_sampler(judge_params, prompts, seed=seed, **kw)

    return self.env.play_episodes(self.items.next_step(), sample,
                                  round_rng(self.c.seed, step, round_), step,
                                  judge_sample=judge_sample)

  def release_weights(self) -> None:
    """Drops the judge sampler's decode layout of its weights (the trainer calls this before
    each update, which the planner sizes without any sampler's layout)."""
    self.judge_sampler.release_weights()

  def evaluate(self, sample, policy_params):
    judge_params = policy_params if self.schedule.mode == "online" else self.judge_params
    calls = itertools.count()

    def judge_sample(prompts, **kw):
      seed = seeding.derive(self.c.seed, "heldout-judge", next(calls))
      return self.judge_sampler(judge_params, prompts, seed=seed, **kw)

    per_call = self.c.heldout.per_call or self.c.rlsr.problems_per_step
    return self.env.evaluate(self.heldout_problems, sample, judge_sample,
                             problems_per_call=per_call)

  def model_state(self, step: int) -> dict[str, Any]:
    """The judge's weights when they are a delayed copy (fixed ones are rebuilt, online
    ones are the policy's)."""
    return {"judge": self.judge_params} if self.schedule.judge_needs_checkpoint(step) else {}

  def load_model_state(self, params) -> None:
    if "judge" in params:
      self.judge_params = params["judge"]


def plan(c, est) -> registry.EnvPlan:
  r = c.rlsr
  rows = r.problems_per_step * r.group_size
  # No judge.source: the experiment keeps the initial weights (or a delayed copy). An
  # online judge reads the policy's; a LoRA run's initial weights are its frozen base,
  # shared: then only a delayed judge copies.
  lora = c.model.get("lora") is not None and c.model.lora.rank > 0
  mode = self_judge_config(c).schedule().mode
  shares = not c.judge.source and (mode == "online" or (lora and mode != "delayed"))
  judge = "" if shares else "judge"
  calls = (registry.SamplerCall("policy", rows, est.template_tokens, r.policy_max_new_tokens,
                                rows_per_prompt=r.group_size),
           registry.SamplerCall("judge", rows, est.template_tokens + r.policy_max_new_tokens,
                                min(r.judge_max_new_tokens, 8) if r.constrained_verdict
                                else r.judge_max_new_tokens, model=judge))
  notes = (f"rlsr prompts: policy = template {est.template_tokens}; judge = template + a whole "
           f"response ({r.policy_max_new_tokens}: one answer without <answer> suffices)",
           *(["the judge reads the policy's weights or its frozen LoRA base: no copy"]
             if shares else []))
  return registry.EnvPlan(calls, (registry.TrainPhase("policy", rows, ("policy",),
                                                      r.policy_max_new_tokens),),
                          extra_models={} if shares else {judge: c.judge.source}, notes=notes)


SPEC = registry.register(registry.EnvSpec(
    name="rlsr", check=check, build=SelfJudgeExperiment, plan=plan,
    # judge: accuracy over the verdicts it gave; no-verdict: the share it did not give.
    console=(("self_judge/true_reward", "true", "{:.2f}"),
             ("self_judge/judge_acc", "judge", "{:.2f}"),
             ("self_judge/judge_parse_failure_rate", "no-verdict", "{:.2f}")),
    plots=(("judge accuracy", ("self_judge/judge_acc", "self_judge/true_reward",
                               "self_judge/judge_tpr", "self_judge/judge_tnr")),)))
