"""Old log-probs come from the trainer; the sampler's only measure the mismatch (and, on
request, weight the loss by truncated importance sampling)."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlsvr.rl.rollout import Trajectory
from rlsvr.rl import grpo
from rlsvr.rl.batch import build_batch
from rlsvr.rl.logprobs import token_logprobs
from rlsvr.rl.train_step import GRPOConfig, init_train_state, make_optimizer, train_step
from rlsvr.sampling import Sampler
from tests.rl.tiny import CONFIG, random_params

CFG = GRPOConfig(lr=1e-2, weight_decay=0.0)


@pytest.fixture(scope="module")
def params():
  return random_params(std=0.5)  # peaked enough that top-p 0.9 truncates


def sampled_batch(params, **sampling):
  rng = np.random.default_rng(0)
  prompts = [rng.integers(1, CONFIG.vocab_size, 6).tolist() for _ in range(4)]
  rows = [p for p in prompts for _ in range(4)]
  completions = Sampler(CONFIG)(params, rows, max_new_tokens=8, seed=3, **sampling)
  trajectories = [Trajectory(p, list(c.ids), list(c.logprobs), float(rng.integers(0, 3)),
                             group_id=i // 4, role="policy", finish_reason=c.finish_reason)
                  for i, (p, c) in enumerate(zip(rows, completions))]
  return build_batch(trajectories, min_bucket=8)


@pytest.fixture(scope="module")
def truncated(params):
  return sampled_batch(params, top_p=0.9, top_k=20)


@pytest.fixture(scope="module")
def full(params):
  return sampled_batch(params)


def step(cfg, params, batch):
  state = init_train_state(CONFIG, cfg, params)
  state, metrics = train_step(state, batch)
  return state, jax.tree.map(float, metrics)


def trainer_logprobs(params, batch):
  c = batch["loss_mask_BxC"].shape[1]
  logp, _ = jax.jit(functools.partial(token_logprobs, CONFIG))(
      params, batch["tokens_BxT"], batch["attention_mask_BxT"])
  return np.asarray(logp)[:, -c:]


def test_first_update_ratio_is_exactly_one_under_top_p_and_top_k(params, truncated):
  _, metrics = step(CFG, params, truncated)
  assert metrics["actor/ppo_kl"] == 0.0
  assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/pg_clipfrac_lower"] == 0.0
  # The sampler drew from the renormalised top-p/top-k distribution: its logprobs are
  # higher than the full softmax's, which the mismatch metrics must show.
  assert metrics["rollout_corr/kl"] > 0.02
  assert metrics["rollout_corr/ratio_mean"] < 0.98
  assert metrics["rollout_corr/ratio_max"] <= 1.0 + 1e-6


def test_mismatch_is_zero_in_fp32_with_the_full_distribution(params, full):
  _, metrics = step(CFG, params, full)
  assert abs(metrics["rollout_corr/kl"]) < 1e-5 and abs(metrics["rollout_corr/k3_kl"]) < 1e-5
  assert metrics["rollout_corr/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
  assert metrics["rollout_corr/ratio_fraction_outside"] == 0.0
  # Hand check of the kl metric: mean over tokens of (sampler - trainer) logprobs.
  mask = full["loss_mask_BxC"]
  mine = trainer_logprobs(params, full)
  expected = ((full["sampler_logp_BxC"] - mine) * mask).sum() / mask.sum()
  assert metrics["rollout_corr/kl"] == pytest.approx(float(expected), abs=2e-6)


def test_rows_sampled_at_other_temperatures_are_scored_at_theirs(params):
  """Half the groups drawn at the run's temperature (0.7), half at 1.3 (as the spy game's
  detectors may be): each row's `Trajectory.temperature` reaches the update, so the
  trainer's logprobs are the sampler's and the first ratio is exactly one."""
  rng = np.random.default_rng(0)
  prompts = [rng.integers(1, CONFIG.vocab_size, 6).tolist() for _ in range(4)]
  sampler = Sampler(CONFIG)
  trajectories = []
  for g, prompt in enumerate(prompts):
    temperature = None if g % 2 else 1.3  # None: the run's, GRPOConfig.temperature.
    for c in sampler(params, [prompt] * 4, max_new_tokens=8, seed=g,
                     temperature=temperature or 0.7):
      trajectories.append(Trajectory(prompt, list(c.ids), list(c.logprobs),
                                     float(rng.integers(0, 3)), group_id=g, role="policy",
                                     temperature=temperature))
  cfg = dataclasses.replace(CFG, temperature=0.7)
  batch = build_batch(trajectories, cfg, min_bucket=8)
  np.testing.assert_allclose(sorted(set(batch["temperature_B"][:16])), [0.7, 1.3], rtol=1e-6)
  _, metrics = step(cfg, params, batch)
  assert abs(metrics["rollout_corr/kl"]) < 1e-5 and abs(metrics["rollout_corr/k3_kl"]) < 1e-5
  assert metrics["rollout_corr/ratio_fraction_outside"] == 0.0
  # The same rows scored at the run's temperature alone: a visible mismatch.
  _, scalar = step(cfg, params, {k: v for k, v in batch.items() if k != "temperature_B"})
  assert scalar["rollout_corr/k3_kl"] > 1e-3


def test_constrained_rows_are_scored_under_the_distribution_they_were_drawn_from(params):
  """Votes drawn from a few answers (`choices`) carry their allowed tokens to the update,
  which then scores them as the sampler drew them: no mismatch, first ratio one. Scored
  against the whole vocabulary, the same rows show the renormalisation as a mismatch."""
  rng = np.random.default_rng(0)
  choices = [(3, 9), (4, 9), (17, 9), (40, 2, 9)]
  trajectories = []
  for g in range(4):
    prompt = rng.integers(1, CONFIG.vocab_size, 6).tolist()
    for c in Sampler(CONFIG)(params, [prompt] * 4, max_new_tokens=3, seed=g, choices=choices):
      trajectories.append(Trajectory(prompt, list(c.ids), list(c.logprobs),
                                     float(rng.integers(0, 2)), group_id=g, role="detector",
                                     allowed_ids=c.allowed))
  batch = build_batch(trajectories, CFG, min_bucket=8)
  assert batch["allowed_BxCxK"].shape[-1] == 4  # 4 first tokens; a power of two.
  _, metrics = step(CFG, params, batch)
  assert abs(metrics["rollout_corr/kl"]) < 1e-5 and abs(metrics["rollout_corr/k3_kl"]) < 1e-5
  assert metrics["actor/ppo_kl"] == 0.0
  _, free = step(CFG, params, {k: v for k, v in batch.items() if k != "allowed_BxCxK"})
  assert free["rollout_corr/kl"] > 0.1


def test_allowed_sets_that_do_not_fit_their_row_are_refused():
  row = Trajectory([1, 2], [3, 9], [-0.1, 0.0], 1.0, group_id=0, role="detector",
                   allowed_ids=[(3, 4), (9,)])
  assert build_batch([row])["allowed_BxCxK"].shape[-1] == 2
  with pytest.raises(ValueError, match="not among its allowed tokens"):
    build_batch([dataclasses.replace(row, allowed_ids=[(4, 5), (9,)])])
  with pytest.raises(ValueError, match="1 allowed sets for 2 completion ids"):
    build_batch([dataclasses.replace(row, allowed_ids=[(3, 4)])])


def test_two_updates_per_batch_equal_two_hand_written_updates(params, truncated):
  # Adam eps 1e-4 keeps the update continuous in the gradient (as in test_train_step):
  # with 1e-8, float noise in a ~0 gradient entry flips a full-size step.
  cfg = dataclasses.replace(CFG, updates_per_batch=2, adam_eps=1e-4)
  state, metrics = step(cfg, params, truncated)
  # The reference: old logprobs of the whole batch before any update, then one AdamW step
  # per half of the rows (rows i % 2 == k), each its own token-mean loss against them.
  old = trainer_logprobs(params, truncated)
  tx = make_optimizer(cfg)
  opt, p = jax.jit(tx.init)(params), params

  @jax.jit
  def grad_fn(p, mb, old_logp):
    def loss_fn(p):
      mask = mb["loss_mask_BxC"]
      logp, _ = token_logprobs(CONFIG, p, mb["tokens_BxT"], mb["attention_mask_BxT"])
      adv = jnp.broadcast_to(mb["advantages_B"][:, None], mask.shape)
      return grpo.policy_loss(logp[:, -mask.shape[1]:], old_logp, adv, mask)[0]
    return jax.grad(loss_fn)(p)

  @jax.jit  # One program, not an eager compile per optax op and leaf.
  def adamw_step(p, opt, grads):
    updates, opt = tx.update(grads, opt, p)
    return optax.apply_updates(p, updates), opt

  for k in range(2):
    mb = {key: v[k::2] for key, v in truncated.items()}
    p, opt = adamw_step(p, opt, grad_fn(p, mb, old[k::2]))
  for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(p)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)
  # The second update's ratios are against the pre-update policy: no longer 1.
  assert metrics["actor/ppo_kl"] != 0.0
  assert int(state.step) == 1


def test_rollout_is_weights_hand_computed():
  old = jnp.array([[-1.0, -2.0, -0.5, 0.0]])
  sampler = jnp.array([[-1.5, -1.0, -0.5, 9.0]])
  mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  token = grpo.rollout_is_weights(old, sampler, mask, "token", 1.5)
  np.testing.assert_allclose(token, [[1.5, np.exp(-1.0), 1.0, 0.0]], rtol=1e-6)
  # Sequence level: exp(0.5 - 1 + 0) = exp(-0.5) on every unmasked token of the row.
  seq = grpo.rollout_is_weights(old, sampler, mask, "sequence", 2.0)
  np.testing.assert_allclose(seq, [[np.exp(-0.5)] * 3 + [0.0]], rtol=1e-6)
  np.testing.assert_allclose(grpo.rollout_is_weights(old, sampler, mask, "none"), mask)
  g = jax.grad(lambda o: grpo.rollout_is_weights(o, sampler, mask, "token").sum())(old)
  assert not np.asarray(g).any()  # no gradient through the weights


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_rollout_is_weights_the_policy_loss(params, truncated, level):
  cfg = dataclasses.replace(CFG, rollout_is=level, rollout_is_threshold=1.2)
  _, metrics = step(cfg, params, truncated)
  mask = truncated["loss_mask_BxC"]
  log_ratio = (trainer_logprobs(params, truncated) - truncated["sampler_logp_BxC"]) * mask
  if level == "sequence":
    log_ratio = np.broadcast_to(log_ratio.sum(-1, keepdims=True), mask.shape)
  weights = np.minimum(np.exp(log_ratio), 1.2) * mask
  # Ratio 1 at the first update: the per-token loss is -A, weighted.
  expected = -(truncated["advantages_B"][:, None] * weights).sum() / mask.sum()
  assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
  assert (weights[mask > 0] < 0.99).mean() > 0.2  # the weights are not all 1
