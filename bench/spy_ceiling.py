"""The spy game's information ceiling: what scripted detectors find in real games.

  python bench/spy_ceiling.py                                   # spy_summ.py:cpu, 32 games
  python bench/spy_ceiling.py --config configs/spy_summ.py:cpu,reports --games 64
  python bench/spy_ceiling.py --workdir /tmp/spy_cpu            # that run's latest weights
  python bench/spy_ceiling.py --set spy.mask_fraction=0.4        # any config key
  python bench/spy_ceiling.py --config configs/spy_summ.py:smoke --games 2   # seconds (tests)

Plays `--games` games of the config over its held-out documents with the
config's model (or a run's latest checkpoint) and sampling, exactly as the
trainer's held-out evaluation does (`SpyGame.evaluate`), and prints, with
standard errors: the model's own detectors' accuracy, each scripted detector's
(`rlsvr.envs.spy.scripted`), the best per game, chance, the spy's and the
civilians' recall of the document's content words, and the same recall with
the plain task prompt. `--json` writes the numbers too.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_config  # noqa: E402


def evaluate(c, games: int, workdir: str | None) -> dict[str, float]:
  import itertools  # noqa: PLC0415

  from rlsvr import checkpoint, runtime, seeding  # noqa: PLC0415
  from rlsvr.envs import registry  # noqa: PLC0415
  from rlsvr.model import sources  # noqa: PLC0415
  from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
  from rlsvr.rl.train_step import cast_params, init_train_state, sampling_params  # noqa: PLC0415
  from rlsvr.sampling import Sampler  # noqa: PLC0415
  from rlsvr.train import grpo_config  # noqa: PLC0415

  runtime.enable_compilation_cache()
  c.heldout.size = games  # Before the build: it sets the held-out documents aside.
  model_config, params, tokenizer = sources.load_model(
      c.model.source, dtype=c.model.param_dtype, seed=c.seed, tokenizer=c.model.tokenizer)
  gcfg = grpo_config(c)
  state = init_train_state(model_config, gcfg, params)
  exp = registry.get(c.env).build(registry.BuildContext(
      c, tokenizer, model_config, cast_params(params, gcfg.dtype), None))
  if workdir:
    ckpt = checkpoint.Checkpointer(workdir, keep=c.checkpoint.keep)
    if ckpt.latest_step() is None:
      raise SystemExit(f"no checkpoint in {workdir}")
    state, _, _ = ckpt.restore(state)
    ckpt.close()
    print(f"weights of step {int(state.step)} in {workdir}", flush=True)
  sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer), tokenizer=tokenizer,
                    max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens)
  policy_params = sampling_params(state)
  calls = itertools.count()

  def sample(prompts, **kw):  # The held-out evaluation's keys: the same games as a run's.
    return sampler(policy_params, prompts, seed=seeding.derive(c.seed, "heldout", next(calls)),
                   **kw)

  return exp.evaluate(sample, policy_params)


def report(result: dict[str, float]) -> str:
  cell = lambda k: (f"{result[k]:.3f} ± {result[k + '/se']:.3f}" if k + "/se" in result
                    else f"{result[k]:.3f}")
  rows = [("model's detectors", "detect_acc")]
  rows += [(f"scripted: {k.split('/', 1)[1]}", k) for k in result
           if k.startswith("ceiling/") and not k.endswith("/se")]
  rows += [("chance", "chance_detect_acc"), ("recall of the document, spy", "recall/spy"),
           ("recall of the document, civilians", "recall/civilian"),
           ("recall, plain task prompt", "plain_recall")]
  width = max(len(name) for name, _ in rows)
  return "\n".join(f"{name.ljust(width)}  {cell(k)}" for name, k in rows if k in result)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="configs/spy_summ.py:cpu")
  parser.add_argument("--games", type=int, default=32)
  parser.add_argument("--workdir", default=None, help="evaluate this run's latest checkpoint")
  parser.add_argument("--set", action="append", default=[], help="config key=value")
  parser.add_argument("--json", default=None, help="also write the numbers here")
  args = parser.parse_args()
  c = load_config(args.config, args.set)
  if c.env != "spy":
    raise SystemExit(f"{args.config} is not a spy-game config (env={c.env!r})")
  t0 = time.time()
  result = evaluate(c, args.games, args.workdir)
  print(f"{args.config} {' '.join(args.set)}: {args.games} games in {time.time() - t0:.0f} s")
  print(report(result))
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"config": args.config, "set": args.set, "games": args.games,
                 "workdir": args.workdir, **result},
                f, indent=1)


if __name__ == "__main__":
  main()
