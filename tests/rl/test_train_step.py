"""train_step: exact micro-batching, loss values, skipped updates, sharding, and learning."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rlsvr import parallel
from rlsvr.model import params as params_lib
from rlsvr.rl.rollout import Trajectory
from rlsvr.rl import grpo, losses
from rlsvr.rl.batch import build_batch
from rlsvr.rl.logprobs import token_logprobs
from rlsvr.rl.train_step import (GRPOConfig, TrainState, init_train_state, make_optimizer,
                                 reference_logprobs, train_step)
from tests.rl.tiny import CONFIG, random_params

# kl and entropy terms on, so every part of the loss is exercised by each test. Adam's
# first step is ~lr * sign(g), which turns float32 noise in a near-zero gradient entry into
# a full-size difference; eps = 1e-4 keeps the update continuous in g for the 1e-6 checks.
BASE = GRPOConfig(lr=1e-3, kl_coef=0.1, entropy_coef=0.01, weight_decay=0.01, adam_eps=1e-4)

logprobs_fn = jax.jit(functools.partial(token_logprobs, CONFIG))


def completion_logprobs(params, batch, fn=logprobs_fn):
  """Logprobs and entropies of the whole sequence, cut to the batch's completion columns:
  the independent reference for the step, which scores only those columns."""
  c = batch["loss_mask_BxC"].shape[1]
  logp, entropy = fn(params, batch["tokens_BxT"], batch["attention_mask_BxT"])
  return logp[:, -c:], entropy[:, -c:]


@pytest.fixture(scope="module")
def params():
  return random_params()


@pytest.fixture(scope="module")
def batch(params):
  """8 rows in 4 groups, ragged prompts/completions, one row with an empty completion."""
  rng = np.random.default_rng(0)
  rows = []
  for i in range(8):
    n_c = 0 if i == 5 else int(rng.integers(1, 12))
    rows.append(Trajectory(prompt_ids=rng.integers(1, 97, int(rng.integers(2, 9))).tolist(),
                           completion_ids=rng.integers(1, 97, n_c).tolist(),
                           logprobs=[0.0] * n_c, reward=float(rng.integers(0, 3)),
                           group_id=i // 2, role="policy"))
  b = build_batch(rows, min_bucket=8)
  # Sampler logprobs: the current policy's, perturbed so that some ratios clip.
  logp = completion_logprobs(params, b)[0]
  noise = rng.normal(0.0, 0.3, logp.shape).astype(np.float32)
  b["old_logp_BxC"] = (np.asarray(logp) + noise) * b["loss_mask_BxC"]
  assert b["loss_mask_BxC"][5].sum() == 0 and b["advantages_B"].any()
  return b


def run(config, params, batch, mesh=None):
  """One step from fresh state; returns (state, metrics) as numpy."""
  if mesh is not None:
    params = parallel.shard_params(params, mesh)
    rows = NamedSharding(mesh, P(("data", "fsdp")))
    batch = {k: jax.device_put(v, rows) for k, v in batch.items()}
  state = init_train_state(CONFIG, config, params)
  state, metrics = train_step(state, batch)
  return state, jax.tree.map(np.asarray, metrics)


def assert_trees_close(a, b, atol):
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0, err_msg=str(path))


# Every aggregation mode with the vanilla loss, and the other registered losses under TRL's
# loss types (GSPO's sequence ratio is a per-row mean: it must survive one row per micro-batch).
CONFIGS = {**{m: dataclasses.replace(BASE, agg_mode=m, loss_scale_factor=16.0 * (
                  m == "seq-mean-token-sum-norm")) for m in grpo.AGG_MODES},
           "gspo": dataclasses.replace(BASE, policy_loss="gspo", loss_type="grpo",
                                       clip_low=0.1, clip_high=0.1),
           "cispo": dataclasses.replace(BASE, policy_loss="cispo", loss_type="dr_grpo",
                                        loss_scale_factor=24.0, clip_high=0.28)}


@functools.partial(jax.jit, static_argnums=2)
def full_batch_updates(params, batch, configs):
  """The update of each config written plainly: one loss over the whole batch, its
  gradient, one optimizer step (the reference for every config, one compile)."""
  full = functools.partial(token_logprobs, CONFIG)
  ref_logp, _ = completion_logprobs(params, batch, full)
  mask = batch["loss_mask_BxC"]
  adv = jnp.broadcast_to(batch["advantages_B"][:, None], mask.shape)
  out = []
  for cfg in configs:
    def loss_fn(p, cfg=cfg):
      logp, entropy = completion_logprobs(p, batch, full)
      agg = functools.partial(grpo.aggregate, mask_BxT=mask, mode=cfg.loss_agg_mode,
                              loss_scale_factor=cfg.loss_scale_factor or None)
      terms = losses.policy_loss_fn(cfg.policy_loss)(logp, batch["old_logp_BxC"], adv, mask, cfg)
      kl = agg(grpo.kl_penalty(logp, ref_logp, cfg.kl_kind))
      return agg(terms["pg_loss"]) + cfg.kl_coef * kl - cfg.entropy_coef * agg(entropy)
    grads = jax.grad(loss_fn)(params)
    tx = make_optimizer(cfg)
    updates, _ = tx.update(grads, tx.init(params), params)
    out.append(optax.apply_updates(params, updates))
  return out


@pytest.fixture(scope="module")
def full_batch_params(params, batch):
  configs = tuple(CONFIGS.values())
  return dict(zip(CONFIGS, full_batch_updates(params, batch, configs)))


@pytest.mark.parametrize("name", CONFIGS)
def test_micro_batches_equal_full_batch(params, batch, full_batch_params, name):
  # One row per micro-batch: the fully masked row is a micro-batch of its own.
  cfg = dataclasses.replace(CONFIGS[name], micro_batch_size=1)
  micro, _ = run(cfg, params, batch)
  expected = full_batch_params[name]
  moved = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(expected),
                                                          jax.tree.leaves(params)))
  assert moved > 1e-4  # the update is visible at the tolerance below
  assert_trees_close(micro.params, expected, atol=1e-6)
  if name == BASE.agg_mode:  # the unsplit step too (compiled for the other tests anyway)
    assert_trees_close(run(BASE, params, batch)[0].params, expected, atol=1e-6)


def test_policy_loss_and_loss_type_change_the_update(full_batch_params):
  # The registry and the presets reach the update: each config moves the weights its own way.
  leaves = {k: np.concatenate([np.ravel(x) for x in jax.tree.leaves(v)])
            for k, v in full_batch_params.items()}
  for name in ("gspo", "cispo"):
    assert np.abs(leaves[name] - leaves["token-mean"]).max() > 1e-4, name


def test_loss_terms_and_metrics_match_the_pure_functions(params, batch):
  _, metrics = run(BASE, params, batch)  # same config and shapes as above: no new compile
  logp, entropy = completion_logprobs(params, batch)
  mask = batch["loss_mask_BxC"]
  adv = jnp.broadcast_to(batch["advantages_B"][:, None], mask.shape)
  pg, pg_metrics = grpo.policy_loss(logp, batch["old_logp_BxC"], adv, mask)
  # The reference is the initial policy, so at step 0 the KL term is exactly 0.
  kl = grpo.aggregate(grpo.kl_penalty(logp, logp, "low_var_kl"), mask, "token-mean")
  ent = grpo.aggregate(entropy, mask, "token-mean")
  expected = {"actor/pg_loss": pg, "actor/kl": kl, "actor/entropy": ent,
              "actor/loss": pg + 0.1 * kl - 0.01 * ent,
              **{f"actor/{k}": v for k, v in pg_metrics.items()}}
  for k, v in expected.items():
    np.testing.assert_allclose(metrics[k], float(v), rtol=1e-5, atol=1e-6, err_msg=k)
  assert 0 < metrics["actor/pg_clipfrac"] < 1
  assert metrics["actor/update_skipped"] == 0 and metrics["actor/grad_norm"] > 0
  np.testing.assert_allclose(metrics["actor/lr"], 1e-3)


def test_nonfinite_gradient_skips_the_update(params, batch):
  state = init_train_state(CONFIG, BASE, params)
  bad = dict(batch, advantages_B=np.full_like(batch["advantages_B"], np.nan))
  state, metrics = train_step(state, bad)
  assert metrics["actor/update_skipped"] == 1 and int(state.step) == 1
  assert_trees_close(state.params, params, atol=0)


def test_reference_logprobs_and_state(params, batch):
  state = init_train_state(CONFIG, dataclasses.replace(BASE, micro_batch_size=4), params)
  # Only what a step reads or writes (the unused env_state and rng are gone).
  assert [f.name for f in dataclasses.fields(TrainState) if f.metadata.get("pytree_node", True)
          ] == ["step", "params", "opt_state", "ref_params", "base"]
  ref = reference_logprobs(state, batch)
  logp, _ = completion_logprobs(params, batch)
  np.testing.assert_allclose(ref, logp, atol=1e-5)
  assert isinstance(state, TrainState) and state.ref_params is not None
  assert init_train_state(CONFIG, GRPOConfig(), params).ref_params is None  # kl_coef == 0


def test_bf16_params_keep_fp32_optimizer_state(params, batch):
  cfg = dataclasses.replace(BASE, param_dtype="bfloat16", micro_batch_size=4)
  state, metrics = run(cfg, params, batch)
  assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.bfloat16)}
  moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim > 0]
  assert moments and {x.dtype for x in moments} == {jnp.dtype(jnp.float32)}
  assert np.isfinite(metrics["actor/loss"])


def test_mesh_matches_single_device(params, batch):
  mesh = parallel.make_mesh({"data": 2, "fsdp": 4})
  single, single_metrics = run(BASE, params, batch)
  sharded, sharded_metrics = run(BASE, params, batch, mesh=mesh)
  # Params stay sharded by the rules after the update, and Adam's moments alike.
  q_proj = sharded.params["layers"]["attn"]["q_proj"]
  rule = NamedSharding(mesh, params_lib.spec_for("layers/attn/q_proj", q_proj.shape, mesh))
  assert rule.spec[1] == "fsdp" and q_proj.sharding.is_equivalent_to(rule, q_proj.ndim)
  mu = sharded.opt_state[1][0].mu["layers"]["attn"]["q_proj"]
  assert mu.sharding.is_equivalent_to(rule, q_proj.ndim)
  assert_trees_close(sharded.params, single.params, atol=2e-6)
  for k, v in single_metrics.items():
    np.testing.assert_allclose(sharded_metrics[k], v, rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("loss", [{}, {"loss_type": "dr_grpo", "loss_scale_factor": 8.0}],
                         ids=["token-mean", "dr_grpo"])
def test_grpo_learns_a_dense_verifiable_reward(loss):
  """Reward = fraction of completion tokens equal to TARGET: from chance (1/32) to >= 0.8.
  dr_grpo divides by the 8 new tokens every row may have (its max completion length)."""
  from rlsvr.model.config import ModelConfig
  from rlsvr.sampling import Sampler

  config = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)
  target, group_size, max_steps = 7, 8, 30
  state = init_train_state(config, GRPOConfig(lr=1e-2, weight_decay=0.0, **loss),
                           random_params(config, seed=1))
  sampler = Sampler(config, seed=0)
  rng = np.random.default_rng(0)
  means = []
  for _ in range(max_steps):
    prompts = [rng.integers(1, 32, 4).tolist() for _ in range(8)]
    rows = [p for p in prompts for _ in range(group_size)]
    completions = sampler(state.params, rows, max_new_tokens=8)
    trajectories = [
        Trajectory(prompt, list(c.ids), list(c.logprobs), float(np.mean(np.equal(c.ids, target))),
                   group_id=i // group_size, role="policy", finish_reason=c.finish_reason)
        for i, (prompt, c) in enumerate(zip(rows, completions))]
    means.append(np.mean([t.reward for t in trajectories]))
    state, metrics = train_step(state, build_batch(trajectories, min_bucket=8))
    compiled = compiled if means[1:] else train_step._cache_size()
    # Sampler and trainer weights are the same: their logprobs must agree.
    assert abs(float(metrics["rollout_corr/kl"])) < 1e-3
    assert float(metrics["actor/ppo_kl"]) == 0  # old logprobs are the trainer's own
    if means[-1] >= 0.8:
      break
  assert means[0] < 0.1, means
  assert means[-1] >= 0.8, means
  assert train_step._cache_size() == compiled  # the state's signature is stable: one compile


def test_row_counts_in_one_bucket_share_one_compiled_update():
  """5 to 6 rows pad to 6, 7 to 8 to 8 (`row_bucket`): four row counts, two compiles; the
  padding rows change nothing."""
  from rlsvr.rl.batch import row_bucket

  assert [row_bucket(n) for n in (1, 2, 3, 5, 7, 9, 13, 17, 25)] == [1, 2, 3, 6, 8, 12, 16, 24, 32]
  assert row_bucket(9, 8) == 16 and row_bucket(24, 16) == 32
  params = random_params()
  cfg = dataclasses.replace(BASE, lr=1e-3)
  rng = np.random.default_rng(3)
  before = train_step._cache_size()
  for n in (5, 6, 7, 8):
    rows = [Trajectory(prompt_ids=rng.integers(1, 97, 5).tolist(),
                       completion_ids=rng.integers(1, 97, 6).tolist(), logprobs=[-1.0] * 6,
                       reward=float(k % 2), group_id=k // 2, role="policy") for k in range(n)]
    batch = build_batch(rows, cfg, min_bucket=8)
    assert batch["advantages_B"].shape == (row_bucket(n),)
    padded, metrics = train_step(init_train_state(CONFIG, cfg, params), batch)
    if n == 5:  # Its sixth row is padding: without it, the same update.
      unpadded = {k: v[:5] for k, v in batch.items()}
      first = (padded, metrics)
  assert train_step._cache_size() - before == 2
  exact, exact_metrics = train_step(init_train_state(CONFIG, cfg, params), unpadded)
  assert_trees_close(first[0].params, exact.params, atol=1e-6)
  for key in ("actor/pg_loss", "actor/kl", "actor/entropy"):
    np.testing.assert_allclose(first[1][key], exact_metrics[key], rtol=1e-5, atol=1e-7)
