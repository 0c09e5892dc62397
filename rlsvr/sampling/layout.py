"""How a sampler call's rows become compiled shapes: buckets, shared prompts, slices.

  Buckets.pick(n, options, what) -> padded size
  length_bucket(n, minimum) -> padded token length (prompts, the train batch): powers
                                 of two, and 1.5 x 2^k from 128 on
  layout(rows, per_prompt, share, rows_per_device) -> (R, U, B)
  slice_rows(rows, per_prompt, prompt_len, new_len, ...) -> rows per slice

Plain functions of sizes, so `rlsvr.plan` computes exactly what the sampler will
run (and so they are tested without a model).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

_POW2 = tuple(2**i for i in range(21))
LONG_STEP = 4096  # Above 2 x LONG_STEP, lengths round up to multiples of this.


FINE_FROM = 128  # From here on, a bucket between each two powers of two: 1.5 x 2^k.


def length_buckets(minimum: int = 16) -> tuple[int, ...]:
  """Padded token lengths: powers of two from `minimum`, from FINE_FROM also 1.5 x 2^k
  (128, 192, 256, 384, ...) up to 2 x LONG_STEP, then multiples of LONG_STEP up to 2**20.

  Every padded token costs prefill, KV cache and, in the train batch, a forward and a
  backward through every layer: at powers of two alone a 185-token GSM8K prompt padded to
  256 and a 1100-token detection prompt to 2048, close to twice the work
  (`bench/learning_vs_trl.py`). The half-steps cap the padding at a third of the tokens
  above FINE_FROM, for at most twice the compiled shapes (cached across runs by
  `rlsvr.runtime.enable_compilation_cache`); short lengths keep powers of two, where the
  work is small and shapes would multiply. Long prompts (the spy detectors read a whole
  document and every player's output) would pad from 40k to 64k tokens at a power of
  two: multiples of LONG_STEP there. The sampler's prompts and the train batch
  (`length_bucket`) share these, so a prompt the sampler padded to P is padded to P again
  in the batch.
  """
  fine = tuple(3 * b // 2 for b in _POW2 if FINE_FROM <= b and 3 * b // 2 <= 2 * LONG_STEP)
  return (tuple(sorted({b for b in _POW2 + fine if minimum <= b <= 2 * LONG_STEP}))
          + tuple(range(3 * LONG_STEP, 2**20 + 1, LONG_STEP)))


@dataclasses.dataclass(frozen=True)
class Buckets:
  """Allowed padded sizes; a size is rounded up to the smallest bucket >= it."""

  batch: tuple[int, ...] = _POW2
  prompt: tuple[int, ...] = length_buckets()
  new_tokens: tuple[int, ...] = tuple(b for b in _POW2 if b >= 16)

  @staticmethod
  def pick(n: int, options: Sequence[int], what: str) -> int:
    for b in sorted(options):
      if b >= n:
        return b
    raise ValueError(f"{what}={n} exceeds the largest bucket {max(options)}")


def length_bucket(n: int, minimum: int = 16) -> int:
  """The padded length of `n` tokens: the smallest of `length_buckets(minimum)` >= n."""
  return Buckets.pick(n, length_buckets(minimum), "length")


def layout(rows: int, per_prompt: int, share: bool, rows_per_device: Callable[[int], int],
           buckets: Buckets = Buckets()) -> tuple[int, int, int]:
  """(R, U, B) for `rows` rows where each prompt repeats `per_prompt` times.

  R rows continue each of U prefilled prompts (U bucketed, B = U x R rows).
  Prompts are shared (R > 1) unless that would give a device more prompts to
  prefill than rows of its own (`rows_per_device`: too few prompts to split over
  the mesh, the prefill would be replicated). The planner uses this too.
  """
  pick = lambda n: Buckets.pick(n, buckets.batch, "batch size")
  r = per_prompt if share and per_prompt > 1 and rows % per_prompt == 0 else 1
  if r > 1 and rows_per_device(pick(rows // r)) > rows_per_device(pick(rows)):
    r = 1
  u = pick(rows // r)
  return r, u, u * r


def slice_rows(rows: int, per_prompt: int, prompt_len: int, new_len: int, *, max_rows: int,
               max_cache_tokens: int, share: bool, rows_per_device: Callable[[int], int],
               buckets: Buckets = Buckets()) -> int:
  """Rows per slice of a call: at most `max_rows` (0: all), and the most whose KV cache
  holds at most `max_cache_tokens` slots (0: no limit), U x P + B x N at bucketed sizes.

  `per_prompt`: the call's rows come in consecutive runs of that many equal prompts.
  """
  limit = min(max_rows or rows, rows)
  if not max_cache_tokens:
    return limit
  p = Buckets.pick(prompt_len, buckets.prompt, "prompt length")
  n = Buckets.pick(new_len, buckets.new_tokens, "max_new_tokens")
  for k in range(limit, 0, -1):
    _, u, b = layout(k, per_prompt, share, rows_per_device, buckets)
    if u * p + b * n <= max_cache_tokens:
      return k
  raise ValueError(f"one row's KV cache ({p} prompt + {n} new slots) exceeds "
                   f"max_cache_tokens={max_cache_tokens}")
