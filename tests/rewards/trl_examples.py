"""TRL's documented reward functions, unchanged but for their names (TRL's docs name
several `reward_func`; one reward set needs distinct names).

From TRL 1.16 `docs/source/grpo_trainer.md`, "Using a custom reward function"
(Apache-2.0), plus TRL's own `trl.rewards` factories configured as a user would.
"""
import asyncio
import re

from trl.rewards import get_soft_overlong_punishment


def token_length(completion_ids, **kwargs):  # Example 1
  """Reward function that assigns higher scores to longer completions (in terms of token count)."""
  return [float(len(ids)) for ids in completion_ids]


def char_length(completions, **kwargs):  # Example 1.1
  """Reward function that assigns higher scores to longer completions (in terms of character count)."""
  return [float(len(completion)) for completion in completions]


def format_reward_func(completions, **kwargs):  # Example 2 (conversational)
  """Reward function that checks if the completion has a specific format."""
  pattern = r"^<think>.*?</think><answer>.*?</answer>$"
  completion_contents = [completion[0]["content"] for completion in completions]
  matches = [re.match(pattern, content) for content in completion_contents]
  return [1.0 if match else 0.0 for match in matches]


def boxed_equals_ground_truth(completions, ground_truth, **kwargs):  # Example 3 (standard)
  # Regular expression to capture content inside \boxed{}
  matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
  contents = [match.group(1) if match else "" for match in matches]
  # Reward 1 if the content is the same as the ground truth, 0 otherwise
  return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def math_reward_func(prompts, completions, task, **kwargs):  # Example 4 (multi-task)
  rewards = []
  for prompt, completion, t in zip(prompts, completions, task):
    if t == "math":
      rewards.append(1.0 if "4" in completion else -1.0)  # TRL's check_math_solution, stubbed
    else:
      rewards.append(None)  # Return None for non-math tasks
  return rewards


async def async_reward_func(prompts, completions, **kwargs):  # Example 5
  # Simulate an I/O-bound call (e.g., HTTP request, database lookup)
  await asyncio.sleep(0.01)
  # Simple toy reward: 1.0 if the completion is non-empty, else 0.0
  return [1.0 if completion else 0.0 for completion in completions]


def logging_reward_func(completions, ground_truth, log_extra=None, log_metric=None,
                        **kwargs):  # Example 6
  extracted = [re.search(r"\\boxed\{(.*?)\}", c) for c in completions]
  extracted = [m.group(1) if m else None for m in extracted]
  rewards = [1.0 if e == gt else 0.0 for e, gt in zip(extracted, ground_truth)]

  if log_extra:
    log_extra("golden_answer", list(ground_truth))
    log_extra("extracted_answer", [e or "[none]" for e in extracted])

  if log_metric:
    log_metric("accuracy", sum(rewards) / len(rewards))

  return rewards


# DAPO's soft overlong punishment as TRL ships it: 0 up to 4 tokens, then down to -1 at 8.
soft_overlong = get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=4)
