r"""Reward functions of `bench/learning_vs_trl.py`, in TRL's calling convention.

Imported by both sides: our trainer names them in `reward_fn.reward_funcs`
(`bench.learning_rewards:length_reward`), TRL's `GRPOTrainer` gets the same
function objects in `reward_funcs`. `completions` are strings (plain-text
prompts) or `[{"role": "assistant", "content": text}]` (chat prompts), on both
sides decoded with `skip_special_tokens=True`.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, Sequence

TARGET_CHARS = 20  # `length_reward` is 0 at exactly this many characters.
# configs/rlvr_math.py:cpu's answer_prefill. TRL cannot prefill a reply, so the bench puts
# it at the end of the prompt text on both sides, and the math rewards prepend it again.
MATH_PREFILL = "The final answer is $\\boxed{"


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
  """The text of a completion: a string, or the last chat message's content."""
  if isinstance(completion, str):
    return completion
  return str(completion[-1]["content"]) if completion else ""


def length_reward(prompts, completions, **kwargs) -> list[float]:
  """TRL quickstart-style dense reward: -|TARGET_CHARS - len(text)| / TARGET_CHARS (max 0)."""
  del prompts, kwargs
  return [-abs(TARGET_CHARS - len(completion_text(c))) / TARGET_CHARS for c in completions]


def _with_prefill(completions) -> list[str]:
  return [MATH_PREFILL + completion_text(c) for c in completions]


def _require_math_verify() -> None:
  # Without it the scoring workers fail and every non-literal match silently scores 0.
  if importlib.util.find_spec("math_verify") is None:
    raise ImportError(f"math_accuracy needs math-verify in {sys.executable}: "
                      f"{sys.executable} -m pip install math-verify==0.9.0")


def math_accuracy(prompts, completions, **kwargs) -> list[float | None]:
  """`rlsvr.rewards.math.accuracy` of the prefill + completion (gold in the `answer` column)."""
  from rlsvr.rewards import math as math_rewards  # noqa: PLC0415

  del prompts
  _require_math_verify()
  return math_rewards.accuracy(_with_prefill(completions), **kwargs)


def math_format(prompts, completions, **kwargs) -> list[float]:
  """`rlsvr.rewards.math.format` (a readable `\\boxed{}`) of the prefill + completion."""
  from rlsvr.rewards import math as math_rewards  # noqa: PLC0415

  del prompts
  return math_rewards.format(_with_prefill(completions), **kwargs)


TASKS = {  # task -> (reward function paths, weights), as configs/rlvr_math.py weighs them.
    "length": (["bench.learning_rewards:length_reward"], [1.0]),
    "math": (["bench.learning_rewards:math_accuracy", "bench.learning_rewards:math_format"],
             [1.0, 0.1]),
}
