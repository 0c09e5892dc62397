"""Peak host memory while loading an HF checkpoint: our sharded loader vs full host copies.

  .venv/bin/python bench/load_memory.py [--layers 6] [--vocab 32000] [--dir /tmp/ckpt]

Writes a random Qwen3-shaped float32 checkpoint of a few hundred MB once, then
loads it in a fresh process per method while a thread samples the process's
anonymous resident memory (RssAnon: heap, not the page cache behind the memory
map) every millisecond:

  ours, mesh fsdp=8   hf.load_pretrained(dir, mesh=...) on 8 host CPU devices
  ours, one device    hf.load_pretrained(dir)
  full host copy      safetensors' numpy load_file, then device_put (the naive path)
  transformers        AutoModelForCausalLM.from_pretrained (the peer)

On the CPU the "devices" are host memory, so the loaded weights themselves count:
the number that matters is the transient = peak - final (memory used only while
loading), to compare with the largest single tensor. Prints one row per method.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
MB = 2**20


def rss_anon() -> int:
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith("RssAnon:"):
        return int(line.split()[1]) * 1024
  raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


class PeakSampler:
  """Samples RssAnon in a thread; `peak` is the highest value seen."""

  def __init__(self, interval_s: float = 0.001):
    self.peak, self._stop = rss_anon(), threading.Event()
    self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

  def sample(self):
    self.peak = max(self.peak, rss_anon())

  def _run(self, interval_s):
    while not self._stop.is_set():
      self.sample()
      time.sleep(interval_s)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    self.sample()


def measure(method: str, path: str) -> dict:
  """Runs in the child process: load `path` by `method`, report memory in bytes."""
  import gc  # noqa: PLC0415

  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr import parallel  # noqa: PLC0415
  from rlsvr.model import hf  # noqa: PLC0415

  mesh = parallel.make_mesh({"fsdp": 8}) if method == "ours-mesh" else None
  if method == "transformers":
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
  jax.block_until_ready(jax.numpy.zeros(8))  # Backend up before the baseline.
  gc.collect()
  baseline = rss_anon()
  with PeakSampler() as sampler:
    if method in ("ours-mesh", "ours-1dev"):
      _, loaded = hf.load_pretrained(path, mesh=mesh)
      jax.block_until_ready(loaded)
    elif method == "host-copy":
      from safetensors.numpy import load_file  # noqa: PLC0415
      tensors = load_file(os.path.join(path, "model.safetensors"))
      loaded = jax.block_until_ready({k: jax.device_put(v) for k, v in tensors.items()})
      # Both copies are alive here: sampled explicitly, because a sampling thread
      # starved by a busy machine can miss this moment (then the control sees no copy).
      sampler.sample()
      del tensors
    else:
      loaded = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    gc.collect()
  final = rss_anon()
  leaves = (list(loaded.parameters()) if method == "transformers" else jax.tree.leaves(loaded))
  return {"baseline": baseline, "peak": sampler.peak, "final": final,
          "weights": int(sum(np.prod(x.shape) * 4 for x in leaves))}


def write_checkpoint(path: str, layers: int, vocab: int) -> dict:
  import jax  # noqa: PLC0415

  from rlsvr.model import hf, params as params_lib, qwen3  # noqa: PLC0415
  from rlsvr.model.config import ModelConfig  # noqa: PLC0415

  config = ModelConfig(vocab_size=vocab, hidden_size=1024, intermediate_size=3072,
                       num_layers=layers, num_heads=16, num_kv_heads=8, head_dim=64,
                       tie_word_embeddings=False)
  if not os.path.exists(os.path.join(path, "config.json")):
    hf.save_pretrained(path, config, qwen3.init_params(config, jax.random.key(0)))
  shapes = {p: x.shape for p, x in params_lib.flatten(qwen3.abstract_params(config)).items()}
  size = lambda s: int(__import__("math").prod(s)) * 4
  return {"file": sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)),
          "largest_tensor": max(size(s[1:]) if p.startswith("layers/") else size(s)
                                for p, s in shapes.items()),
          "largest_stacked": max(size(s) for p, s in shapes.items())}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--layers", type=int, default=6)
  parser.add_argument("--vocab", type=int, default=32000)
  parser.add_argument("--dir", default="/tmp/rlsvr_load_memory_ckpt")
  parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(measure(*args.child)))
    return
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sizes = write_checkpoint(args.dir, args.layers, args.vocab)
  print(f"checkpoint {sizes['file'] / MB:.0f} MB (float32); largest tensor "
        f"{sizes['largest_tensor'] / MB:.0f} MB; largest stacked param (L x layer tensor) "
        f"{sizes['largest_stacked'] / MB:.0f} MB")
  print(f"{'method':<18}{'peak-base MB':>14}{'final-base MB':>15}{'transient MB':>14}"
        f"{'transient/largest tensor':>26}")
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
         "PYTHONPATH": REPO}
  for method in ("ours-mesh", "ours-1dev", "host-copy", "transformers"):
    out = subprocess.run([sys.executable, __file__, "--child", method, args.dir], env=env,
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    transient = r["peak"] - r["final"]
    print(f"{method:<18}{(r['peak'] - r['baseline']) / MB:>14.0f}"
          f"{(r['final'] - r['baseline']) / MB:>15.0f}{transient / MB:>14.0f}"
          f"{transient / sizes['largest_tensor']:>26.2f}")


if __name__ == "__main__":
  main()
