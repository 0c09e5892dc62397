"""The `reward_fn` config section, typed once: `RewardFnConfig.from_config(c)`."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping


# What becomes of a row every reward function returned None for (configs/rlvr_math.py).
UNSCORABLE = ("zero_advantage", "drop")


@dataclasses.dataclass(frozen=True)
class RewardFnConfig:
  """`c.reward_fn`, checked; see configs/rlvr_math.py for every key's meaning."""

  reward_funcs: str
  prompts_per_step: int = 8
  group_size: int = 8
  max_new_tokens: int = 1024
  prompt_field: str = "prompt"
  system_prompt: str = ""
  instruction: str = ""
  answer_prefill: str = ""
  use_chat_template: bool = True
  reward_weights: str = ""
  reward_timeout_s: float = 600.0
  unscorable: str = "zero_advantage"
  sampling: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    for key in ("prompts_per_step", "group_size", "max_new_tokens"):
      if getattr(self, key) < 1:
        raise ValueError(f"{key}={getattr(self, key)} must be >= 1")
    if not self.prompt_field:
      raise ValueError("prompt_field must name the dataset column that holds the prompt")
    if self.system_prompt and not self.use_chat_template:
      raise ValueError("system_prompt needs use_chat_template=True (plain-text prompts have "
                       "no system turn)")
    if self.reward_timeout_s < 0:
      raise ValueError(f"reward_timeout_s={self.reward_timeout_s} must be >= 0 (0: no limit)")
    if self.unscorable not in UNSCORABLE:
      raise ValueError(f"unscorable={self.unscorable!r}: use one of {UNSCORABLE}")
    paths, weights = self.paths(), self.weights()
    if not paths:
      raise ValueError("reward_funcs is empty: name at least one 'module:function'")
    if len(weights) != len(paths):
      raise ValueError(f"reward_weights has {len(weights)} weights for {len(paths)} reward_funcs")

  def paths(self) -> list[str]:
    return [p.strip() for p in self.reward_funcs.split(",") if p.strip()]

  def weights(self) -> list[float]:
    """One weight per reward function; empty `reward_weights`: all 1 (as TRL)."""
    if not self.reward_weights.strip():
      return [1.0] * len(self.paths())
    try:
      return [float(w) for w in self.reward_weights.split(",")]
    except ValueError:
      raise ValueError(f"reward_weights={self.reward_weights!r} is not comma-separated "
                       "numbers") from None

  @classmethod
  def from_config(cls, c) -> "RewardFnConfig":
    fields = dict(c.reward_fn)
    sampling = {k: c.sampling[k] for k in ("temperature", "top_p", "top_k")}
    return cls(**fields, sampling=sampling)
