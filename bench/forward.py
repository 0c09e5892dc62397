"""Forward throughput: our JAX decoder vs transformers' PyTorch model, same weights.

  .venv/bin/python bench/forward.py                 # tiny Qwen3 + SmolLM2-135M
  .venv/bin/python bench/forward.py --models tiny --batch 8 --seq 256 512

Both run float32 on the CPU with identical weights and inputs (left-padded
batch, full-sequence logits, no KV cache). Each measurement is the median of
`--repeats` timed runs after a warm-up (compilation for JAX); JAX and torch are
measured alternately in the same process so machine load hits both alike.
Prints tokens/s for each and the ratio ours/transformers (> 1: we are faster).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from rlsvr.model import assets, hf, qwen3  # noqa: E402
from rlsvr.model.config import ModelConfig  # noqa: E402

TINY_QWEN3 = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  tie_word_embeddings=True)


def load(name: str):
  """(torch model, our config, our params) with the same float32 weights."""
  if name == "tiny":
    cfg = transformers.Qwen3Config(**TINY_QWEN3)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    config = ModelConfig.from_hf_dict(cfg.to_dict())
    tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return model, config, hf.params_from_tensors(config, tensors)
  path = assets.smollm2_135m()
  model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  config, params = hf.load_pretrained(path)
  return model, config, params


def timed(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
  parser.add_argument("--batch", type=int, nargs="+", default=[8])
  parser.add_argument("--seq", type=int, nargs="+", default=[128, 512])
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  torch.set_num_threads(os.cpu_count() or 1)
  print(f"jax {jax.__version__} ({jax.devices()[0].platform}), torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
  print(f"{'model':8} {'batch':>5} {'seq':>5} {'ours tok/s':>11} {'HF tok/s':>10} {'ratio':>6} "
        f"{'compile s':>9} {'max|dlogit|':>11}")
  apply = jax.jit(qwen3.apply, static_argnums=0)
  for name in args.models:
    model, config, params = load(name)
    for batch in args.batch:
      for seq in args.seq:
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, config.vocab_size, (batch, seq))
        mask = np.ones((batch, seq), np.int64)
        mask[0, : seq // 4] = 0  # some left padding
        tokens_t, mask_t = torch.tensor(tokens), torch.tensor(mask)
        positions_t = (mask_t.cumsum(-1) - 1).clamp(min=0)

        start = time.perf_counter()
        ours = apply(config, params, tokens, mask).block_until_ready()
        compile_s = time.perf_counter() - start

        def run_ours():
          apply(config, params, tokens, mask).block_until_ready()

        def run_hf():
          with torch.inference_mode():
            return model(input_ids=tokens_t, attention_mask=mask_t,
                         position_ids=positions_t).logits

        ref = run_hf().numpy()
        diff = np.abs(np.asarray(ours) - ref)[mask.astype(bool)].max()
        t_ours, t_hf = [], []
        for _ in range(args.repeats):  # alternate so drifting load hits both alike
          t_ours.append(timed(run_ours, 1))
          t_hf.append(timed(run_hf, 1))
        n = batch * seq
        ours_tps, hf_tps = n / statistics.median(t_ours), n / statistics.median(t_hf)
        print(f"{name:8} {batch:5d} {seq:5d} {ours_tps:11.0f} {hf_tps:10.0f} "
              f"{ours_tps / hf_tps:6.2f} {compile_s:9.1f} {diff:11.1e}", flush=True)


if __name__ == "__main__":
  main()
