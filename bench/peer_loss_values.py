"""Peers' own values of our policy losses, loss types and advantages, on fixed inputs.

  python3 -m venv /tmp/peers
  /tmp/peers/bin/pip install torch==2.13.0 trl==1.16.0 transformers==5.24.0
  /tmp/peers/bin/pip install --no-deps verl==0.9.1
  /tmp/peers/bin/pip install numpy packaging ray tensordict omegaconf codetiming orjson
  /tmp/peers/bin/python bench/peer_loss_values.py      # writes tests/rl/peer_values.json

Runs the peers' code itself, not a port: verl 0.9.1's registered policy losses
(`vanilla`, `gspo`, `cispo`) under every aggregation mode and its advantage
estimators (`grpo`, `rloo`, `reinforce_plus_plus_baseline`); TRL 1.16's
`GRPOTrainer._compute_loss` (called on a stand-in trainer whose forward
returns fixed log-probs) for its loss types and sequence-level (GSPO)
importance sampling. Each case stores the loss, its gradient with respect to
the current log-probs and the peers' metrics; tests/rl/test_peers.py checks
ours against them, so CI needs neither peer installed. The inputs are stored
too: the test reads them rather than regenerating them.
"""
from __future__ import annotations

import collections
import json
import os
import types

import numpy as np
import torch
import trl
import verl
from trl.trainer.grpo_trainer import GRPOTrainer
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "rl",
                   "peer_values.json")
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def policy_inputs(rng, lengths, noise):
  """Current and old log-probs (old = current + noise), one advantage per row, a mask."""
  b, t = len(lengths), max(lengths)
  logp = -rng.uniform(0.05, 3.0, (b, t))
  old = logp + rng.normal(0.0, noise, (b, t))
  adv = np.repeat(rng.normal(0.0, 1.0, (b, 1)), t, axis=1)
  mask = (np.arange(t)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
  return {"logp": logp, "old_logp": old, "advantages": adv, "mask": mask}


def verl_policy_case(inputs, loss, agg_mode, clip_low, clip_high):
  config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                       clip_ratio_low=clip_low, clip_ratio_high=clip_high)
  logp = torch.tensor(inputs["logp"], requires_grad=True)
  pg_loss, metrics = core_algos.get_policy_loss_fn(loss)(
      old_log_prob=torch.tensor(inputs["old_logp"]), log_prob=logp,
      advantages=torch.tensor(inputs["advantages"]), response_mask=torch.tensor(inputs["mask"]),
      loss_agg_mode=agg_mode, config=config)
  pg_loss.backward()
  return {"loss": loss, "agg_mode": agg_mode, "clip_low": clip_low, "clip_high": clip_high,
          "pg_loss": pg_loss.item(), "grad": logp.grad.tolist(),
          **{k.removeprefix("actor/"): float(v) for k, v in metrics.items()}}


class _Accelerator:
  num_processes = 1

  def reduce(self, x, reduction="sum"):
    del reduction
    return x

  def gather(self, x):
    return x


def trl_case(inputs, loss_type, epsilon_low, epsilon_high, level="token",
             max_completion_length=16):
  """TRL's `_compute_loss` on a stand-in trainer: one process, no accumulation, beta 0."""
  logp = torch.tensor(inputs["logp"], requires_grad=True)
  mask = torch.tensor(inputs["mask"])
  trainer = types.SimpleNamespace(
      _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
      aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
      importance_sampling_level=level, beta=0.0, loss_type=loss_type, epsilon_low=epsilon_low,
      epsilon_high=epsilon_high, args=types.SimpleNamespace(delta=None, steps_per_generation=1),
      use_vllm=False, model=types.SimpleNamespace(training=True),
      current_gradient_accumulation_steps=1, max_completion_length=max_completion_length,
      accelerator=_Accelerator(), _entropy_bonus_enabled=False,
      _metrics={"train": collections.defaultdict(list)})
  b, t = mask.shape
  batch = {"prompt_ids": torch.zeros((b, 1), dtype=torch.long),
           "prompt_mask": torch.ones((b, 1), dtype=torch.long),
           "completion_ids": torch.zeros((b, t), dtype=torch.long), "completion_mask": mask,
           "advantages": torch.tensor(inputs["advantages"][:, 0]),
           "old_per_token_logps": torch.tensor(inputs["old_logp"]),
           "num_items_in_batch": mask.sum()}
  loss = GRPOTrainer._compute_loss(trainer, None, batch)
  loss.backward()
  return {"loss_type": loss_type, "importance_sampling_level": level,
          "epsilon_low": epsilon_low, "epsilon_high": epsilon_high,
          "max_completion_length": max_completion_length, "value": loss.item(),
          "grad": logp.grad.tolist()}


