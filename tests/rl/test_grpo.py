"""The pure GRPO losses against hand-computed values and a line-by-line port of verl's formulas."""
import collections
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.rl import grpo


def verl_group_advantages(rewards, index, norm_by_std=True, eps=1e-6):
  """verl's compute_grpo_outcome_advantage loop, in numpy."""
  groups = collections.defaultdict(list)
  for r, i in zip(rewards, index):
    groups[i].append(r)
  out = []
  for r, i in zip(rewards, index):
    g = np.array(groups[i], np.float64)
    mean, std = (0.0, 1.0) if len(g) == 1 else (g.mean(), g.std(ddof=1))
    out.append((r - mean) / (std + eps) if norm_by_std else r - mean)
  return np.array(out)


def verl_agg_loss(loss, mask, mode, loss_scale_factor=None):
  """verl 0.9.1 agg_loss with dp_size=1 and global sizes from this batch, in numpy."""
  if mode == "token-mean":
    return (loss * mask).sum() / mask.sum()
  seq_mask = (mask.sum(-1) > 0).astype(np.float64)
  if mode == "seq-mean-token-mean":
    seq = (loss * mask).sum(-1) / (mask.sum(-1) + 1e-8)
    return (seq * seq_mask).sum() / seq_mask.sum()
  seq = (loss * mask).sum(-1)
  out = (seq * seq_mask).sum() / seq_mask.sum()
  if mode == "seq-mean-token-sum-norm":
    out /= loss_scale_factor or mask.shape[-1]
  return out


def test_group_advantages_hand_computed():
  # Interleaved, non-contiguous group ids: 7 -> [1, 2, 3], 42 -> [5] alone, 3 -> [2, 2].
  rewards = [1.0, 5.0, 2.0, 2.0, 3.0, 2.0]
  ids = [7, 42, 7, 3, 7, 3]
  adv = np.asarray(grpo.group_advantages(rewards, ids))
  s = 1.0 / (1.0 + 1e-6)  # group 7: mean 2, unbiased std 1
  np.testing.assert_allclose(adv, [-s, 5.0 * s, 0.0, 0.0, s, 0.0], rtol=1e-6)
  # A group of one: mean 0 and std 1, so its advantage is its reward (verl).
  # All-equal rewards: zero advantage, not NaN.
  raw = np.asarray(grpo.group_advantages(rewards, ids, norm_by_std=False))
  np.testing.assert_allclose(raw, [-1.0, 5.0, 0.0, 0.0, 1.0, 0.0], atol=1e-6)


