"""The policy-loss registry, GSPO and CISPO by hand and by their papers, TRL's loss types."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.rl import grpo, losses
from rlsvr.rl.config import GRPOConfig


def terms(name, logp, old, adv, mask, **config):
  return losses.policy_loss_fn(name)(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                                     jnp.asarray(mask), GRPOConfig(**config))


def test_registry_names_and_errors(monkeypatch):
  assert losses.policy_loss_names()[:3] == ("vanilla", "gspo", "cispo")
  with pytest.raises(ValueError, match="'vanilla', 'gspo', 'cispo'"):
    GRPOConfig(policy_loss="ppo")
  with pytest.raises(ValueError, match="registered: .*'gspo'"):
    losses.policy_loss_fn("ppo")
  monkeypatch.setattr(losses, "_POLICY_LOSSES", dict(losses._POLICY_LOSSES))

  @losses.register_policy_loss("half_vanilla")
  def half(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config):
    out = losses.vanilla(logp_BxT, old_logp_BxT, advantages_BxT, mask_BxT, config)
    return dict(out, pg_loss=0.5 * out["pg_loss"])

  cfg = GRPOConfig(policy_loss="half_vanilla")  # a registered name is a valid config
  assert losses.policy_loss_fn(cfg.policy_loss) is half


def test_vanilla_is_the_ppo_loss_of_grpo():
  rng = np.random.default_rng(0)
  logp, old = -rng.uniform(0.1, 2, (3, 4)), -rng.uniform(0.1, 2, (3, 4))
  adv, mask = rng.normal(size=(3, 4)), np.ones((3, 4))
  ours = terms("vanilla", logp, old, adv, mask, clip_high=0.28)
  ppo = grpo.policy_loss_terms(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv),
                               clip_high=0.28)
  for k in ("pg_loss", "clipped", "clipped_lower", "neg_log_ratio"):
    np.testing.assert_array_equal(ours[k], ppo[k])


def test_gspo_hand_computed():
  # Row 0: log-ratios 0.1 and -0.3 (mean -0.1: s = e^-0.1 = 0.905, inside [0.8, 1.2]); its
  # masked third token holds garbage that must not count. Row 1: one token of log-ratio 0.5
  # (s = 1.65 > 1.2) with A = 1: clipped to 1.2, no gradient.
  old = np.array([[-1.0, -1.0, -1.0], [-1.0, 0.0, 0.0]])
  logp = old + np.array([[0.1, -0.3, 7.0], [0.5, 0.0, 0.0]])
  adv = np.array([[-2.0] * 3, [1.0] * 3])
  mask = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  s0 = math.exp(-0.1)
  out = terms("gspo", logp, old, adv, mask)
  np.testing.assert_allclose(out["pg_loss"][0, :2], [2 * s0] * 2, rtol=1e-6)
  np.testing.assert_allclose(out["pg_loss"][1, 0], -1.2, rtol=1e-6)
  np.testing.assert_array_equal(out["clipped"] * mask, [[0, 0, 0], [1, 0, 0]])
  assert not out["clipped_lower"].any()
  np.testing.assert_allclose(out["neg_log_ratio"] * mask, [[-0.1, 0.3, 0], [-0.5, 0, 0]],
                             atol=1e-6)
  # The gradient of each token is that of its own log-prob times -A * s_i (the stop-gradient
  # trick): token-mean over 3 tokens.
  grad = jax.grad(lambda x: grpo.aggregate(terms("gspo", x, old, adv, mask)["pg_loss"], mask,
                                           "token-mean"))(jnp.asarray(logp, jnp.float32))
  np.testing.assert_allclose(grad, [[2 * s0 / 3, 2 * s0 / 3, 0], [0, 0, 0]], rtol=1e-5)


def test_gspo_is_the_papers_sequence_objective():
  """GSPO paper eq. (5)-(7): J = mean_i min(s_i A_i, clip(s_i, 1-e, 1+e) A_i) with
  s_i = exp(mean_t log ratio), differentiated directly; = ours under seq-mean-token-mean."""
  rng = np.random.default_rng(3)
  lengths = np.array([5, 2, 7, 1])
  mask = (np.arange(7)[None] < lengths[:, None]).astype(np.float32)
  old = -rng.uniform(0.1, 2, (4, 7)).astype(np.float32)
  logp = (old + rng.normal(0, 1e-3, (4, 7))).astype(np.float32)
  adv = np.repeat(rng.normal(size=(4, 1)), 7, 1).astype(np.float32)
  low, high = 3e-4, 4e-4

  def paper(x):
    s = jnp.exp(((x - old) * mask).sum(-1) / lengths)
    a = adv[:, 0]
    return -jnp.mean(jnp.minimum(s * a, jnp.clip(s, 1 - low, 1 + high) * a))

  def ours(x):
    out = terms("gspo", x, old, adv, mask, clip_low=low, clip_high=high)
    return grpo.aggregate(out["pg_loss"], mask, "seq-mean-token-mean")

  x = jnp.asarray(logp)
  np.testing.assert_allclose(ours(x), paper(x), rtol=1e-6)
  grad = np.asarray(jax.grad(ours)(x))
  np.testing.assert_allclose(grad, jax.grad(paper)(x), rtol=1e-4, atol=1e-7)
  clipped = np.asarray(terms("gspo", x, old, adv, mask, clip_low=low, clip_high=high)["clipped"])
  assert 0 < clipped[:, 0].sum() < 4  # both regimes present
  assert np.all(grad[clipped[:, 0] > 0] == 0)


def test_cispo_hand_computed():
  # Ratios e^0.5 (A > 0: weight 1 + 0.28), 1 (weight 1), 0.5 (weight 1 - 0.2); every token keeps
  # the gradient -w * A of its log-prob, clipped or not (unlike PPO's clip).
  old = np.array([[-1.2, -0.4, -0.9]])
  logp = old + np.array([[0.5, 0.0, math.log(0.5)]])
  adv = np.array([[2.0, 1.0, -1.0]])
  mask = np.ones((1, 3))
  w = np.array([1.28, 1.0, 0.8])
  out = terms("cispo", logp, old, adv, mask, clip_high=0.28)
  np.testing.assert_allclose(out["pg_loss"][0], -w * adv[0] * logp[0], rtol=1e-6)
  np.testing.assert_array_equal(out["clipped"][0], [1, 0, 1])
  grad = jax.grad(lambda x: terms("cispo", x, old, adv, mask, clip_high=0.28)["pg_loss"].sum())(
      jnp.asarray(logp, jnp.float32))
  np.testing.assert_allclose(grad[0], -w * adv[0], rtol=1e-6)
  # clip_low = 1: no lower bound (MiniMax-M1, TRL); a ratio of 0.5 is its own weight.
  free = terms("cispo", logp, old, adv, mask, clip_low=1.0, clip_high=0.28)
  np.testing.assert_allclose(free["pg_loss"][0, 2], -0.5 * -1.0 * logp[0, 2], rtol=1e-6)


def test_extreme_ratios_stay_finite():
  logp = jnp.array([[80.0, -80.0, 0.0]])
  old, mask = jnp.zeros_like(logp), jnp.ones_like(logp)
  adv = jnp.array([[1.0, -1.0, 1.0]])
  for name in losses.policy_loss_names():
    loss, grad = jax.value_and_grad(
        lambda x, n=name: grpo.aggregate(terms(n, x, old, adv, mask)["pg_loss"], mask,
                                         "token-mean"))(logp)
    assert np.isfinite(float(loss)) and np.all(np.isfinite(grad)), name


@pytest.mark.parametrize("loss_type,mode", [
    ("", "seq-mean-token-sum"), ("grpo", "seq-mean-token-mean"), ("dapo", "token-mean"),
    ("bnpo", "token-mean"), ("dr_grpo", "seq-mean-token-sum-norm"),
])
def test_loss_type_presets(loss_type, mode):
  cfg = GRPOConfig(agg_mode="seq-mean-token-sum", loss_type=loss_type, loss_scale_factor=64.0)
  assert cfg.loss_agg_mode == mode


def test_loss_type_errors():
  with pytest.raises(ValueError, match="'grpo', 'bnpo', 'dapo', 'dr_grpo'"):
    GRPOConfig(loss_type="sapo")
  with pytest.raises(ValueError, match="max completion length"):
    GRPOConfig(loss_type="dr_grpo")
  with pytest.raises(ValueError, match="loss_scale_factor"):
    GRPOConfig(loss_scale_factor=-1.0)