def advantage_cases(rng):
  sizes = (4, 3, 2, 1, 5, 4)
  index = np.repeat(np.arange(len(sizes)), sizes)
  rewards = rng.integers(0, 11, len(index)) / 10.0
  for g in range(len(sizes)):  # no group with all-equal rewards: there the rule differs
    rows = np.flatnonzero(index == g)
    if len(rows) > 1 and np.ptp(rewards[rows]) == 0:
      rewards[rows[0]] += 0.5
  lengths = rng.integers(1, 13, len(index))
  t = int(lengths.max())
  mask = torch.tensor((np.arange(t)[None, :] < lengths[:, None]).astype(np.float64))
  token_rewards = torch.zeros_like(mask)
  token_rewards[torch.arange(len(index)), torch.tensor(lengths - 1)] = torch.tensor(rewards)
  first = lambda out: out[0][torch.arange(len(index)), 0].tolist()
  est = lambda name, **kw: first(core_algos.get_adv_estimator_fn(name)(
      token_level_rewards=token_rewards.clone(), response_mask=mask, index=index, **kw))
  return {"inputs": {"rewards": rewards.tolist(), "index": index.tolist(),
                     "lengths": lengths.tolist()},
          "grpo": est("grpo"), "grpo_no_std": est("grpo", norm_adv_by_std_in_grpo=False),
          "rloo": est("rloo"),
          "reinforce_plus_plus_baseline": est("reinforce_plus_plus_baseline")}


def main():
  torch.set_default_dtype(torch.float64)
  rng = np.random.default_rng(19)
  # One fully masked row and one single-token row; a token with ratio e^1.5 under a negative
  # advantage exercises the dual clip.
  lengths = (7, 3, 5, 1, 0, 6)
  wide = policy_inputs(rng, lengths, 0.3)
  wide["advantages"][1] = -abs(wide["advantages"][1])
  wide["logp"][1, 0] = wide["old_logp"][1, 0] + 1.5
  narrow = policy_inputs(rng, lengths, 1e-3)
  policy = []
  for name, inputs, loss, low, high in (("wide", wide, "vanilla", 0.2, 0.28),
                                        ("wide", wide, "gspo", 0.2, 0.28),
                                        ("narrow", narrow, "gspo", 3e-4, 4e-4),
                                        ("wide", wide, "cispo", 0.2, 0.28),
                                        ("wide", wide, "cispo", 1.0, 4.0)):
    policy += [dict(verl_policy_case(inputs, loss, mode, low, high), inputs=name)
               for mode in AGG_MODES]
  # TRL: no dual clip (ratios stay below 3) and, but for one case, no fully masked row.
  trl_lengths = (7, 3, 5, 1, 6)
  trl_wide = policy_inputs(rng, trl_lengths, 0.3)
  trl_narrow = policy_inputs(rng, trl_lengths, 1e-3)
  trl_empty = policy_inputs(rng, (7, 3, 0, 5), 0.3)
  assert np.exp(trl_wide["logp"] - trl_wide["old_logp"]).max() < 3.0
  trl_cases = [dict(trl_case(trl_wide, lt, 0.2, 0.28), inputs="wide")
               for lt in ("grpo", "bnpo", "dapo", "dr_grpo")]
  trl_cases += [dict(trl_case(trl_wide, "cispo", 0.2, 5.0), inputs="wide"),
                dict(trl_case(trl_narrow, "grpo", 3e-4, 4e-4, level="sequence"), inputs="narrow"),
                dict(trl_case(trl_empty, "grpo", 0.2, 0.28), inputs="empty_row")]
  tolist = lambda d: {k: np.asarray(v).tolist() for k, v in d.items()}
  out = {"versions": {"verl": verl.__version__, "trl": trl.__version__,
                      "torch": torch.__version__},
         "verl_policy": {"inputs": {"wide": tolist(wide), "narrow": tolist(narrow)},
                         "cases": policy},
         "trl": {"inputs": {"wide": tolist(trl_wide), "narrow": tolist(trl_narrow),
                            "empty_row": tolist(trl_empty)}, "cases": trl_cases},
         "verl_advantages": advantage_cases(rng)}
  with open(OUT, "w") as f:
    json.dump(out, f, indent=1)
  print(f"wrote {len(policy)} verl loss cases, {len(trl_cases)} TRL cases and the "
        f"advantages to {OUT}")


if __name__ == "__main__":
  main()
