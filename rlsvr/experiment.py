"""What a config's `env` means to the trainer: the environment, its data, its judge.

The training loop (`rlsvr.train`) is the same for every paper; an `Experiment`
supplies the environment-specific parts: the stream of source items, how one
step is played with the policy's sampler, and (RLSR) which weights the judge
holds at each step. Everything here is host-side glue; the math lives in the
environments, the sampler and the GRPO update.
"""
from __future__ import annotations

import itertools
import json
import os
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

ENVS = ("spy", "rlsr")


class _Items:
  """An endless, seeded stream of source items (reshuffled every pass), `per_step` at a time.

  The stream depends only on the seed, and `consumed` (checkpointed) counts the
  items drawn so far, so a resumed run `seek`s there and continues with the
  items an uninterrupted run would use, also when a step drew extra rounds
  (`grpo.filter_groups`).
  """

  def __init__(self, items: list[Any], per_step: int, seed: int):
    if not items:
      raise ValueError("the data source gave no items")
    self.per_step = per_step
    self.consumed = 0
    self._stream = self._cycle(items, np.random.default_rng(seed))

  @staticmethod
  def _cycle(items, rng) -> Iterator[Any]:
    while True:
      for i in rng.permutation(len(items)):
        yield items[i]

  def seek(self, consumed: int) -> None:
    """Continues the stream after its first `consumed` items (from a fresh stream)."""
    if self.consumed:
      raise ValueError("seek works on a fresh stream only")
    next(itertools.islice(self._stream, consumed, consumed), None)  # consume
    self.consumed = consumed

  def next_step(self) -> list[Any]:
    self.consumed += self.per_step
    return list(itertools.islice(self._stream, self.per_step))


def round_rng(seed: int, step: int, round_: int) -> np.random.Generator:
  """The host RNG of one round of one step (round 0 keeps the unfiltered run's stream)."""
  return np.random.default_rng([seed, step] if round_ == 0 else [seed, step, round_])


class _Experiment:
  """The trainer-facing parts every experiment shares: checkpointable state."""

  def state_dict(self) -> dict[str, Any]:
    return {"env": self.env.state_dict(), "items_consumed": self.items.consumed}

  def load_state_dict(self, state: dict[str, Any], step: int) -> None:
    # Checkpoints written before the stream position was saved hold the env's state alone,
    # and drew exactly `per_step` items a step.
    self.env.load_state_dict(state.get("env", state))
    self.items.seek(state.get("items_consumed", step * self.items.per_step))


def call_sampling(c) -> dict[str, Any]:
  """The per-call sampling arguments (temperature, top_p, top_k) of `c.sampling`."""
  return {k: c.sampling[k] for k in ("temperature", "top_p", "top_k")}


def spy_game_config(c):
  from rlsvr.envs.spy.config import SpyGameConfig  # noqa: PLC0415

  fields = {k: v for k, v in c.spy.items() if k != "games_per_step"}
  return SpyGameConfig(**fields, sampling=call_sampling(c))


def self_judge_config(c):
  from rlsvr.envs.self_judge.config import SelfJudgeConfig  # noqa: PLC0415

  fields = {k: v for k, v in c.rlsr.items() if k != "problems_per_step"}
  judge_sampling = dict(temperature=c.judge.temperature, top_p=1.0, top_k=0)
  return SelfJudgeConfig(**fields, sampling=call_sampling(c), judge_sampling=judge_sampling)


def check(c) -> None:
  """Raises ValueError naming the offending section for an impossible env config."""
  if c.env not in ENVS:
    raise ValueError(f"env={c.env!r} is not one of {ENVS}")
  try:
    if c.env == "spy":
      spy_game_config(c)
      if c.spy.games_per_step < 1:
        raise ValueError("games_per_step must be >= 1")
    else:
      cfg = self_judge_config(c)
      if c.rlsr.problems_per_step < 1:
        raise ValueError("problems_per_step must be >= 1")
      if c.judge.source and cfg.judge_weights != "fixed":
        raise ValueError("a judge with its own judge.source can only use judge_weights='fixed' "
                         "(delayed/online copy the policy's weights into the judge)")
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config ({c.env}.*): {e}") from None


class SpyExperiment(_Experiment):
  """SpyRL: one game per source document per step."""

  def __init__(self, c, tokenizer):
    from rlsvr.data.corpora import load_corpus  # noqa: PLC0415
    from rlsvr.envs.spy.game import SpyGame  # noqa: PLC0415

    self.c = c
    self.env = SpyGame(spy_game_config(c), tokenizer)
    docs = list(load_corpus(c.spy.task, c.data.source, field=c.data.field or None,
                            config=c.data.config or None, split=c.data.split,
                            limit=c.data.limit or max(10 * c.spy.games_per_step, 1000)))
    self.items = _Items(docs, c.spy.games_per_step, c.seed)

  def play(self, step: int, sample, policy_params, round_: int = 0):
    del policy_params
    return self.env.play(self.items.next_step(), sample, round_rng(self.c.seed, step, round_),
                         step)

  def judge_state(self, step: int):
    return None

  def load_judge_state(self, params) -> None:
    pass