def test_group_advantages_match_verl_on_random_groups():
  rng = np.random.default_rng(0)
  rewards = rng.normal(size=40).round(1)
  ids = rng.integers(0, 12, size=40)
  for norm in (True, False):
    ours = np.asarray(jax.jit(grpo.group_advantages, static_argnames="norm_by_std")(
        rewards, ids, norm_by_std=norm))
    np.testing.assert_allclose(ours, verl_group_advantages(rewards, ids, norm), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("kind,expected", [
    ("k1", 1.0), ("kl", 1.0), ("abs", 1.0), ("k2", 0.5), ("mse", 0.5),
    ("k3", math.exp(-1.0)), ("low_var_kl", math.exp(-1.0)),
])
def test_kl_penalty_hand_computed(kind, expected):
  kl = grpo.kl_penalty(jnp.array([[-1.0]]), jnp.array([[-2.0]]), kind)
  np.testing.assert_allclose(np.asarray(kl), [[expected]], rtol=1e-6)


def test_low_var_kl_clamps():
  lp = jnp.array([0.0, -50.0, -1.0])
  ref = jnp.array([-50.0, 0.0, -1.0])
  kl = np.asarray(grpo.kl_penalty(lp, ref, "low_var_kl"))
  # d = -50 -> clamp -20 -> exp(-20) + 19 = 19.000... -> 10; d = +50 -> 20 -> e^20 - 21 -> 10.
  np.testing.assert_allclose(kl, [10.0, 10.0, 0.0], atol=1e-6)
  assert np.all(np.isfinite(np.asarray(jax.grad(lambda x: grpo.kl_penalty(x, ref, "k3").sum())(lp))))


def test_straight_through_kl_has_k3_value_and_k2_gradient():
  lp, ref = jnp.array([-1.0, -0.3]), jnp.array([-2.0, -0.1])
  np.testing.assert_allclose(grpo.kl_penalty(lp, ref, "k3+"), grpo.kl_penalty(lp, ref, "k3"))
  grad = jax.grad(lambda x: grpo.kl_penalty(x, ref, "k3+").sum())(lp)
  np.testing.assert_allclose(grad, lp - ref, rtol=1e-6)
  with pytest.raises(ValueError):
    grpo.kl_penalty(lp, ref, "k4")


VALUES = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # last row fully masked


@pytest.mark.parametrize("mode,kwargs,expected", [
    ("token-mean", {}, 7.0 / 3.0),
    ("seq-mean-token-sum", {}, (3.0 + 4.0) / 2.0),
    ("seq-mean-token-mean", {}, (1.5 + 4.0) / 2.0),
    ("seq-mean-token-sum-norm", {}, (3.0 + 4.0) / 2.0 / 3.0),  # default factor: T = 3
    ("seq-mean-token-sum-norm", {"loss_scale_factor": 7.0}, 0.5),
])
def test_aggregate_hand_computed(mode, kwargs, expected):
  out = grpo.aggregate(jnp.asarray(VALUES), jnp.asarray(MASK), mode, **kwargs)
  np.testing.assert_allclose(float(out), expected, rtol=1e-6)


@pytest.mark.parametrize("mode", grpo.AGG_MODES)
def test_aggregate_matches_verl_and_survives_all_masked(mode):
  rng = np.random.default_rng(1)
  values = rng.normal(size=(6, 9))
  mask = (rng.random((6, 9)) < 0.6).astype(np.float64)
  mask[2] = 0.0
  np.testing.assert_allclose(float(grpo.aggregate(values, mask, mode)),
                             verl_agg_loss(values, mask, mode), rtol=1e-5)
  zero_mask = jnp.zeros((2, 4))
  out, grad = jax.value_and_grad(lambda v: grpo.aggregate(v, zero_mask, mode))(jnp.ones((2, 4)))
  assert float(out) == 0.0 and np.all(np.asarray(grad) == 0.0)
  with pytest.raises(ValueError):
    grpo.aggregate(values, mask, "seq-sum")


def test_policy_loss_per_token_cases():
  # (advantage, ratio) -> (loss, clipped, clipped_lower), with eps_low = eps_high = 0.2, c = 3.
  cases = [
      (1.0, math.exp(0.5), -1.2, 1.0, 0.0),  # A > 0, ratio above 1 + eps: clipped to 1.2
      (1.0, 0.5, -0.5, 0.0, 0.0),  # A > 0, ratio below 1 - eps: unclipped (pessimistic)
      (-1.0, 0.5, 0.8, 1.0, 0.0),  # A < 0, ratio below 1 - eps: clipped to 0.8
      (-1.0, 2.0, 2.0, 0.0, 0.0),  # A < 0, ratio 2: unclipped, below the dual clip
      (-1.0, 5.0, 3.0, 0.0, 1.0),  # A < 0, ratio 5: dual clip caps the loss at -A * c
      (0.0, 7.0, 0.0, 0.0, 0.0),  # A = 0: no loss, nothing counted
  ]
  adv = jnp.array([[c[0] for c in cases]])
  logp = jnp.log(jnp.array([[c[1] for c in cases]]))
  old = jnp.zeros_like(logp)
  terms = grpo.policy_loss_terms(logp, old, adv)
  np.testing.assert_allclose(terms["pg_loss"][0], [c[2] for c in cases], rtol=1e-6)
  np.testing.assert_array_equal(terms["clipped"][0], [c[3] for c in cases])
  np.testing.assert_array_equal(terms["clipped_lower"][0], [c[4] for c in cases])
  mask = jnp.ones_like(adv)
  loss, metrics = grpo.policy_loss(logp, old, adv, mask)
  np.testing.assert_allclose(float(loss), np.mean([c[2] for c in cases]), rtol=1e-6)
  np.testing.assert_allclose(float(metrics["pg_clipfrac"]), 2 / 6, rtol=1e-6)
  np.testing.assert_allclose(float(metrics["pg_clipfrac_lower"]), 1 / 6, rtol=1e-6)
  np.testing.assert_allclose(float(metrics["ppo_kl"]), float(-logp.mean()), rtol=1e-6)


def test_policy_loss_clip_higher_and_gradients():
  # Clip-higher: with eps_high = 0.28 a ratio of 1.25 is not clipped for A > 0.
  logp, old, adv = jnp.log(jnp.array([[1.25]])), jnp.zeros((1, 1)), jnp.ones((1, 1))
  loss, _ = grpo.policy_loss(logp, old, adv, jnp.ones((1, 1)), clip_high=0.28)
  np.testing.assert_allclose(float(loss), -1.25, rtol=1e-6)
  # Clipped tokens carry no gradient; an unclipped one carries -A * ratio.
  lp = jnp.log(jnp.array([[1.5, 1.0, 5.0]]))
  a = jnp.array([[1.0, 1.0, -1.0]])
  grad = jax.grad(lambda x: grpo.policy_loss(x, jnp.zeros_like(x), a, jnp.ones_like(x))[0])(lp)
  np.testing.assert_allclose(grad, [[0.0, -1.0 / 3.0, 0.0]], atol=1e-7)


def test_policy_loss_extreme_ratios_are_finite():
  logp = jnp.array([[100.0, -100.0, 100.0, -100.0]])
  old = jnp.zeros_like(logp)
  adv = jnp.array([[1.0, 1.0, -1.0, -1.0]])
  mask = jnp.ones_like(logp)
  (loss, metrics), grad = jax.value_and_grad(
      lambda x: grpo.policy_loss(x, old, adv, mask), has_aux=True)(logp)
  # log-ratio clamped at +-20 before exp: -1.2, -e^-20, 3 (dual clip), 0.8.
  np.testing.assert_allclose(float(loss), (-1.2 - math.exp(-20) + 3.0 + 0.8) / 4, rtol=1e-6)
  assert np.all(np.isfinite(np.asarray(grad)))
  np.testing.assert_allclose(float(metrics["ppo_kl"]), 0.0, atol=1e-6)


def test_policy_loss_fully_masked_rows_do_not_count():
  logp = jnp.log(jnp.array([[1.5, 0.9], [9.0, 9.0]]))
  adv = jnp.array([[1.0, 1.0], [-1.0, -1.0]])
  mask = jnp.array([[1.0, 1.0], [0.0, 0.0]])
  for mode in grpo.AGG_MODES:
    loss, metrics = grpo.policy_loss(logp, jnp.zeros_like(logp), adv, mask, agg_mode=mode)
    first_row, _ = grpo.policy_loss(logp[:1], jnp.zeros((1, 2)), adv[:1], mask[:1], agg_mode=mode)
    np.testing.assert_allclose(float(loss), float(first_row), rtol=1e-6)
    assert float(metrics["pg_clipfrac_lower"]) == 0.0


def test_the_loss_layers_import_no_update_and_no_model():
  # core, losses, advantages and config sit below train_step: importing them must not
  # import it (the old lazy `grpo.train_step` re-export made a circle) or the model.
  code = ("import sys; import rlsvr.rl.core, rlsvr.rl.losses, rlsvr.rl.advantages, "
          "rlsvr.rl.config, rlsvr.rl.batch; "
          "bad = [m for m in ('rlsvr.rl.train_step', 'rlsvr.model.qwen3') if m in sys.modules]; "
          "assert not bad, bad")
  subprocess.run([sys.executable, "-c", code], check=True,
                 env={**os.environ, "JAX_PLATFORMS": "cpu"})
  from rlsvr.rl import train_step  # the public face (DESIGN.md) re-exports the update

  assert grpo.train_step is train_step.train_step
