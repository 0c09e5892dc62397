"""Reward functions as a registered environment (`env = "reward_fn"`): config, data, plan.

Single-turn RLVR: a dataset of prompts (`data.source`, see `data.py`) and
Python reward functions named by import path in `reward_fn.reward_funcs`,
called with TRL's convention (`rlsvr.rewards.calling`), so a TRL user's
function works unchanged. `env.py` plays a step.
"""
from __future__ import annotations

from rlsvr import seeding
from rlsvr.envs import registry
from rlsvr.envs.items import ItemStream, StreamExperiment, round_rng
from rlsvr.envs.reward_fn import data
from rlsvr.envs.reward_fn.config import RewardFnConfig
from rlsvr.rewards.calling import RewardSet

# Prompt content beyond the template, for the memory plan only: a competition problem with
# its instruction is ~100-300 tokens; `python -m rlsvr.plan --prompt_tokens=policy=N` overrides.
PROMPT_CONTENT_TOKENS = 256


def check(c) -> None:
  """ValueError naming the key: bad fields, a reward function that does not import, a data
  source of no known kind. Imports the reward functions' modules, loads no data."""
  try:
    cfg = RewardFnConfig.from_config(c)
    RewardSet(cfg.paths(), cfg.weights())
    data.check_source(c.data.source)
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (reward_fn.*): {e}") from None


class RewardFnExperiment(StreamExperiment):
  """One group of `group_size` completions per prompt per step."""

  def __init__(self, ctx: registry.BuildContext):
    from rlsvr.envs.reward_fn.env import RewardFnEnv  # noqa: PLC0415

    c = self.c = ctx.config
    self.env = RewardFnEnv(RewardFnConfig.from_config(c), ctx.tokenizer, max_steps=c.steps,
                           chat_template_kwargs=ctx.chat_template_kwargs)
    self.items = ItemStream(data.load_rows(c), c.reward_fn.prompts_per_step,
                            seeding.derive(c.seed, "items"))

  def play_round(self, step: int, sample, policy_params, round_: int = 0):
    del policy_params
    return self.env.play_episodes(self.items.next_step(), sample,
                                  round_rng(self.c.seed, step, round_), step)


def plan(c, est) -> registry.EnvPlan:
  """One policy call of prompts x group_size rows; one train phase over all of them."""
  r = c.reward_fn
  rows = r.prompts_per_step * r.group_size
  call = registry.SamplerCall("policy", rows, est.template_tokens + PROMPT_CONTENT_TOKENS,
                              r.max_new_tokens, rows_per_prompt=r.group_size)
  phase = registry.TrainPhase("policy", rows, ("policy",), r.max_new_tokens)
  note = (f"reward_fn prompts: template {est.template_tokens} + ~{PROMPT_CONTENT_TOKENS} "
          "content tokens (a guess; --prompt_tokens=policy=N)")
  return registry.EnvPlan((call,), (phase,), notes=(note,))


SPEC = registry.register(registry.EnvSpec(
    name="reward_fn", check=check, build=RewardFnExperiment, plan=plan,
    console=(("rewards/accuracy/mean", "acc", "{:.2f}"),),
    plots=(("reward functions", ("rewards/accuracy/mean", "rewards/format/mean")),)))