def rlsr_problems(c) -> list[Any]:
  """The RLSR problem set named by `data.source` for `rlsr.task`."""
  from rlsvr.envs.self_judge import countdown, ladder  # noqa: PLC0415

  src, limit = c.data.source, c.data.limit or None
  if c.rlsr.task == "countdown":
    if src == "generate":
      return countdown.generate(limit or 1000, seed=c.seed)
    if src == "hub":
      return countdown.load_hub(split=c.data.split, limit=limit)
    if os.path.isfile(src):
      return countdown.load_jsonl(src)[:limit]
    raise ValueError(f"data.source={src!r}: use 'generate', 'hub' or a TinyZero JSONL file")
  if src == "ladder":
    rows = ladder.generate_variants(seed=c.seed)
  elif src.endswith(".json") and os.path.isfile(src):  # Integration Bee layout
    rows = [{"latex": p["problem"], "answer": p.get("answer")}
            for p in json.load(open(src, encoding="utf-8"))["problems"]]
  elif os.path.isfile(src):
    rows = [json.loads(line) for line in open(src, encoding="utf-8") if line.strip()]
  else:
    raise ValueError(f"data.source={src!r}: use 'ladder', an Integration Bee JSON or a JSONL file")
  problems = []
  for row in rows[:limit]:
    try:
      problems.append(ladder.problem_from_row(row))
    except ValueError:
      continue  # Unparseable problems (limits, floors of integrals, ...) are skipped.
  return problems


class SelfJudgeExperiment(_Experiment):
  """RLSR: the policy answers each problem G times; a judge model rewards the answers."""

  def __init__(self, c, tokenizer, model_config, initial_params, mesh):
    """`initial_params` are the policy's weights in the compute dtype (the sampler's)."""
    from rlsvr.envs.self_judge.env import SelfJudgeEnv  # noqa: PLC0415
    from rlsvr.model import sources  # noqa: PLC0415
    from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
    from rlsvr.sampling import Sampler  # noqa: PLC0415

    self.c = c
    cfg = self_judge_config(c)
    self.schedule = cfg.schedule()
    if c.judge.source:  # Another model judges, with its own tokenizer and sampler.
      jconfig, self.judge_params, jtok = sources.load_model(
          c.judge.source, dtype=c.model.compute_dtype, mesh=mesh if mesh.size > 1 else None,
          seed=c.seed, tokenizer=c.judge.tokenizer)
    else:
      jconfig, jtok, self.judge_params = model_config, tokenizer, initial_params
    self.judge_sampler = Sampler(jconfig, eos_ids=stop_ids(jconfig, jtok), tokenizer=jtok,
                                 max_rows=c.sampling.max_rows,
                                 max_cache_tokens=c.sampling.max_cache_tokens)
    self.env = SelfJudgeEnv(cfg, tokenizer, judge_tokenizer=jtok)
    self.items = _Items(rlsr_problems(c), c.rlsr.problems_per_step, c.seed)
    self._judge_calls = (0, itertools.count())  # (step, counter): rounds of a step share it

  def play(self, step: int, sample, policy_params, round_: int = 0):
    """One round of `step`; `policy_params` are the sampler's (compute-dtype) weights."""
    weights = self.schedule.weights_at(step)
    if weights == "policy" and self.schedule.mode == "delayed" and round_ == 0:
      # A copy, not an alias: the train step donates (invalidates) the policy's buffers.
      self.judge_params = jax.tree.map(jnp.copy, policy_params)
    judge_params = policy_params if self.schedule.mode == "online" else self.judge_params
    if self._judge_calls[0] != step:
      self._judge_calls = (step, itertools.count())
    calls = self._judge_calls[1]

    def judge_sample(prompts, **kw):
      seed = ((self.c.seed * 1_000_003 + step) * 64 + next(calls)) ^ 0x5EED
      return self.judge_sampler(judge_params, prompts, seed=seed, **kw)

    return self.env.play(self.items.next_step(), sample, round_rng(self.c.seed, step, round_),
                         step, judge_sample=judge_sample)

  def judge_state(self, step: int):
    """Judge weights to checkpoint after `step` (only when they are a delayed copy)."""
    return self.judge_params if self.schedule.judge_needs_checkpoint(step) else None

  def load_judge_state(self, params) -> None:
    if params is not None:
      self.judge_params = params


def build(c, tokenizer, model_config, initial_params, mesh):
  if c.env == "spy":
    return SpyExperiment(c, tokenizer)
  return SelfJudgeExperiment(c, tokenizer, model_config, initial_params, mesh)
