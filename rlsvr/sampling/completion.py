"""`Completion`: what the sampler returns for one prompt (the envs' protocol type)."""
from __future__ import annotations

import dataclasses

FINISH_REASONS = ("eos", "stop", "length")


@dataclasses.dataclass(frozen=True)
class Completion:
  """One sampled continuation, as the sampler returns it.

  `ids` includes the EOS token when one was produced and nothing after it;
  `logprobs[i]` is the log-probability of `ids[i]` under the distribution the
  sampler actually drew from; `finish_reason` is "eos", "stop" (a stop string, or a
  completed choice of a constrained call) or "length". `allowed[i]`, for a
  constrained call (`choices`), holds the tokens the sampler could draw at
  position i; None: the whole vocabulary.
  """

  ids: tuple[int, ...]
  logprobs: tuple[float, ...]
  finish_reason: str
  allowed: tuple[tuple[int, ...], ...] | None = None

  def __post_init__(self):
    if len(self.ids) != len(self.logprobs):
      raise ValueError(f"{len(self.ids)} ids but {len(self.logprobs)} logprobs")
    if self.allowed is not None and len(self.allowed) != len(self.ids):
      raise ValueError(f"{len(self.ids)} ids but {len(self.allowed)} allowed sets")
    if self.finish_reason not in FINISH_REASONS:
      raise ValueError(f"finish_reason={self.finish_reason!r} is not one of {FINISH_REASONS}")
