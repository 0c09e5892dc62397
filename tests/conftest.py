"""Test-wide setup: 8 fake CPU devices for sharding tests, XLA at -O0 (tests/xla.py), no
network, fp32 matmuls.

XLA reads its flags once, when jax is first imported, so they are set here,
before any test module imports jax.
"""
import os

from tests import xla

os.environ["XLA_FLAGS"] = xla.flags(base=os.environ.get("XLA_FLAGS", ""))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests never reach a hub: a hub name must fail at once, not hang on a socket.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every program goes to the persistent cache, however fast it compiled: the two xdist
# workers and the training subprocesses compile the same small programs again and again
# (a cold suite's time is mostly such compiles; docs/benchmarks.md, "test suite").
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax  # noqa: E402

# Parity tests compare against PyTorch fp32; XLA's default CPU matmul precision is
# already fp32, and "highest" keeps that true on backends that would use TF32/bf16.
jax.config.update("jax_default_matmul_precision", "highest")

from rlsvr import runtime  # noqa: E402

# As the main job: test processes (xdist workers, the training subprocesses some tests
# start) share compiled programs through JAX's persistent cache.
runtime.enable_compilation_cache()

import pytest  # noqa: E402


def smoke_config(steps: int = 2):
  """The spy_summ smoke experiment (tiny random Qwen3, real Qwen3 tokenizer)."""
  from configs.spy_summ import get_config

  c = get_config("smoke")
  c.steps = steps
  c.checkpoint.every = 1
  return c


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
  """Workdir of a finished 2-step smoke training run (shared: training costs compile time)."""
  from rlsvr import train

  workdir = str(tmp_path_factory.mktemp("smoke_run"))
  train.train(smoke_config(), workdir)
  return workdir
