"""Mixed precision: fp32 master weights with a bf16 forward/backward, as the paper configs run."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr import train
from rlsvr.rl.rollout import Trajectory
from rlsvr.rl.batch import build_batch
from rlsvr.rl.train_step import GRPOConfig, init_train_state, sampling_params, train_step
from tests.rl.tiny import CONFIG, random_params


@pytest.fixture(scope="module")
def params():
  return random_params()


@pytest.fixture(scope="module")
def batch():
  """Every token id of the vocabulary appears, so every embedding row gets a gradient."""
  rng = np.random.default_rng(0)
  ids = rng.permutation(np.tile(np.arange(1, CONFIG.vocab_size), 3)).tolist()
  rows = []
  for i in range(8):
    chunk = ids[i * 36:(i + 1) * 36]
    rows.append(Trajectory(prompt_ids=chunk[:20], completion_ids=chunk[20:], logprobs=[0.0] * 16,
                           reward=float(i % 3), group_id=i // 4, role="policy"))
  return build_batch(rows, min_bucket=8)


def paper_update_config(**overrides) -> GRPOConfig:
  """The paper config's update (spy_summ, as `train` builds it), on the tiny model."""
  from configs.spy_summ import get_config

  cfg = train.grpo_config(get_config())
  return dataclasses.replace(cfg, micro_batch_size=0, remat=False, **overrides)


def one_step(cfg, params, batch):
  state = init_train_state(CONFIG, cfg, params)
  state, metrics = train_step(state, batch)
  return state, jax.tree.map(float, metrics)


def changed_fraction(before, after) -> float:
  changed = [np.asarray(a, np.float32) != np.asarray(b, np.float32)
             for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))]
  return float(sum(c.sum() for c in changed) / sum(c.size for c in changed))


def test_paper_configs_keep_fp32_masters_and_compute_in_bf16():
  cfg = paper_update_config()
  assert (cfg.param_dtype, cfg.compute_dtype, cfg.lr) == ("float32", "bfloat16", 1e-6)


def test_a_step_at_lr_1e6_changes_nearly_every_weight(params, batch):
  cfg = paper_update_config(kl_coef=0.0)
  state, metrics = one_step(cfg, params, batch)
  assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
  assert metrics["actor/grad_norm"] > 0
  assert changed_fraction(params, state.params) >= 0.99
  # RMSNorm scales sit at 1.0, where a bf16 ulp is 2**-7: only fp32 masters can move them.
  layers = state.params["layers"]
  for name, scale in (("input_norm", layers["input_norm"]["scale"]),
                      ("post_attn_norm", layers["post_attn_norm"]["scale"]),
                      ("q_norm", layers["attn"]["q_norm"]["scale"]),
                      ("final_norm", state.params["final_norm"]["scale"])):
    moved = np.abs(np.asarray(scale) - 1.0)
    assert (moved > 0).mean() >= 0.99 and moved.max() < 1e-5, name
  # The old storage: bf16 weights round the same update away almost everywhere.
  bf16_state, _ = one_step(dataclasses.replace(cfg, param_dtype="bfloat16"), params, batch)
  assert changed_fraction(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params),
                          bf16_state.params) < 0.05


def test_bf16_compute_update_agrees_with_fp32(params, batch):
  # A larger Adam eps makes the update continuous in the gradient, so it shows the bf16
  # gradient's error instead of sign flips of entries whose gradient is ~0.
  cfg = paper_update_config(kl_coef=0.0, adam_eps=1e-3)
  mixed, m_metrics = one_step(cfg, params, batch)
  full, f_metrics = one_step(dataclasses.replace(cfg, compute_dtype="float32"), params, batch)
  delta = lambda s: np.concatenate([(np.asarray(a) - np.asarray(p)).ravel() for a, p in zip(
      jax.tree.leaves(s.params), jax.tree.leaves(params))])
  d_mixed, d_full = delta(mixed), delta(full)
  assert np.linalg.norm(d_mixed - d_full) / np.linalg.norm(d_full) < 0.05
  assert np.mean(np.sign(d_mixed) == np.sign(d_full)) > 0.97
  for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"):
    assert m_metrics[key] == pytest.approx(f_metrics[key], rel=2e-2, abs=1e-3), key


def test_the_sampler_reads_one_compute_dtype_copy(params):
  cfg = paper_update_config()
  state = init_train_state(CONFIG, cfg, params)
  copy = sampling_params(state)
  assert {x.dtype for x in jax.tree.leaves(copy)} == {jnp.dtype(jnp.bfloat16)}
  assert {x.dtype for x in jax.tree.leaves(state.ref_params)} == {jnp.dtype(jnp.bfloat16)}
  same = init_train_state(CONFIG, dataclasses.replace(cfg, compute_dtype="float32"), params)
  assert sampling_params(same) is same.params  # equal dtypes: no copy


def test_a_resumed_run_continues_from_the_fp32_masters(params, batch, tmp_path):
  from rlsvr import checkpoint

  cfg = paper_update_config(kl_coef=0.0, lr=1e-4)
  state = init_train_state(CONFIG, cfg, params)
  state, _ = train_step(state, batch)
  saver = checkpoint.Checkpointer(str(tmp_path))
  saver.save(1, state, {}, {})
  saver.close()
  restored, _, _ = checkpoint.Checkpointer(str(tmp_path)).restore(init_train_state(CONFIG, cfg,
                                                                                   params))
  for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params)):
    assert a.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # The masters carry what a bf16 copy would lose.
  leaves = [np.asarray(x) for x in jax.tree.leaves(restored.params)]
  lossy = [x != x.astype(jnp.bfloat16).astype(np.float32) for x in leaves]
  assert sum(x.sum() for x in lossy) / sum(x.size for x in lossy) > 0.9
  expected, _ = train_step(state, batch)
  continued, _ = train_step(restored, batch)
  for a, b in zip(jax.tree.leaves(continued.params), jax.tree.leaves(expected.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
