"""Decode speed against the memory-bandwidth roofline: the sampler's GPU case.

A random model of a preset's shape (default Qwen3-0.6B) in bfloat16, greedy,
`--batch` distinct random prompts of `--prompt-len` tokens and `--new-tokens`
new tokens each (no EOS: every row runs to the end). Prints tokens/s, the
decode step time, and the step time memory bandwidth allows: every weight and
every filled KV slot read once per step, the least a decode step must read,
over the device's bandwidth (nominal where known, and measured here by a
streaming reduction).

  python bench/decode_roofline.py                # the issue's GPU case (batch 64, 512 + 256)
  python bench/decode_roofline.py --torch        # also HF generate on the same weights
  .venv/bin/python bench/decode_roofline.py --model tiny --dtype float32 --batch 8 \\
      --prompt-len 32 --new-tokens 64 --torch    # CPU smoke run, minutes

The decode step time excludes prefill: calls for 1 and for `--new-tokens` new
tokens share one compiled shape (a single new-token bucket), so their time
difference is `new_tokens - 1` decode steps.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench.common import TINY_QWEN3  # noqa: E402
from rlsvr.model import config as config_lib  # noqa: E402
from rlsvr.model import hf, qwen3  # noqa: E402
from rlsvr.sampling import Buckets, Sampler  # noqa: E402

# Spec-sheet HBM bandwidth in GB/s, by a substring of `device_kind`; first match wins.
NOMINAL_GBS = (("H200", 4800), ("H100 PCIe", 2000), ("H100", 3350), ("A100-SXM4-40GB", 1555),
               ("A100", 2039), ("L40S", 864), ("L4", 300))


def best_seconds(fn, repeats: int) -> float:
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return best


def measured_gbs(device) -> float:
  """Read bandwidth of a jitted sum over an array far larger than any cache."""
  n = (2**28 if device.platform == "gpu" else 2**26) // 4 * 4  # 1 GiB on GPU, 256 MiB else
  x = jax.device_put(jnp.ones((n,), jnp.float32), device)
  total = jax.jit(jnp.sum)
  total(x).block_until_ready()
  return n * 4 / best_seconds(lambda: total(x).block_until_ready(), 10) / 1e9


def step_bytes(config, params, batch: int, prompt_len: int, new_tokens: int, kv_bytes: int):
  """(weight bytes, mean KV-cache bytes) a decode step must read at least."""
  weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  if not config.tie_word_embeddings:  # The embedding is then only gathered, `batch` rows.
    embed = params["embed"]
    weights -= (embed.shape[0] - batch) * embed.shape[1] * embed.dtype.itemsize
  slots = prompt_len + (new_tokens + 1) / 2  # Filled slots, averaged over the steps.
  kv = (config.num_layers * batch * 2 * config.num_kv_heads * config.head_dim * slots * kv_bytes)
  return weights, kv


def torch_generate(config, params, prompts, new_tokens: int, dtype: str, repeats: int):
  """(best seconds, new token ids) of HF `generate` (greedy, KV cache) on the same
  weights, or None without torch."""
  try:
    import torch
    import transformers
  except ImportError as e:
    print(f"torch side skipped: {e}")
    return None
  torch_dtype = getattr(torch, dtype)
  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf_config = transformers.AutoConfig.for_model(**config.to_hf_dict(dtype))
  model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype)
  state = {k: torch.from_numpy(v.astype(np.float32)).to(torch_dtype)
           for k, v in hf.hf_tensors(config, params)}
  missing, _ = model.load_state_dict(state, strict=False)
  assert set(missing) <= {"lm_head.weight"}, missing  # tied: lm_head is the embedding
  model = model.to(device).eval()
  ids = torch.tensor(prompts, device=device)

  def run():
    with torch.inference_mode():
      out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    if device == "cuda":
      torch.cuda.synchronize()
    return out

  new_ids = run()[:, ids.shape[1]:].cpu().numpy()
  return best_seconds(run, repeats), new_ids


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="qwen3-0.6b", help="a preset name, or 'tiny'")
  parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--prompt-len", type=int, default=512)
  parser.add_argument("--new-tokens", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=3, help="timed calls (fastest counts)")
  parser.add_argument("--torch", action="store_true", help="also time HF generate")
  args = parser.parse_args()

  device = jax.devices()[0]
  config = (config_lib.ModelConfig.from_hf_dict({"model_type": "qwen3", **TINY_QWEN3})
            if args.model == "tiny" else config_lib.preset(args.model))
  dtype = jnp.dtype(args.dtype)
  params = jax.jit(qwen3.init_params, static_argnums=(0, 2))(config, jax.random.key(0), dtype)
  prompts = np.random.default_rng(0).integers(
      1, config.vocab_size, (args.batch, args.prompt_len)).tolist()
  print(f"jax {jax.__version__} on {device.device_kind} ({device.platform}); {args.model} "
        f"({config.num_params() / 1e6:.0f}M params) in {args.dtype}; batch {args.batch}, "
        f"{args.prompt_len}-token prompts, {args.new_tokens} new tokens, greedy")

  # One new-token bucket: the 1-token and the full call run the same compiled code.
  sampler = Sampler(config, buckets=Buckets(new_tokens=(args.new_tokens,)))

  def call(new_tokens):
    out = sampler(params, prompts, max_new_tokens=new_tokens, temperature=0.0)
    assert all(len(c.ids) == new_tokens for c in out)
    return out

  start = time.perf_counter()
  ours_ids = np.array([c.ids for c in call(args.new_tokens)])
  first_s = time.perf_counter() - start
  full_s = best_seconds(lambda: call(args.new_tokens), args.repeats)
  prefill_s = best_seconds(lambda: call(1), args.repeats)
  step_s = (full_s - prefill_s) / (args.new_tokens - 1)
  tokens = args.batch * args.new_tokens
  print(f"ours: {tokens / full_s:.0f} tok/s ({full_s:.3f} s/call; prefill and first token "
        f"{prefill_s:.3f} s; compile about {first_s - full_s:.1f} s); decode step "
        f"{step_s * 1e3:.3f} ms = {args.batch / step_s:.0f} tok/s in steady state")

  weights, kv = step_bytes(config, params, args.batch, args.prompt_len, args.new_tokens,
                           dtype.itemsize)
  print(f"bytes a step must read: {weights / 1e9:.3f} GB of weights + {kv / 1e9:.3f} GB of "
        f"KV cache (mean over the steps)")
  nominal = next((gbs for name, gbs in NOMINAL_GBS if name in device.device_kind), None)
  for label, gbs in (("nominal", nominal), ("measured", measured_gbs(device))):
    if gbs:
      floor_s = (weights + kv) / (gbs * 1e9)
      print(f"roofline at {label} {gbs:.0f} GB/s: {floor_s * 1e3:.3f} ms/step; the measured "
            f"step is at {floor_s / step_s:.0%} of it")

  if args.torch:
    theirs = torch_generate(config, params, prompts, args.new_tokens, args.dtype, args.repeats)
    if theirs is not None:
      hf_s, hf_ids = theirs
      # A sanity check, not a test: in bfloat16 near-ties may flip a greedy choice.
      same = np.mean(np.all(hf_ids[:, :8] == ours_ids[:, :8], axis=1))
      print(f"HF generate: {tokens / hf_s:.0f} tok/s ({hf_s:.3f} s/call); ours "
            f"{hf_s / full_s:.2f}x; rows whose first 8 tokens match: {same:.0%}")


if __name__ == "__main__":
  main()
