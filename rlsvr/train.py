"""The main job: environment plays -> advantages -> GRPO update, with outputs and resume.

  python -m rlsvr.train --config=configs/spy_summ.py:cpu [--config.steps=20] [--workdir=DIR]

Each step: the environment plays whole games with the sampler on the current
weights (host logic between batched sampler calls), returns trajectories and
rewards; GRPO advantages and one jitted `train_step` update the weights. The
workdir receives metrics.jsonl, TensorBoard events, rollouts.txt and per-step
rollout JSONL, orbax checkpoints (resumed automatically), and curves.png.
"""
from __future__ import annotations

import functools
import itertools
import os
import time
from typing import Any

from absl import app, flags, logging
from ml_collections import config_flags

config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Output folder (default: config.workdir or runs/<name>).")
FLAGS = flags.FLAGS

_DTYPES = ("float32", "bfloat16")


def check_config(c) -> None:
  """Fails on impossible settings before anything heavy is loaded, naming the key."""
  from rlsvr import experiment  # noqa: PLC0415

  problems = []
  if c.model.dtype not in _DTYPES:
    problems.append(f"model.dtype={c.model.dtype!r} is not one of {_DTYPES}")
  if c.steps < 1:
    problems.append(f"steps={c.steps} must be >= 1")
  if c.checkpoint.every < 1:
    problems.append(f"checkpoint.every={c.checkpoint.every} must be >= 1")
  if problems:
    raise ValueError("bad config: " + "; ".join(problems))
  experiment.check(c)
  grpo_config(c)


def grpo_config(c):
  from rlsvr.rl.train_step import GRPOConfig  # noqa: PLC0415

  # The update scores tokens under the distribution they were sampled from.
  temperature = c.sampling.temperature if c.sampling.temperature > 0 else 1.0
  try:
    return GRPOConfig(**c.grpo, temperature=temperature, param_dtype=c.model.dtype)
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (grpo.*): {e}") from None


def train(c, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the experiment `c` in `workdir`; returns the last metrics."""
  check_config(c)
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr import checkpoint, experiment, metrics, parallel, plan  # noqa: PLC0415
  from rlsvr.model import sources  # noqa: PLC0415
  from rlsvr.rl import batch as batching  # noqa: PLC0415
  from rlsvr.rl.train_step import init_train_state, train_step  # noqa: PLC0415
  from rlsvr.sampling import Sampler  # noqa: PLC0415

  parallel.initialize_distributed(**c.distributed)
  lead = parallel.is_lead_process()  # Process 0 alone writes logs, rollouts and plots.
  log = functools.partial(print, flush=True) if lead else lambda *a, **k: None
  if c.check_memory:  # Before anything is allocated: an infeasible config fails in seconds.
    memory = plan.check_fits(c)
    if memory.fits is not None:
      log(f"memory plan: peak {memory.total_bytes / 2**30:.1f} GiB of "
          f"{memory.device_memory_bytes / 2**30:.1f} GiB per device ({memory.peak_phase})")
  os.makedirs(workdir, exist_ok=True)
  if lead:
    with open(os.path.join(workdir, "config.txt"), "w") as f:
      f.write(str(c))
  mesh = parallel.make_mesh(dict(c.mesh.shape))
  model_config, params, tokenizer = sources.load_model(
      c.model.source, dtype=c.model.dtype, mesh=mesh if mesh.size > 1 else None, seed=c.seed,
      tokenizer=c.model.tokenizer)
  exp = experiment.build(c, tokenizer, model_config, params, mesh)
  state = init_train_state(model_config, grpo_config(c), params, seed=c.seed)
  del params  # The state holds its own copy (and the judge, if any, keeps the original).

  ckpt = checkpoint.Checkpointer(workdir, keep=c.checkpoint.keep)
  start = 0
  if ckpt.latest_step() is not None:
    state, env_state, _ = ckpt.restore(state)
    exp.env.load_state_dict(env_state)
    start = int(state.step)
    exp.load_judge_state(ckpt.restore_judge(start, state.params))
    exp.items.skip(start)  # Items depend only on (seed, step): resume continues the stream.
    log(f"resumed from step {start} in {ckpt.directory}")

  eos = {tokenizer.eos_token_id}
  if isinstance(model_config.eos_token_id, int):
    eos.add(model_config.eos_token_id)
  sampler = Sampler(model_config, eos_ids=sorted(e for e in eos if e is not None),
                    tokenizer=tokenizer, max_rows=c.sampling.max_rows,
                    max_cache_tokens=c.sampling.max_cache_tokens)
  writer = metrics.MetricsWriter(workdir, c.steps, tensorboard=c.log.tensorboard,
                                 wandb_project=c.log.wandb_project, run_config=c.to_dict(),
                                 enabled=lead)
  rollouts = metrics.RolloutWriter(workdir, enabled=lead)
  meta = {"model_config": model_config.to_hf_dict(c.model.dtype), "param_dtype": c.model.dtype,
          "config": c.to_json_best_effort()}
  n_data = mesh.shape["data"] * mesh.shape["fsdp"]
  last: dict[str, Any] = {}
  try:
    for step in range(start + 1, c.steps + 1):
      t0 = time.time()
      calls = itertools.count()

      def sample(prompts, **kw):
        # A key per (seed, step, call): a resumed run samples what an uninterrupted one would.
        seed = (c.seed * 1_000_003 + step) * 64 + next(calls)
        return sampler(state.params, prompts, seed=seed, **kw)

      played = exp.play(step, sample, state)
      t_play = time.time() - t0
      mb = c.grpo.micro_batch_size
      batch = batching.build_batch(played.trajectories, norm_adv_by_std=c.grpo.norm_adv_by_std,
                                   pad_id=tokenizer.pad_token_id or 0,
                                   batch_multiple=int(np.lcm(mb, n_data)) if mb else n_data)
      state, step_metrics = train_step(state, parallel.put_batch(batch, mesh))
      step_metrics = jax.device_get(step_metrics)
      dt = time.time() - t0
      tokens = sum(len(t.completion_ids) for t in played.trajectories)
      phase = {1.0: "decision", 0.0: "clue"}.get(played.metrics.get("spy/phase_decision"))
      last = {**({"phase": phase} if phase else {}), **played.metrics,
              **batching.rollout_metrics(played.trajectories),
              **{k: float(v) for k, v in step_metrics.items()},
              "perf/step_s": dt, "perf/play_s": t_play, "perf/tokens_per_s": tokens / t_play}
      writer.write(step, last)
      rollouts.write(step, played)
      if step % c.checkpoint.every == 0 or step == c.steps:
        ckpt.save(step, state, exp.env.state_dict(), meta, judge_params=exp.judge_state(step))
  finally:  # Finish pending checkpoint writes and flush logs even when a step fails.
    ckpt.close()
    writer.close()
  plot = metrics.plot_curves(workdir) if lead else None
  log(f"done: {c.steps} steps in {workdir}" + (f"; curves in {plot}" if plot else ""))
  return last


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
  c = FLAGS.config
  name = os.path.splitext(os.path.basename(FLAGS["config"].config_filename))[0]
  workdir = FLAGS.workdir or c.workdir or os.path.join("runs", name)
  train(c, workdir)


if __name__ == "__main__":
  app.run(main)
