"""Advantage estimators by hand and by formula, overlong shaping, and their host-side use."""
import numpy as np
import pytest

from rlsvr.rl import advantages
from rlsvr.rl.batch import advantages_of, build_batch, shaped_rewards
from rlsvr.rl.config import GRPOConfig
from rlsvr.rl.rollout import Trajectory


def estimate(name, rewards, groups, baselines=None, tokens=None, **config):
  n = len(rewards)
  baselines = np.zeros(n) if baselines is None else baselines
  tokens = np.ones(n) if tokens is None else tokens
  return np.asarray(advantages.advantage_fn(name)(
      np.asarray(rewards, np.float32), np.asarray(groups), np.asarray(baselines, np.float32),
      np.asarray(tokens, np.float32), GRPOConfig(advantage=name, **config)))


def test_registry_names_and_errors():
  assert advantages.advantage_names()[:3] == ("grpo", "rloo", "reinforce_plus_plus_baseline")
  with pytest.raises(ValueError, match="'grpo', 'rloo', 'reinforce_plus_plus_baseline'"):
    GRPOConfig(advantage="gae")
  with pytest.raises(ValueError, match="registered"):
    advantages.advantage_fn("gae")


def test_rloo_hand_computed():
  # Group 0 (ids interleaved): 1, 2, 4 -> 1 - 3, 2 - 2.5, 4 - 1.5. Group 5 alone keeps its
  # reward (verl). Group 9: all equal -> exactly 0.
  rewards = [1.0, 5.0, 2.0, 0.3, 4.0, 0.3]
  groups = [0, 5, 0, 9, 0, 9]
  np.testing.assert_allclose(estimate("rloo", rewards, groups), [-2, 5, -0.5, 0, 2.5, 0],
                             rtol=1e-6)


def test_rloo_is_the_leave_one_out_formula():
  # A_i = x_i - mean_{j != i} x_j, x = reward - baseline, on random groups of 2..6.
  rng = np.random.default_rng(0)
  groups = np.repeat(np.arange(6), [2, 3, 4, 5, 6, 2])
  rewards = rng.normal(size=len(groups))
  baselines = rng.normal(size=len(groups))
  x = rewards - baselines
  expected = [x[i] - np.mean(x[(groups == groups[i]) & (np.arange(len(x)) != i)])
              for i in range(len(x))]
  np.testing.assert_allclose(estimate("rloo", rewards, groups, baselines), expected, rtol=1e-5,
                             atol=1e-6)


def test_reinforce_plus_plus_baseline_hand_computed():
  # Centred in groups: [0.5, -0.5], [-1, 1]; token-weighted (1, 3, 2, 2) mean -1/8 and
  # unbiased variance 4.875 / 7 over the 8 tokens.
  rewards, groups, tokens = [1.0, 0.0, 2.0, 4.0], [0, 0, 1, 1], [1, 3, 2, 2]
  std = np.sqrt(4.875 / 7 + 1e-8)
  expected = (np.array([0.5, -0.5, -1.0, 1.0]) + 0.125) / std
  out = estimate("reinforce_plus_plus_baseline", rewards, groups, tokens=tokens)
  np.testing.assert_allclose(out, expected, rtol=1e-5)
  # A row outside the batch (0 tokens) is in its group's mean but not in the whitening.
  more = estimate("reinforce_plus_plus_baseline", rewards + [7.0, 7.0], groups + [2, 2],
                  tokens=tokens + [0, 0])
  np.testing.assert_allclose(more, list(expected) + [0.0, 0.0], rtol=1e-5)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus_baseline"])
def test_all_equal_groups_get_zero_whatever_the_baselines(name):
  rewards = [1.0, 1.0, 1.0, 0.0, 2.0]
  groups = [0, 0, 0, 1, 1]
  baselines = [0.3, -0.2, 0.9, 0.5, 0.1]
  out = estimate(name, rewards, groups, baselines, tokens=[3, 1, 2, 4, 5])
  np.testing.assert_array_equal(out[:3], 0.0)
  assert np.all(out[3:] != 0)


