"""Groups without signal: zero advantages whatever the baselines, and DAPO's dynamic sampling."""
import functools
import itertools

import jax
import numpy as np
import pytest

from rlsvr.data import bundled_corpus
from rlsvr.rl.rollout import EpisodeBatch, Trajectory
from rlsvr.envs.spy import SpyGame, SpyGameConfig, mechanics
from rlsvr.model.config import ModelConfig
from rlsvr.rl import filtering
from rlsvr.rl.batch import advantages_of, build_batch, rollout_metrics
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step
from tests.envs.spy.fakes import ByteTokenizer, ScriptedPolicy, spy_finding_detector, \
    spy_marker_player
from tests.rl.tiny import random_params

CONFIG = SpyGameConfig.for_task("summarisation", rollout_n=2, truncate_words=12)
DOCS = bundled_corpus("summarisation")


def invalid_detector(prompt: str) -> str:
  del prompt
  return "I think it is player two."  # no box: an invalid vote


def policy(detector):
  tokenizer = ByteTokenizer()
  return ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="summarisation"),
                        detector)


@pytest.mark.parametrize("order", ["pre_update", "released"])
def test_a_game_with_only_invalid_votes_gives_zero_advantages_and_zero_gradient(order):
  import dataclasses

  env = SpyGame(dataclasses.replace(CONFIG, baseline_order=order), ByteTokenizer())
  # Step 1 (decision) finds the spy, so every role's baseline moves away from 0.
  first = env.play_episodes(DOCS[:2], policy(spy_finding_detector), np.random.default_rng(0), 1)
  env.finish_step(first.trajectories)
  assert all(abs(b) > 0 for b in env.baselines.values.values())
  # Step 2 (clue) trains the players on a game in which no vote was valid.
  played = env.play_episodes(DOCS[2:4], policy(invalid_detector), np.random.default_rng(1), 2)
  trained = [t for t in played.trajectories if t.trained]
  assert trained and all(t.reward == 0 for t in trained)
  assert len({t.baseline for t in trained}) == 2  # spy and civilian baselines differ
  assert not np.any(advantages_of(played.trajectories))
  assert rollout_metrics(played.trajectories)["frac_reward_zero_std"] == 1.0

  model = ModelConfig(vocab_size=259, hidden_size=16, intermediate_size=32, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=8)
  state = init_train_state(model, GRPOConfig(), random_params(model))
  batch = build_batch(played.trajectories)
  assert not batch["advantages_B"].any()
  _, metrics = train_step(state, batch)
  assert float(metrics["actor/grad_norm"]) == 0.0


def test_equal_rewards_give_zero_even_where_the_float_mean_is_inexact():
  # The float32 mean of seven 0.1s is not 0.1: plain (r - mean) / (std + eps) gave each row
  # -0.0074, a gradient made of rounding error.
  rows = [Trajectory([1], [2], [0.0], 0.1, group_id=0, role="policy") for _ in range(7)]
  rows += [Trajectory([1], [2], [0.0], r, group_id=1, role="policy") for r in (0.0, 1.0)]
  np.testing.assert_array_equal(advantages_of(rows)[:7], 0.0)
  np.testing.assert_allclose(advantages_of(rows)[7:], [-0.5 / np.sqrt(0.5), 0.5 / np.sqrt(0.5)],
                             rtol=1e-5)


def test_role_baselines_pre_update_order_by_hand():
  from rlsvr.envs.spy import RoleBaselines

  b = RoleBaselines(0.9)  # pre_update: each batch is centred on the EMA from before it
  assert b.for_batch([1.0, 0.0], ["spy", "civilian"]) == {"spy": 0.0, "civilian": 0.0}
  assert b.for_batch([2.0, -1.0], ["spy", "civilian"]) == pytest.approx(
      {"spy": 0.1, "civilian": 0.0})
  assert b.values == pytest.approx({"spy": 0.29, "civilian": -0.1})
  assert b.for_batch([0.5], ["detector"]) == {"detector": 0.0}
  released = RoleBaselines(0.9, "released")  # the released code: fold in, then subtract
  assert released.for_batch([1.0, 0.0], ["spy", "civilian"]) == pytest.approx(
      {"spy": 0.1, "civilian": 0.0})
  assert released.for_batch([2.0, -1.0], ["spy", "civilian"]) == pytest.approx(
      {"spy": 0.29, "civilian": -0.1})
  with pytest.raises(ValueError, match="order"):
    RoleBaselines(0.9, "after")


