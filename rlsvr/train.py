"""The main job: environment plays -> advantages -> GRPO update, with outputs and resume.

  python -m rlsvr.train --config=configs/spy_summ.py:cpu [--config.steps=20] [--workdir=DIR]

Each step: the environment plays whole games with the sampler on the current
weights (host logic between batched sampler calls), returns trajectories and
rewards; GRPO advantages and one jitted `train_step` update the weights. The
workdir receives metrics.jsonl, TensorBoard events, rollouts.txt and per-step
rollout JSONL, orbax checkpoints (resumed automatically), and curves.png; with
`heldout.size > 0`, heldout.jsonl and a before/after table (`rlsvr.heldout`).

The loop itself is `rlsvr.train_loop`; this module holds the command line and the
config checks, which run before JAX and the model are imported.

On Linux the process first restarts itself with malloc on 2 MiB pages (faster XLA:CPU
steps; `rlsvr.runtime.exec_with_huge_pages`); RLSVR_HUGE_PAGES=0 turns that off, and a
debugger (`python -m pdb -m rlsvr.train ...`) keeps the process as it started. Child
processes get the environment the command was started with.
"""
from __future__ import annotations

import os
from typing import Any

from absl import app, flags, logging
from ml_collections import config_flags

config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Output folder (default: config.workdir or runs/<name>).")
FLAGS = flags.FLAGS


def check_config(c) -> None:
  """Fails on impossible settings before anything heavy is loaded, naming the key."""
  from rlsvr.envs import registry  # noqa: PLC0415
  from rlsvr.rl.config import DTYPES  # noqa: PLC0415

  problems = []
  for key in ("param_dtype", "compute_dtype"):
    if c.model[key] not in DTYPES:
      problems.append(f"model.{key}={c.model[key]!r} is not one of {DTYPES}")
  if c.steps < 1:
    problems.append(f"steps={c.steps} must be >= 1")
  if c.checkpoint.every < 1:
    problems.append(f"checkpoint.every={c.checkpoint.every} must be >= 1")
  if c.heldout.size < 0 or c.heldout.per_call < 0:
    problems.append(f"heldout.size={c.heldout.size} and heldout.per_call={c.heldout.per_call} "
                    "must be >= 0")
  if "lora" in c.model:
    from rlsvr.model import lora  # noqa: PLC0415 (jax, not the model)

    try:
      lora.from_config(c.model.lora)
    except ValueError as e:
      problems.append(f"model.lora: {e}")
  if problems:
    raise ValueError("bad config: " + "; ".join(problems))
  registry.import_plugins(c)  # First: they may register the names the checks look up.
  registry.get(c.env).check(c)
  grpo_config(c)
  if c.grpo.overlong_buffer > 0:  # DAPO's shaping penalises lengths past limit - buffer.
    for name, limit in completion_limits(c).items():
      if c.grpo.overlong_buffer >= limit:
        raise ValueError(f"bad config: grpo.overlong_buffer={c.grpo.overlong_buffer} must be "
                         f"below the completion limit of phase {name!r} ({limit} tokens), "
                         "or every completion is penalised")


def completion_limits(c) -> dict[str, int]:
  """The completion-token limit of each phase the environment trains (its `plan`)."""
  from rlsvr.envs import registry  # noqa: PLC0415
  from rlsvr.plan_costs import Estimates  # noqa: PLC0415

  return {p.name: p.completion_tokens for p in registry.get(c.env).plan(c, Estimates()).phases}


def grpo_config(c):
  from rlsvr.rl import losses  # noqa: PLC0415
  from rlsvr.rl.config import GRPOConfig  # noqa: PLC0415

  grpo = dict(c.grpo)
  mode = losses.LOSS_TYPES.get(grpo.get("loss_type") or "", grpo.get("agg_mode"))
  if mode == "seq-mean-token-sum-norm" and not grpo.get("loss_scale_factor"):
    # The longest completion the environment allows, as verl's fixed padding divides by.
    grpo["loss_scale_factor"] = float(max(completion_limits(c).values()))
  if grpo.get("lr_schedule", "constant") != "constant" and not grpo.get("decay_steps"):
    # The run's updates; a run shorter than its warmup (a smoke test) ends inside the warmup.
    grpo["decay_steps"] = max(c.steps * grpo.get("updates_per_batch", 1),
                              grpo.get("warmup_steps", 0) + 1)
  # The update scores tokens under the distribution they were sampled from.
  temperature = c.sampling.temperature if c.sampling.temperature > 0 else 1.0
  try:
    return GRPOConfig(**grpo, temperature=temperature, param_dtype=c.model.param_dtype,
                      compute_dtype=c.model.compute_dtype)
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (grpo.*): {e}") from None


def train(c, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the experiment `c` in `workdir`; returns the last metrics."""
  check_config(c)
  from rlsvr import train_loop  # noqa: PLC0415  (JAX and the model: after the checks)

  return train_loop.run(c, grpo_config(c), workdir)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from rlsvr import runtime  # noqa: PLC0415

  runtime.exec_with_huge_pages()  # A restart, so before anything else.
  logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
  c = FLAGS.config
  # Before JAX starts: one CPU device per core, which large sampler calls split over
  # (`rlsvr.parallel.host_split_mesh`); the update keeps the config's mesh.
  runtime.set_host_devices()
  name = os.path.splitext(os.path.basename(FLAGS["config"].config_filename))[0]
  workdir = FLAGS.workdir or c.workdir or os.path.join("runs", name)
  train(c, workdir)


if __name__ == "__main__":
  app.run(main)
