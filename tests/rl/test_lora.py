"""LoRA: adapters in the forward, the sampler's merged weights, and the adapter-only update
against the update written plainly (through merged weights), in every batch layout."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding

from rlsvr import parallel
from rlsvr.model import lora as lora_lib
from rlsvr.model import params as params_lib
from rlsvr.model import qwen3
from rlsvr.rl import grpo, losses
from rlsvr.rl.batch import build_batch
from rlsvr.rl.logprobs import token_logprobs
from rlsvr.rl.train_step import (init_train_state, make_optimizer, reference_logprobs,
                                 sampling_params, train_step)
from rlsvr.sampling import Sampler
from tests.rl.test_shared_prompts import played_rows
from tests.rl.test_train_step import BASE, batch, completion_logprobs, params  # noqa: F401
from tests.rl.tiny import CONFIG

ALL = lora_lib.LoraConfig(rank=4, alpha=8.0, targets=tuple(lora_lib.TARGETS))
SOME = lora_lib.LoraConfig(rank=2, alpha=4.0, targets=("q", "v"), layers=(1,))


def trained_adapters(lora, seed=1):
  """Adapters as after some training: B nonzero, so A's gradient is too."""
  fresh = lora_lib.init_adapters(CONFIG, lora, jax.random.key(seed))
  return jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(seed + 1), x.shape),
                      fresh)


def lora_state(cfg, params, lora, mesh=None):
  """A fresh LoRA state whose adapters are `trained_adapters` (optimizer state fresh)."""
  if mesh is not None:
    params = parallel.shard_params(params, mesh)
  state = init_train_state(CONFIG, cfg, params, lora=lora, seed=0)
  adapters = trained_adapters(lora)
  if mesh is not None:
    adapters = parallel.shard_params(adapters, mesh)
  return state.replace(params=adapters, opt_state=make_optimizer(cfg).init(adapters))


def _peft_lora_a(fan_in, rank):
  """lora_A's weight as peft initialises it on a Linear of `fan_in` inputs."""
  import peft
  import torch

  torch.manual_seed(0)
  model = torch.nn.ModuleDict({"down_proj": torch.nn.Linear(fan_in, 8)})
  peft.inject_adapter_in_model(peft.LoraConfig(r=rank, target_modules=["down_proj"]), model)
  return model["down_proj"].lora_A["default"].weight.detach().numpy()


def test_fresh_adapters_leave_the_model_exactly_as_it_was(params):  # noqa: F811
  state = init_train_state(CONFIG, BASE, params, lora=ALL, seed=3)
  # Only the adapters train: A as PEFT draws it (kaiming-uniform, bound 1/sqrt(fan_in)), B = 0.
  flat = params_lib.flatten(state.params)
  assert sorted(flat) == sorted(ALL.paths()) and state.ref_params is None
  a = np.asarray(flat["layers/mlp/down_lora_a"])
  peft_a = _peft_lora_a(fan_in=64, rank=4)  # PEFT's own init of the same shape.
  assert a.shape == (2, 64, 4) and peft_a.shape == (4, 64)
  for x in (a, peft_a):
    assert 0.9 / 8 < np.abs(x).max() <= 1 / 8 and abs(float(x.mean())) < 0.01
  assert not any(np.asarray(flat[p]).any() for p in flat if p.endswith("_lora_b"))
  # The sampler's weights are the base bit for bit, so greedy output is the base model's.
  merged = sampling_params(state)
  for x, y in zip(jax.tree.leaves(merged), jax.tree.leaves(params)):
    np.testing.assert_array_equal(x, y)
  sampler = Sampler(CONFIG)
  prompts = [[5, 9, 13], [7, 2]]
  ours = sampler(merged, prompts, max_new_tokens=6, temperature=0.0)
  base = sampler(params, prompts, max_new_tokens=6, temperature=0.0)
  assert [list(c.ids) for c in ours] == [list(c.ids) for c in base]


