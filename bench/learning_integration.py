"""A short learning run whose reward is the integration verifier: does GRPO learn from it?

  python bench/learning_integration.py               # ~3 minutes on 2 CPU cores
  python bench/learning_integration.py --steps 60 --seeds 0,1
  python bench/learning_integration.py --advantage rloo
  python bench/learning_integration.py --policy-loss gspo --loss-type grpo \
      --clip-low 3e-4 --clip-high 4e-4 --updates-per-batch 2

The reward of RLSR's kept-aside verifier, used here as the training reward so
that the whole path is exercised: `integration.check_answers` (safe parse,
central-difference derivative, definite values by tanh-sinh or float64
panels) scores each answer as 1[correct] + 0.1 * 1[parses], as
`SelfJudgeEnv` does with the judge's verdict. A tiny random Qwen3 reads one
token naming a problem and answers with one token naming a candidate answer
(32 candidates: right ones, wrong ones, unparseable ones, an injection). Four
problems are indefinite, four definite, three of those need the panels
(2025 oscillations, 2000 jumps, H003). Each step samples 8 problems x 8
answers with the real sampler, builds the GRPO batch and makes one
`train_step`, exactly as the trainer does. Chance: reward ~0.11, correct ~0.04.
The flags after --seeds select the update's registered policy loss, TRL loss
type, advantage estimator, clip range and updates per batch (GRPOConfig's names).
Prints the mean reward and accuracy per step, and the first and last five
steps' means.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np
import sympy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlsvr import workers  # noqa: E402
from rlsvr.envs.self_judge import integration  # noqa: E402
from rlsvr.model.config import ModelConfig  # noqa: E402
from rlsvr.rl.batch import build_batch  # noqa: E402
from rlsvr.rl.rollout import Trajectory  # noqa: E402
from rlsvr.rl.train_step import GRPOConfig, init_train_state, sampling_params, train_step  # noqa: E402
from rlsvr.sampling import Sampler  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from learning_precision import init_params  # noqa: E402  (the same tiny random Qwen3)

CONFIG = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)
CANDIDATES = ["x**2", "x**2 + 7", "2*x", "x**3/3", "sin(x)", "-cos(x)", "cos(x)", "0", "1", "-pi",
              "6*pi", "pi", "x**2/2", "exp(x)", "log(x)", "x", "(", "x**", "sin(",
              "__import__('os')", "1e-3", "2022*pi", "-1", "x*sin(x)", "sqrt(x)", "tan(x)",
              "x**4/4", "sin(x) + 3", "", "+", "pi/2", "x**3"]
x = sympy.Symbol("x", real=True)
sin, cos, pi = sympy.sin, sympy.cos, sympy.pi
PROBLEMS = [(2 * x, None), (cos(x), None), (x**2, None), (sympy.exp(x), None),
            (sin(sin(x) + 2025 * x), (0, 2 * pi)),
            (sympy.floor(500 * sin(x)), (0, 2 * pi)),
            (cos(2022 * x) * sin(10050 * x) / sin(50 * x) * sin(10251 * x) / sin(51 * x),
             (0, 2 * pi)),
            ((2 * cos(x) - cos(2021 * x) - 2 * cos(2022 * x) - cos(2023 * x) + 2)
             / (1 - cos(2 * x)), (0, pi))]
GROUP = 8


def run(cfg: GRPOConfig, steps: int, seed: int, pool: workers.WorkerPool) -> tuple[list, list]:
  problems = [integration.Problem(f, x, b and tuple(map(sympy.sympify, b))) for f, b in PROBLEMS]
  state = init_train_state(CONFIG, cfg, jax.tree.map(jax.numpy.asarray, init_params(seed)))
  sampler = Sampler(CONFIG, seed=seed)
  rewards, accuracy = [], []
  for _ in range(steps):
    rows = [[1 + i] for i in range(len(problems)) for _ in range(GROUP)]
    completions = sampler(sampling_params(state), rows, max_new_tokens=1)
    answers = [CANDIDATES[c.ids[0]] for c in completions]
    verdicts = integration.check_answers([problems[r[0] - 1] for r in rows], answers, pool=pool)
    trajectories = [
        Trajectory(p, list(c.ids), list(c.logprobs), float(v.correct) + 0.1 * float(v.format_ok),
                   group_id=i // GROUP, role="policy", finish_reason=c.finish_reason)
        for i, (p, c, v) in enumerate(zip(rows, completions, verdicts))]
    rewards.append(float(np.mean([t.reward for t in trajectories])))
    accuracy.append(float(np.mean([v.correct for v in verdicts])))
    print(f"    step {len(rewards):>3}  reward {rewards[-1]:.3f}  correct {accuracy[-1]:.3f}",
          flush=True)
    state, _ = train_step(state, build_batch(trajectories, cfg, min_bucket=8))
  return rewards, accuracy


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--lr", type=float, default=1e-3)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--policy-loss", default="vanilla")
  parser.add_argument("--loss-type", default="")
  parser.add_argument("--advantage", default="grpo")
  parser.add_argument("--clip-low", type=float, default=0.2)
  parser.add_argument("--clip-high", type=float, default=0.2)
  parser.add_argument("--updates-per-batch", type=int, default=1)
  args = parser.parse_args()
  cfg = GRPOConfig(lr=args.lr, weight_decay=0.0, policy_loss=args.policy_loss,
                   loss_type=args.loss_type, advantage=args.advantage, clip_low=args.clip_low,
                   clip_high=args.clip_high, updates_per_batch=args.updates_per_batch)
  pool = workers.WorkerPool(num_workers=2, preload=("rlsvr.envs.self_judge.integration",))
  for seed in (int(s) for s in args.seeds.split(",")):
    print(f"seed {seed}: lr {args.lr:g}, {args.steps} steps, {len(PROBLEMS)} problems x {GROUP}, "
          f"policy loss {cfg.policy_loss}, aggregation {cfg.loss_agg_mode}, advantage "
          f"{cfg.advantage}, {cfg.updates_per_batch} update(s) per batch")
    rewards, accuracy = (np.array(c) for c in run(cfg, args.steps, seed, pool))
    print(f"  reward  first 5 steps {rewards[:5].mean():.3f}  last 5 steps {rewards[-5:].mean():.3f}")
    print(f"  correct first 5 steps {accuracy[:5].mean():.3f}  last 5 steps "
          f"{accuracy[-5:].mean():.3f}", flush=True)
  pool.close()


if __name__ == "__main__":
  main()
