"""Our losses, loss types and advantages against verl 0.9.1's and TRL 1.16's own outputs.

The expected values in peer_values.json were computed by the peers' code itself
(bench/peer_loss_values.py, in a separate venv with torch, verl and trl), on the
inputs stored next to them: values, gradients and metrics.
"""
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr.rl import advantages, grpo, losses
from rlsvr.rl.config import GRPOConfig

with open(os.path.join(os.path.dirname(__file__), "peer_values.json")) as f:
  PEERS = json.load(f)


def ours(cfg: GRPOConfig, inputs):
  """(loss, gradient w.r.t. logp, metrics) of `cfg`'s policy loss and aggregation."""
  arr = {k: jnp.asarray(v, jnp.float32) for k, v in inputs.items()}
  mask = arr["mask"]

  def loss(logp):
    terms = losses.policy_loss_fn(cfg.policy_loss)(logp, arr["old_logp"], arr["advantages"],
                                                   mask, cfg)
    value = grpo.aggregate(terms["pg_loss"], mask, cfg.loss_agg_mode,
                           loss_scale_factor=cfg.loss_scale_factor or None)
    metrics = {k: grpo.masked_mean(terms[key], mask) for k, key in (
        ("pg_clipfrac", "clipped"), ("pg_clipfrac_lower", "clipped_lower"),
        ("ppo_kl", "neg_log_ratio"))}
    return value, metrics

  (value, metrics), grad = jax.value_and_grad(loss, has_aux=True)(arr["logp"])
  return float(value), np.asarray(grad), {k: float(v) for k, v in metrics.items()}


def case_id(case):
  return "-".join(str(case.get(k)) for k in ("loss", "loss_type", "inputs", "agg_mode",
                                              "clip_low", "epsilon_high") if k in case)


@pytest.mark.parametrize("case", PEERS["verl_policy"]["cases"], ids=case_id)
def test_policy_losses_match_verl(case):
  inputs = PEERS["verl_policy"]["inputs"][case["inputs"]]
  # verl's seq-mean-token-sum-norm divides by its padded response length: these inputs' width.
  width = np.asarray(inputs["mask"]).shape[-1]
  cfg = GRPOConfig(policy_loss=case["loss"], agg_mode=case["agg_mode"],
                   clip_low=case["clip_low"], clip_high=case["clip_high"],
                   loss_scale_factor=float(width) * (case["agg_mode"] == "seq-mean-token-sum-norm"))
  value, grad, metrics = ours(cfg, inputs)
  np.testing.assert_allclose(value, case["pg_loss"], rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(grad, case["grad"], rtol=2e-5, atol=1e-6)
  for k in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
    np.testing.assert_allclose(metrics[k], case[k], rtol=2e-5, atol=1e-6, err_msg=k)


def trl_config(case) -> GRPOConfig:
  """Our config of a TRL loss: its clip, its aggregation preset; TRL's cispo is ours with
  no lower bound and the upper at epsilon_high; its sequence level is our gspo."""
  low, high = case["epsilon_low"], case["epsilon_high"]
  if case["loss_type"] == "cispo":
    return GRPOConfig(policy_loss="cispo", loss_type="dapo", clip_low=1.0, clip_high=high - 1.0)
  return GRPOConfig(policy_loss="gspo" if case["importance_sampling_level"] == "sequence"
                    else "vanilla", loss_type=case["loss_type"], clip_low=low, clip_high=high,
                    loss_scale_factor=float(case["max_completion_length"]))


@pytest.mark.parametrize("case", [c for c in PEERS["trl"]["cases"] if c["inputs"] != "empty_row"],
                         ids=case_id)
def test_loss_types_match_trl(case):
  value, grad, _ = ours(trl_config(case), PEERS["trl"]["inputs"][case["inputs"]])
  np.testing.assert_allclose(value, case["value"], rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(grad, case["grad"], rtol=2e-5, atol=1e-6)


def test_trl_grpo_counts_fully_masked_rows_where_we_do_not():
  # As documented in rlsvr.rl.losses: TRL's "grpo" means over all rows of the batch, ours over
  # rows with tokens (our padding rows are fully masked); the ratio is exactly rows / B.
  (case,) = [c for c in PEERS["trl"]["cases"] if c["inputs"] == "empty_row"]
  inputs = PEERS["trl"]["inputs"]["empty_row"]
  value, grad, _ = ours(trl_config(case), inputs)
  mask = np.asarray(inputs["mask"])
  share = (mask.sum(-1) > 0).sum() / len(mask)
  assert share < 1
  np.testing.assert_allclose(value * share, case["value"], rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(grad * share, case["grad"], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name,config", [
    ("grpo", {}), ("grpo_no_std", {"norm_adv_by_std": False}), ("rloo", {}),
    ("reinforce_plus_plus_baseline", {}),
])
def test_advantages_match_verl(name, config):
  peer = PEERS["verl_advantages"]
  inputs = peer["inputs"]
  n = len(inputs["rewards"])
  estimator = name.removesuffix("_no_std")
  cfg = GRPOConfig(advantage=estimator, **config)
  fn = functools.partial(advantages.advantage_fn(estimator), config=cfg)
  out = fn(np.asarray(inputs["rewards"], np.float32), np.asarray(inputs["index"]),
           np.zeros(n, np.float32), np.asarray(inputs["lengths"], np.float32))
  np.testing.assert_allclose(np.asarray(out), peer[name], rtol=1e-5, atol=1e-6)
