"""Jitted KV-cache sampling: `generate`, the reusable `Sampler`, the next-token math.

The jitted parts load on first use, so host-side code that needs only the shape
rules (`layout`) or the `Completion` type does not import jax and the model.
"""
import importlib

from rlsvr.sampling.completion import FINISH_REASONS, Completion
from rlsvr.sampling.layout import Buckets

_LAZY = {"Sampler": "sampler", "compile_count": "sampler", "generate": "sampler",
         "SamplingParams": "strategies", "log_probs": "strategies", "sample": "strategies"}

__all__ = ["FINISH_REASONS", "Completion", "Buckets", *_LAZY]


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(f"rlsvr.sampling.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'rlsvr.sampling' has no attribute {name!r}")
