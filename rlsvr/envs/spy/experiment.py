"""The spy game as a registered environment (`env = "spy"`): config, data, plan.

One game per source document per step; the game itself is `rlsvr.envs.spy.game`.
"""
from __future__ import annotations

import math
from typing import Any

from rlsvr import seeding
from rlsvr.envs import registry
from rlsvr.envs.items import ItemStream, StreamExperiment, round_rng
from rlsvr.envs.spy.config import SpyGameConfig


def sampling_of(c) -> dict[str, Any]:
  """The per-call sampling arguments (temperature, top_p, top_k) of `c.sampling`."""
  return {k: c.sampling[k] for k in ("temperature", "top_p", "top_k")}


def game_config(c) -> SpyGameConfig:
  """The typed game of `c.spy`: the task's and variant's defaults, then every set key."""
  fields = {k: v for k, v in c.spy.items()
            if k not in ("games_per_step", "task", "variant") and v is not None}
  return SpyGameConfig.for_task(c.spy.task, c.spy.variant, **fields, sampling=sampling_of(c))


def check(c) -> None:
  try:
    game_config(c)
    if c.spy.games_per_step < 1:
      raise ValueError("games_per_step must be >= 1")
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (spy.*): {e}") from None


class SpyExperiment(StreamExperiment):
  """SpyRL: one game per source document per step.

  With `heldout.size > 0` the last min(size, documents // 2) documents are held out of
  training; `evaluate` plays `heldout.size` games over them (cycling), with spies and
  masks fixed by the run's seed, `heldout.per_call` (default `games_per_step`: the step's
  sampler shapes) at a time.
  """

  def __init__(self, ctx: registry.BuildContext):
    from rlsvr.data.corpora import load_corpus  # noqa: PLC0415
    from rlsvr.envs.spy.game import SpyGame  # noqa: PLC0415

    c = self.c = ctx.config
    self.env = SpyGame(game_config(c), ctx.tokenizer,
                       chat_template_kwargs=ctx.chat_template_kwargs)
    docs = list(load_corpus(c.spy.task, c.data.source, field=c.data.field or None,
                            config=c.data.config or None, split=c.data.split,
                            limit=c.data.limit or max(10 * c.spy.games_per_step, 1000)))
    held = min(c.heldout.size, len(docs) // 2)
    self.heldout_docs = docs[len(docs) - held:] if held else []
    self.items = ItemStream(docs[:len(docs) - held], c.spy.games_per_step,
                            seeding.derive(c.seed, "items"))

  def play_round(self, step: int, sample, policy_params, round_: int = 0):
    del policy_params
    return self.env.play_episodes(self.items.next_step(), sample,
                                  round_rng(self.c.seed, step, round_), step)

  def finish_step(self, trained) -> None:
    self.env.finish_step(trained)

  def evaluate(self, sample, policy_params):
    del policy_params
    games = [self.heldout_docs[i % len(self.heldout_docs)] for i in range(self.c.heldout.size)]
    return self.env.evaluate(games, sample, seeding.rng(self.c.seed, "heldout"),
                             games_per_call=self.c.heldout.per_call or self.c.spy.games_per_step)


def plan(c, est) -> registry.EnvPlan:
  """Players' and detectors' calls; a step trains the clue or the decision phase (or both)."""
  s, per_step = game_config(c), c.spy.games_per_step
  # A constrained vote is a few tokens (`3}`, `N/A}`); 8 bounds every tokenizer's spelling.
  vote_tokens = min(s.detector_max_new_tokens, 8) if s.constrained_vote else \
      s.detector_max_new_tokens
  out = min(est.output_tokens or s.player_max_new_tokens, s.player_max_new_tokens)
  doc = math.ceil(s.truncate_words * est.tokens_per_word)
  seq = s.variant == "sequential"
  earlier = ((s.num_players - 1) * out if seq else 0) + (s.rounds - 1) * s.num_players * out
  calls = (registry.SamplerCall("players", per_step * (1 if seq else s.num_players),
                                est.template_tokens + doc + earlier, s.player_max_new_tokens),
           registry.SamplerCall("detectors", per_step * s.rollout_n,
                                est.template_tokens + doc + s.rounds * s.num_players * out,
                                vote_tokens, rows_per_prompt=s.rollout_n))
  clue = registry.TrainPhase("clue", per_step * s.num_players * s.rounds, ("players",),
                             s.player_max_new_tokens)
  decide = registry.TrainPhase("decision", per_step * s.rollout_n, ("detectors",), vote_tokens)
  if s.joint:
    phases = (registry.TrainPhase("joint", clue.rows + decide.rows, ("players", "detectors"),
                                  max(clue.completion_tokens, decide.completion_tokens)),)
  else:
    phase = "clue" if s.variant == "no_spy" else s.training_phase
    phases = tuple(p for p in (clue, decide) if phase in ("interactive", p.name))
  note = (f"spy prompts: document = truncate_words {s.truncate_words} x {est.tokens_per_word} "
          f"tokens/word = {doc}; template {est.template_tokens}; public output {out} tokens per "
          "player (--output_tokens)")
  return registry.EnvPlan(calls, phases, notes=(note,))


SPEC = registry.register(registry.EnvSpec(
    name="spy", check=check, build=SpyExperiment, plan=plan,
    console=(("spy/detect_acc", "detect", "{:.2f}"),),
    plots=(("detection accuracy", ("spy/detect_acc",)),)))
