"""A learning run through the whole trainer: `python -m rlsvr.train`'s loop, the
environment registry and the `reward_fn` environment, with a TRL-style reward.

  python bench/learning_reward_fn.py            # ~2 minutes on 2 CPU cores
  python bench/learning_reward_fn.py --seed 1 --lr 1e-3 --steps 40
  python bench/learning_reward_fn.py --reward trl_char_length   # TRL's documented example
  python bench/learning_reward_fn.py --reward even_tokens_or_none  # ~half the rows unscorable
  python bench/learning_reward_fn.py --set grpo.updates_per_batch=2   # any config key

The config is `configs/rlvr_math.py:smoke` (a tiny random Qwen3, the generated
word problems of `bundled:arithmetic`) with one reward function, `even_tokens` below: the share
of a completion's token ids that are even. It is dense, so a policy that
learns shows it within tens of steps; chance is ~0.5 and the maximum 1.
Sampling at temperature 0.15 concentrates the random model on a few tokens per
context, among which it can learn to prefer even ones; lr 1e-2 because the
random weights are far from any such preference (at 1e-3 the curve stays flat
for 40 steps). The temperature goes with the smoke model's width: at 16 wide its
logits spread half as far as at 64, so 0.3 left it near uniform over 151936 tokens
and flat for 30 steps (0.507 -> 0.511); 0.15 rises 0.491 -> 0.827 (first and last
five of 30 steps, seed 0), as 0.3 did at 64 wide (0.506 -> 1.000).
`--reward trl_char_length` trains on TRL's documented "reward longer completions
(in characters)" function unchanged (tests/rewards/trl_examples.py): it reads
`len(completion)`, so it learns only when a string prompt gives string
completions, as in TRL; given chat messages it sees length 1 everywhere.
Everything else is the trainer's own path: sampling, reward function calls
(TRL's convention), advantages, `train_step`, metrics.jsonl. Prints
the function's `rewards/<name>/mean` per step and the means of the first and last
five steps.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import set_key  # noqa: E402


def even_tokens(completions, completion_ids, **kwargs):
  """Share of even token ids: a dense reward any policy can learn."""
  return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def even_tokens_or_none(prompts, completion_ids, **kwargs):
  """`even_tokens` for prompts of even length, None (unscorable) for the others: the
  unscorable rows train with advantage 0 (`reward_fn.unscorable`)."""
  scores = even_tokens(None, completion_ids)
  return [None if len(p) % 2 else s for p, s in zip(prompts, scores)]


REWARDS = {"even_tokens": "bench.learning_reward_fn:even_tokens",
           "even_tokens_or_none": "bench.learning_reward_fn:even_tokens_or_none",
           "trl_char_length": "tests.rewards.trl_examples:char_length"}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--lr", type=float, default=1e-2)
  parser.add_argument("--temperature", type=float, default=0.15)
  parser.add_argument("--reward", choices=sorted(REWARDS), default="even_tokens")
  parser.add_argument("--set", action="append", default=[], help="config key=value")
  args = parser.parse_args()

  from configs.rlvr_math import get_config
  from rlsvr import metrics, train

  c = get_config("smoke")
  c.seed, c.steps, c.grpo.lr, c.grpo.kl_coef = args.seed, args.steps, args.lr, 0.0
  c.sampling.temperature = args.temperature
  c.reward_fn.reward_funcs = REWARDS[args.reward]
  c.reward_fn.reward_weights = ""
  c.reward_fn.prompts_per_step, c.reward_fn.group_size = 4, 8
  c.reward_fn.max_new_tokens = 16
  c.checkpoint.every = args.steps
  c.log.tensorboard = False
  for assignment in args.set:
    set_key(c, assignment)
  with tempfile.TemporaryDirectory() as workdir:
    train.train(c, workdir)
    records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  # The function's own mean: over the rows it scored (an unscorable row counts as 0 in
  # reward/mean).
  key = f"rewards/{REWARDS[args.reward].rpartition(':')[2]}/mean"
  rewards = [r[key] for r in records]
  unscorable = [r["rewards/unscorable"] for r in records]
  print(f"unscorable rows per step: {sum(unscorable) / len(unscorable):.1f} of "
        f"{c.reward_fn.prompts_per_step * c.reward_fn.group_size}")
  print(f"{key} per step:", " ".join(f"{r:.3f}" for r in rewards))
  print(f"first 5 steps {sum(rewards[:5]) / 5:.3f} -> last 5 steps {sum(rewards[-5:]) / 5:.3f}")


if __name__ == "__main__":
  main()