def episode(rewards_by_group, trained=True):
  rows = [Trajectory([1], [2], [0.0], r, group_id=g, role="policy", trained=trained)
          for g, rewards in enumerate(rewards_by_group) for r in rewards]
  return EpisodeBatch(rows, {}, "", [])


def test_play_filtered_fills_the_batch_and_truncates_to_the_target():
  rounds = iter([episode([[0, 0], [0, 1], [1, 1]]), episode([[2, 2], [1, 0]]),
                 episode([[0, 5], [3, 4]])])
  out = filtering.play_filtered(lambda r: next(rounds), max_rounds=5)
  assert out.metrics == {"filter/rounds": 3.0, "filter/target_groups": 3.0,
                         "filter/groups_kept": 3.0, "filter/groups_dropped": 4.0,
                         "filter/batch_full": 1.0}
  kept = filtering.groups_of(out.rows)
  assert [[t.reward for t in g] for g in kept.values()] == [[0, 1], [1, 0], [0, 5]]
  assert len(kept) == 3 and len(filtering.groups_of(out.played)) == 7  # ids unique over rounds


def test_play_filtered_stops_at_the_round_limit():
  played = []

  def play_round(r):
    played.append(r)
    return episode([[1, 1], [0, 0]] if r != 1 else [[0, 1], [2, 2]])

  out = filtering.play_filtered(play_round, max_rounds=3)
  assert played == [0, 1, 2] and out.metrics["filter/batch_full"] == 0.0
  assert [t.reward for t in out.rows] == [0, 1]
  # Nothing informative at all: the first round's groups are trained (advantages all 0).
  out = filtering.play_filtered(lambda r: episode([[1, 1], [0, 0]]), max_rounds=2)
  assert out.metrics["filter/groups_kept"] == 0 and len(out.rows) == 4
  assert not advantages_of(out.rows).any()


def test_play_filtered_with_spy_games_and_a_scripted_sampler():
  """Detectors who find the spy in every other game: two rounds of two games fill the batch
  of two informative player groups (clue phase)."""
  env = SpyGame(CONFIG, ByteTokenizer())
  games = itertools.count()
  calls = {"n": 0}

  def alternating_detector(prompt):
    calls["n"] += 1
    game = (calls["n"] - 1) // CONFIG.rollout_n
    return spy_finding_detector(prompt) if game % 2 == 0 else invalid_detector(prompt)

  scripted = policy(alternating_detector)
  docs = iter(DOCS)
  out = filtering.play_filtered(
      lambda r: env.play_episodes([next(docs), next(docs)], scripted, np.random.default_rng(next(games)),
                         2), max_rounds=4)
  assert out.metrics["filter/rounds"] == 2 and out.metrics["filter/groups_kept"] == 2
  assert all(t.trained and t.role != "detector" for t in out.rows)
  assert advantages_of(out.rows).any()
  for group in filtering.groups_of(out.rows).values():
    assert filtering.is_informative(group)
  assert rollout_metrics(out.played)["frac_reward_zero_std"] == 0.5
  # Two rounds played, and the role baselines have not moved: they take in the step once,
  # from the rows it trains, when the trainer calls finish_step.
  assert env.baselines.values == {}
  env.finish_step(out.rows)
  expected = mechanics.RoleBaselines(CONFIG.baseline_momentum)
  expected.update([t.reward for t in out.rows], [t.role for t in out.rows])
  assert env.baselines.values == pytest.approx(expected.values)
