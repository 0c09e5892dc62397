"""One way to derive the seed of anything from the run's seed and where it is used.

Every sampler call, host RNG and data order of a run is seeded by
`derive(run_seed, purpose, *path)`: a resumed run derives exactly the seeds an
uninterrupted one would, and two purposes (the policy's and the judge's calls
of one step) never share a stream. numpy's `SeedSequence` mixes the path, so
nearby paths give unrelated seeds (unlike arithmetic such as seed * K + step).
"""
from __future__ import annotations

import zlib

import numpy as np


def _word(part: int | str) -> int:
  if isinstance(part, str):  # Stable across processes (unlike hash()).
    return zlib.crc32(part.encode())
  if part < 0:
    raise ValueError(f"seed path parts must be >= 0, got {part}")
  return int(part)


def derive(seed: int, *path: int | str) -> int:
  """A 31-bit seed for `path` (ints >= 0 and names) under the run's `seed`."""
  words = [_word(seed), *(_word(p) for p in path)]
  return int(np.random.SeedSequence(words).generate_state(1)[0] & 0x7FFFFFFF)


def rng(seed: int, *path: int | str) -> np.random.Generator:
  """A host RNG for `path` under the run's `seed` (see `derive`)."""
  return np.random.default_rng(derive(seed, *path))
