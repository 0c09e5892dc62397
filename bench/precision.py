"""Does one GRPO step move the weights? fp32 masters + bf16 compute against bf16 storage.

  python bench/precision.py                      # SmolLM2-135M-Instruct on the CPU, ~3 minutes
  python bench/precision.py --model tiny --lrs 1e-6  # seconds

For each learning rate and each precision layout, one `train_step` from the
same weights on the same batch (random tokens, half prompt and half
completion, advantages N(0, 1)), then: the fraction of weight entries that
changed, the same for the RMSNorm scales alone, and the steady step time
(median of `--steps` further steps). Layouts:

  fp32 masters, bf16 compute   the paper configs (model.param_dtype=float32,
                               model.compute_dtype=bfloat16)
  bf16 storage                 params and compute in bf16 (optimizer moments fp32)
  fp32                         everything float32 (the CPU default)

XLA:CPU runs bf16 matmuls slower than fp32 (../shared/TOOLCHAIN.md): the CPU
times compare the cost of the master copy and the casts, not what a GPU does.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import TINY_QWEN3  # noqa: E402
from rlsvr.model import assets, hf, qwen3  # noqa: E402
from rlsvr.model.config import ModelConfig  # noqa: E402
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step  # noqa: E402

LAYOUTS = {"fp32 masters, bf16 compute": ("float32", "bfloat16"),
           "bf16 storage": ("bfloat16", "bfloat16"),
           "fp32": ("float32", "float32")}


def load(name: str):
  if name == "smollm2-135m":
    return hf.load_pretrained(assets.smollm2_135m(), jnp.float32)
  config = ModelConfig.from_hf_dict({"model_type": "qwen3", **TINY_QWEN3})
  return config, qwen3.init_params(config, jax.random.key(0), jnp.float32)


def make_batch(vocab: int, batch: int, seq_len: int):
  rng = np.random.default_rng(0)
  c = seq_len // 2
  return {"tokens_BxT": rng.integers(0, vocab, (batch, seq_len)).astype(np.int32),
          "attention_mask_BxT": np.ones((batch, seq_len), np.int32),
          "loss_mask_BxC": np.ones((batch, c), np.float32),
          "sampler_logp_BxC": np.zeros((batch, c), np.float32),
          "advantages_B": rng.normal(size=batch).astype(np.float32)}


def changed(before, after, only_norms: bool = False) -> float:
  pairs = [(p, a) for (path, p), a in zip(jax.tree_util.tree_flatten_with_path(before)[0],
                                          jax.tree.leaves(after))
           if not only_norms or "norm" in jax.tree_util.keystr(path)]
  n = sum(np.asarray(p).size for p, _ in pairs)
  return sum(int((np.asarray(p, np.float32) != np.asarray(a, np.float32)).sum())
             for p, a in pairs) / n


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="smollm2-135m", choices=("smollm2-135m", "tiny"))
  parser.add_argument("--lrs", default="1e-6,1e-5")
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--seq-len", type=int, default=128)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()

  config, params = load(args.model)
  batch = make_batch(config.vocab_size, args.batch, args.seq_len)
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {args.model} "
        f"({config.num_params() / 1e6:.0f}M params), batch {args.batch} x {args.seq_len}; "
        f"load {os.getloadavg()[0]:.1f}")
  print(f"{'lr':>7}  {'layout':<28}{'weights changed':>16}{'norm scales':>13}{'step s':>9}")
  for lr in (float(x) for x in args.lrs.split(",")):
    times = {}
    for layout, (param_dtype, compute_dtype) in LAYOUTS.items():
      cfg = GRPOConfig(lr=lr, param_dtype=param_dtype, compute_dtype=compute_dtype)
      state = init_train_state(config, cfg, params)
      before = jax.tree.map(np.asarray, state.params)  # the state is donated below
      state, _ = train_step(state, batch)
      jax.block_until_ready(state.params)
      frac, norms = changed(before, state.params), changed(before, state.params, True)
      runs = []
      for _ in range(args.steps):
        t0 = time.perf_counter()
        state, metrics = train_step(state, batch)
        jax.block_until_ready((state.params, metrics))
        runs.append(time.perf_counter() - t0)
      times[layout] = statistics.median(runs)
      print(f"{lr:>7.0e}  {layout:<28}{100 * frac:>15.2f}%{100 * norms:>12.2f}%"
            f"{times[layout]:>9.2f}", flush=True)
    base = times["fp32 masters, bf16 compute"]
    print(f"{'':>9}step time ratios vs fp32 masters + bf16 compute: " + ", ".join(
        f"{k} {v / base:.2f}x" for k, v in times.items() if v is not base))


if __name__ == "__main__":
  main()