@pytest.mark.parametrize("lora", [ALL, SOME], ids=["all", "q_v_layer1"])
def test_attached_adapters_equal_merged_weights(params, lora):  # noqa: F811
  adapters = trained_adapters(lora)
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 97, (3, 9)))
  attached = qwen3.apply(CONFIG, lora_lib.attach(CONFIG, lora, params, adapters), tokens)
  merged_params = lora_lib.merge(CONFIG, lora, params, adapters)
  merged = qwen3.apply(CONFIG, merged_params, tokens)
  assert float(jnp.abs(attached - qwen3.apply(CONFIG, params, tokens)).max()) > 1e-2
  np.testing.assert_allclose(attached, merged, atol=2e-5, rtol=0)
  # W + alpha/r * A @ B, by hand, for the o projection (two input dims) and layer 0.
  a = np.asarray(adapters["layers"]["attn"]["q_lora_a"], np.float64)
  b = np.asarray(adapters["layers"]["attn"]["q_lora_b"], np.float64)
  delta = np.einsum("ldr,lrhk->ldhk", a, b) * lora.layer_scales(CONFIG)[:, None, None, None]
  np.testing.assert_allclose(merged_params["layers"]["attn"]["q_proj"],
                             np.asarray(params["layers"]["attn"]["q_proj"]) + delta, atol=1e-6)
  if lora is ALL:
    a = np.asarray(adapters["layers"]["attn"]["o_lora_a"], np.float64)
    b = np.asarray(adapters["layers"]["attn"]["o_lora_b"], np.float64)
    np.testing.assert_allclose(merged_params["layers"]["attn"]["o_proj"],
                               np.asarray(params["layers"]["attn"]["o_proj"])
                               + 2.0 * np.einsum("lhkr,lrd->lhkd", a, b), atol=1e-6)
  else:  # Layer 0 has no adapter: its weights are the base's exactly.
    np.testing.assert_array_equal(merged_params["layers"]["attn"]["q_proj"][0],
                                  params["layers"]["attn"]["q_proj"][0])


@functools.partial(jax.jit, static_argnums=(3, 4))
def plain_lora_update(params, adapters, batch, cfg, lora):  # noqa: F811
  """The LoRA update written plainly: the loss of the merged weights (W + s A B) over the
  whole batch, its gradient in the adapters, one AdamW step; the reference is the base."""
  full = functools.partial(token_logprobs, CONFIG)
  ref_logp, _ = completion_logprobs(params, batch, full)
  mask = batch["loss_mask_BxC"]
  adv = jnp.broadcast_to(batch["advantages_B"][:, None], mask.shape)

  def loss_fn(ad):
    logp, entropy = completion_logprobs(lora_lib.merge(CONFIG, lora, params, ad), batch, full)
    agg = functools.partial(grpo.aggregate, mask_BxT=mask, mode=cfg.loss_agg_mode)
    terms = losses.policy_loss_fn(cfg.policy_loss)(logp, batch["old_logp_BxC"], adv, mask, cfg)
    kl = agg(grpo.kl_penalty(logp, ref_logp, cfg.kl_kind))
    return agg(terms["pg_loss"]) + cfg.kl_coef * kl - cfg.entropy_coef * agg(entropy)

  tx = make_optimizer(cfg)
  updates, _ = tx.update(jax.grad(loss_fn)(adapters), tx.init(adapters), adapters)
  return optax.apply_updates(adapters, updates)


@pytest.mark.parametrize("micro,mesh_shape,lora", [
    (1, None, ALL), (0, {"data": 2, "tensor": 2}, ALL), (0, None, SOME)],
    ids=["micro1", "mesh", "q_v_layer1"])
def test_the_lora_update_equals_the_update_written_plainly(params, batch, micro,  # noqa: F811
                                                           mesh_shape, lora):
  cfg = dataclasses.replace(BASE, micro_batch_size=micro)
  mesh = parallel.make_mesh(mesh_shape, jax.devices()[:4]) if mesh_shape else None
  state = lora_state(cfg, params, lora, mesh)
  before = jax.tree.map(np.asarray, state.params)
  expected = plain_lora_update(params, trained_adapters(lora), batch, cfg, lora)
  state, metrics = train_step(state, parallel.put_batch(batch, mesh) if mesh else batch)
  moved = max(float(np.abs(np.asarray(a) - b).max())
              for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(before)))
  assert moved > 1e-4 and metrics["actor/update_skipped"] == 0
  for path, x in params_lib.flatten(state.params).items():
    np.testing.assert_allclose(x, params_lib.flatten(expected)[path], atol=2e-6, rtol=0,
                               err_msg=path)
  # The base is frozen and untouched, and the state keeps no optimizer state for it.
  for x, y in zip(jax.tree.leaves(state.base), jax.tree.leaves(params)):
    np.testing.assert_array_equal(x, y)
  n_adapter = sum(x.size for x in jax.tree.leaves(state.params))
  assert sum(x.size for x in jax.tree.leaves(state.opt_state)) <= 2 * n_adapter + 2
  if mesh is not None:  # Adapters keep the parameter table's rule: B of q splits its heads.
    b = state.params["layers"]["attn"]["q_lora_b"]
    rule = NamedSharding(mesh, params_lib.spec_for("layers/attn/q_lora_b", b.shape, mesh))
    assert rule.spec[2] == "tensor" and b.sharding.is_equivalent_to(rule, b.ndim)


def test_the_reference_is_the_base_model(params, batch):  # noqa: F811
  state = init_train_state(CONFIG, BASE, params, lora=ALL, seed=0)
  np.testing.assert_allclose(reference_logprobs(state, batch),
                             completion_logprobs(params, batch)[0], atol=1e-5)
  state, metrics = train_step(state, batch)
  assert metrics["actor/kl"] == 0.0  # Fresh adapters: the policy is the reference.
  state, metrics = train_step(state, batch)
  assert metrics["actor/kl"] > 0.0


