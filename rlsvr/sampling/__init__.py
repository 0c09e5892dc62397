"""Jitted KV-cache sampling: `generate`, the reusable `Sampler`, sampling strategies."""
from rlsvr.sampling.completion import FINISH_REASONS, Completion
from rlsvr.sampling.layout import Buckets
from rlsvr.sampling.sampler import Sampler, compile_count, generate
from rlsvr.sampling.strategies import (Ancestral, Greedy, SamplingParams, Strategy, TopK, TopP,
                                       log_probs, sample)

__all__ = [
    "FINISH_REASONS", "Completion", "Buckets", "Sampler", "compile_count", "generate",
    "Ancestral", "Greedy", "SamplingParams", "Strategy", "TopK", "TopP", "log_probs", "sample",
]
