"""A short learning run per precision layout: does the reward rise at a small learning rate?

  python bench/learning_precision.py                 # ~3 minutes on 2 CPU cores
  python bench/learning_precision.py --lr 3e-4 --steps 80 --seeds 0

The task is the dense verifiable reward of tests/rl/test_train_step.py: a tiny
random Qwen3 (vocabulary 32) continues random prompts, and the reward of a
completion is the fraction of its tokens equal to token 7 (chance: 1/32).
Each step samples 8 prompts x 8 completions with the real sampler on the
step's sampler weights (`sampling_params`), builds the GRPO batch and makes one
`train_step`, exactly as the trainer does. The layouts differ only in where
the weights live:

  fp32 masters, bf16 compute   the paper configs
  bf16 storage                 weights and compute in bf16
  fp32                         everything float32

At a learning rate near a bf16 ulp of the weights (random init std 0.2:
ulp ~1e-3), bf16 storage rounds many updates away and learns more slowly; the
masters keep them and follow the fp32 curve. Prints the mean reward per step (averaged over
seeds) and the first and last five steps' means per layout.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlsvr.envs.base import Trajectory  # noqa: E402
from rlsvr.model import qwen3  # noqa: E402
from rlsvr.model.config import ModelConfig  # noqa: E402
from rlsvr.rl.batch import build_batch  # noqa: E402
from rlsvr.rl.train_step import (GRPOConfig, init_train_state, sampling_params,  # noqa: E402
                                 train_step)
from rlsvr.sampling import Sampler  # noqa: E402

CONFIG = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)
TARGET, PROMPTS, GROUP, NEW_TOKENS = 7, 8, 8, 8
LAYOUTS = {"fp32 masters, bf16 compute": ("float32", "bfloat16"),
           "bf16 storage": ("bfloat16", "bfloat16"),
           "fp32": ("float32", "float32")}


def init_params(seed: int):
  """Normal(0, 0.2) weights and unit norm scales, as tests/rl/tiny.py."""
  rng = np.random.default_rng(seed)

  def make(path, leaf):
    if "norm" in jax.tree_util.keystr(path):
      return np.ones(leaf.shape, np.float32)
    return rng.normal(0.0, 0.2, leaf.shape).astype(np.float32)

  return jax.tree_util.tree_map_with_path(make, qwen3.abstract_params(CONFIG))


def run(layout: str, lr: float, steps: int, seed: int) -> list[float]:
  param_dtype, compute_dtype = LAYOUTS[layout]
  cfg = GRPOConfig(lr=lr, weight_decay=0.0, param_dtype=param_dtype, compute_dtype=compute_dtype)
  state = init_train_state(CONFIG, cfg, jax.tree.map(jax.numpy.asarray, init_params(seed)))
  sampler = Sampler(CONFIG, seed=seed)
  rng = np.random.default_rng(seed)
  curve = []
  for _ in range(steps):
    prompts = [rng.integers(1, CONFIG.vocab_size, 4).tolist() for _ in range(PROMPTS)]
    rows = [p for p in prompts for _ in range(GROUP)]
    completions = sampler(sampling_params(state), rows, max_new_tokens=NEW_TOKENS)
    trajectories = [
        Trajectory(p, list(c.ids), list(c.logprobs), float(np.mean(np.equal(c.ids, TARGET))),
                   group_id=i // GROUP, role="policy", finish_reason=c.finish_reason)
        for i, (p, c) in enumerate(zip(rows, completions))]
    curve.append(float(np.mean([t.reward for t in trajectories])))
    state, _ = train_step(state, build_batch(trajectories, min_bucket=8))
  return curve


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--lr", type=float, default=1e-3)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--seeds", default="0,1,2")
  args = parser.parse_args()
  seeds = [int(s) for s in args.seeds.split(",")]
  print(f"dense reward (fraction of token {TARGET}), lr {args.lr:g}, {args.steps} steps, "
        f"seeds {seeds}, {PROMPTS} prompts x {GROUP} samples")
  curves = {}
  for layout in LAYOUTS:
    curves[layout] = np.mean([run(layout, args.lr, args.steps, s) for s in seeds], axis=0)
    c = curves[layout]
    print(f"  {layout:<28} first 5 steps {c[:5].mean():.3f}  last 5 steps {c[-5:].mean():.3f}",
          flush=True)
  print("per step: " + " | ".join(LAYOUTS))
  for i in range(args.steps):
    print(f"  {i + 1:>3} " + "  ".join(f"{curves[k][i]:.3f}" for k in LAYOUTS))


if __name__ == "__main__":
  main()