def test_norm_adv_by_std_is_the_grpo_estimators():
  rewards, groups = [1.0, 0.0, 3.0, 5.0], [0, 0, 1, 1]
  raw = estimate("grpo", rewards, groups, norm_adv_by_std=False)
  np.testing.assert_allclose(raw, [0.5, -0.5, -1, 1], rtol=1e-6)
  np.testing.assert_array_equal(estimate("rloo", rewards, groups, norm_adv_by_std=False),
                                estimate("rloo", rewards, groups))


def verl_overlong(valid_response_length, max_resp_len, buffer_len, penalty_factor):
  """verl 0.9.1 workers/reward_manager/dapo.py, DAPORewardManager.__call__, line by line."""
  expected_len = max_resp_len - buffer_len
  exceed_len = valid_response_length - expected_len
  return min(-exceed_len / buffer_len * penalty_factor, 0)


def test_overlong_penalty_hand_computed_and_as_verl():
  lengths = [10, 16, 17, 19, 20]
  out = advantages.overlong_penalty(lengths, 20, 4, 1.0)
  np.testing.assert_allclose(out, [0, 0, -0.25, -0.75, -1.0])
  np.testing.assert_allclose(advantages.overlong_penalty(lengths, 20, 4, 0.5), out / 2)
  np.testing.assert_allclose(out, [verl_overlong(n, 20, 4, 1.0) for n in lengths])
  # One limit per row (rows of different roles may have different limits).
  np.testing.assert_allclose(advantages.overlong_penalty([8, 8], [8, 32], 4, 1.0), [-1.0, 0])
  np.testing.assert_array_equal(advantages.overlong_penalty(lengths, None, 0, 1.0), 0.0)
  with pytest.raises(ValueError, match="below overlong_buffer"):
    advantages.overlong_penalty(lengths, 3, 4, 1.0)


def row(reward, group, n_tokens, trained=True, baseline=0.0):
  return Trajectory([1], [2] * n_tokens, [-0.5] * n_tokens, reward, group, "policy",
                    trained=trained, baseline=baseline)


def test_advantages_of_shapes_rewards_then_estimates():
  # Both rows correct (reward 1): without shaping no signal; with a 4-token buffer under a
  # limit of 12 the 11-token one loses 0.75 and the 6-token one nothing.
  rows = [row(1.0, 0, 6), row(1.0, 0, 11)]
  np.testing.assert_array_equal(advantages_of(rows, GRPOConfig(advantage="rloo")), 0.0)
  cfg = GRPOConfig(advantage="rloo", overlong_buffer=4)
  np.testing.assert_allclose(shaped_rewards(rows, cfg, 12), [1.0, 0.25])
  np.testing.assert_allclose(advantages_of(rows, cfg, max_response_length=12), [0.75, -0.75])
  np.testing.assert_allclose(
      build_batch(rows, cfg, max_response_length=[12, 12])["advantages_B"], [0.75, -0.75])
  for missing in (None, [12, None]):  # None: the rows' own max_new_tokens, unset here
    with pytest.raises(ValueError, match="max_response_length"):
      advantages_of(rows, cfg, max_response_length=missing)
  for r in rows:  # What environments fill in: the budget each row was sampled under.
    r.max_new_tokens = 12
  np.testing.assert_allclose(advantages_of(rows, cfg), [0.75, -0.75])


def test_advantages_of_counts_only_trained_tokens():
  rows = [row(1.0, 0, 1), row(0.0, 0, 3), row(2.0, 1, 2), row(4.0, 1, 2),
          row(9.0, 1, 5, trained=False)]
  cfg = GRPOConfig(advantage="reinforce_plus_plus_baseline")
  ours = advantages_of(rows, cfg)
  expected = estimate("reinforce_plus_plus_baseline", [1.0, 0.0, 2.0, 4.0, 9.0],
                      [0, 0, 1, 1, 1], tokens=[1, 3, 2, 2, 0])
  np.testing.assert_allclose(ours, expected, rtol=1e-6)
  # Role baselines still enter the grpo estimator (the default).
  based = [row(1.0, 0, 2, baseline=0.5), row(0.0, 0, 2)]
  np.testing.assert_allclose(advantages_of(based, GRPOConfig(norm_adv_by_std=False)),
                             [0.25, -0.25], rtol=1e-6)