# The layouts and splits of test_shared_prompts, under LoRA: updates > 1 score the old
# policy in a no-gradient pass that must read the adapters too.
@pytest.mark.parametrize("updates,micro", [(2, 4)])
def test_the_lora_update_is_the_same_in_every_layout(params, updates, micro):  # noqa: F811
  cfg = dataclasses.replace(BASE, updates_per_batch=updates, micro_batch_size=micro)
  rows = played_rows()
  multiple = updates * (micro or 1)
  results = []
  for share, pack in ((False, 0), (True, 0), (True, 128)):  # Padded, shared, packed.
    b = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple, share_prompts=share,
                    pack_tokens=pack)
    state, metrics = train_step(lora_state(cfg, params, ALL), b)
    results.append((jax.tree.map(np.asarray, state.params), metrics))
  (plain, m_plain), *others = results
  moved = max(float(np.abs(a - b).max())
              for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(trained_adapters(ALL))))
  assert moved > 1e-4
  for adapters, m in others:
    for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(plain)):
      np.testing.assert_allclose(a, b, atol=2e-6, rtol=0)
    np.testing.assert_allclose(m["actor/loss"], m_plain["actor/loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad,message", [
    ({"rank": -1}, "rank=-1"), ({"targets": "q,qq"}, "targets="), ({"targets": "q,q"}, "targets="),
    ({"layers": "0,x"}, "layer indices"), ({"layers": "1,1"}, "repeat"),
    ({"dropout": 1.0}, "dropout=1.0")])
def test_bad_lora_configs_are_refused(bad, message):
  import ml_collections

  c = ml_collections.ConfigDict({"rank": 4, "alpha": 8.0, "targets": "q,v", "layers": "",
                                 "dropout": 0.0})
  c.update(bad)
  with pytest.raises(ValueError, match=message):
    lora_lib.from_config(c)
  assert lora_lib.from_config(ml_collections.ConfigDict(
      {"rank": 0, "alpha": 8.0, "targets": "q", "layers": ""})) is None
  with pytest.raises(ValueError, match="not layers of a 2-layer model"):
    lora_lib.LoraConfig(rank=2, alpha=1.0, layers=(2,)).check(CONFIG)


def test_dropout_drops_each_adapters_input_as_peft_does(params, batch):  # noqa: F811
  """PEFT's lora_dropout: the adapter (not the base's matmul) sees x zeroed with
  probability p, else x / (1 - p), a mask of its own per projection and layer."""
  lora = dataclasses.replace(ALL, dropout=0.25)
  adapters = trained_adapters(lora)
  key = jax.random.key(7)
  weights = lora_lib.attach(CONFIG, lora, params, adapters, key)
  part = jax.tree.map(lambda x: x[0], weights["layers"]["attn"])  # layer 0's
  x = jnp.ones((64, 32))
  q, v = lora_lib.dropout(x, part, "q"), lora_lib.dropout(x, part, "v")
  np.testing.assert_allclose(np.unique(q), [0.0, 1 / 0.75], rtol=1e-6)
  assert 0.2 < float((q == 0).mean()) < 0.3 and not np.array_equal(q, v)
  np.testing.assert_array_equal(q, lora_lib.dropout(x, part, "q"))  # The key decides.
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 97, (3, 9)))
  plain = qwen3.apply(CONFIG, lora_lib.attach(CONFIG, lora, params, adapters), tokens)
  dropped = qwen3.apply(CONFIG, weights, tokens)
  assert float(jnp.abs(dropped - plain).max()) > 1e-3
  np.testing.assert_array_equal(dropped, qwen3.apply(CONFIG, weights, tokens))
  # Without adapters' B (fresh) dropout changes nothing: the base path is not dropped.
  fresh = lora_lib.init_adapters(CONFIG, lora, jax.random.key(1))
  np.testing.assert_allclose(qwen3.apply(CONFIG, lora_lib.attach(CONFIG, lora, params, fresh,
                                                                 key), tokens),
                             qwen3.apply(CONFIG, params, tokens), atol=1e-6)
  # In the step: the masks follow (step, update, micro-batch), so a rerun is identical,
  # and the update differs from the one without dropout.
  cfg = dataclasses.replace(BASE, micro_batch_size=4)
  with_dropout = [train_step(lora_state(cfg, params, lora), batch)[0].params for _ in range(2)]
  without = train_step(lora_state(cfg, params, ALL), batch)[0].params
  for a, b, c in zip(*(jax.tree.leaves(t) for t in (*with_dropout, without))):
    np.testing.assert_array_equal(a, b)
  assert max(float(jnp.abs(a - c).max()) for a, c in zip(jax.tree.leaves(with_dropout[0]),
                                                         jax.tree.leaves(without))) > 1e-4
  assert lora_lib.peft_config(lora, "x")["lora_dropout"] == 0.25
