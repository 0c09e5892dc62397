"""The main job: environment plays -> advantages -> GRPO update, with outputs and resume.

  python -m rlsvr.train --config=configs/spy_summ.py:cpu [--config.steps=20] [--workdir=DIR]

Each step: the environment plays whole games with the sampler on the current
weights (host logic between batched sampler calls), returns trajectories and
rewards; GRPO advantages and one jitted `train_step` update the weights. The
workdir receives metrics.jsonl, TensorBoard events, rollouts.txt and per-step
rollout JSONL, orbax checkpoints (resumed automatically), and curves.png; with
`heldout.size > 0`, heldout.jsonl and a before/after table (`rlsvr.heldout`).
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
  if problems:
    raise ValueError("bad config: " + "; ".join(problems))
  registry.import_plugins(c)  # First: they may register the names the checks look up.
  registry.get(c.env).check(c)
  grpo_config(c)


def grpo_config(c):
  from rlsvr.rl.config import GRPOConfig  # noqa: PLC0415

  # The update scores tokens under the distribution they were sampled from.
  temperature = c.sampling.temperature if c.sampling.temperature > 0 else 1.0
  try:
    return GRPOConfig(**c.grpo, temperature=temperature, param_dtype=c.model.param_dtype,
                      compute_dtype=c.model.compute_dtype)
  except (TypeError, ValueError) as e:
    raise ValueError(f"bad config (grpo.*): {e}") from None


def train(c, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the experiment `c` in `workdir`; returns the last metrics."""
  check_config(c)
  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr import checkpoint, heldout, metrics, parallel, plan, runtime, seeding  # noqa: PLC0415
  from rlsvr.envs import registry  # noqa: PLC0415
  from rlsvr.model import sources  # noqa: PLC0415
  from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
  from rlsvr.rl import batch as batching, filtering  # noqa: PLC0415
  from rlsvr.rl.train_step import (cast_params, init_train_state, sampling_params,  # noqa: PLC0415
                                   train_step)
  from rlsvr.sampling import Sampler  # noqa: PLC0415

  parallel.initialize_distributed(**c.distributed)
  lead = parallel.is_lead_process()  # Process 0 alone writes logs, rollouts and plots.
  log = functools.partial(print, flush=True) if lead else lambda *a, **k: None
  # A rerun, a resume or another config of the same shapes reads its programs from here.
  cache_dir = runtime.enable_compilation_cache()
  if cache_dir:
    log(f"compilation cache: {cache_dir}")
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
      c.model.source, dtype=c.model.param_dtype, mesh=mesh if mesh.size > 1 else None,
      seed=c.seed, tokenizer=c.model.tokenizer)
  gcfg = grpo_config(c)
  state = init_train_state(model_config, gcfg, params)
  # The state holds its own copy of the masters; an environment may keep the initial
  # weights in the compute dtype (e.g. a fixed judge): a copy, as the masters are donated.
  env_spec = registry.get(c.env)
  exp = env_spec.build(registry.BuildContext(c, tokenizer, model_config,
                                             cast_params(params, gcfg.dtype), mesh))
  del params
  evaluate = getattr(exp, "evaluate", None)
  if c.heldout.size > 0 and evaluate is None:
    raise ValueError(f"heldout.size={c.heldout.size}, but env {c.env!r} has no evaluate()")

  ckpt = checkpoint.Checkpointer(workdir, keep=c.checkpoint.keep)
  start = 0
  if ckpt.latest_step() is not None:
    state, exp_state, saved_meta = ckpt.restore(state)
    start = int(state.step)
    changes = checkpoint.changed_keys(saved_meta.get("config", "{}"), c.to_json_best_effort())
    if changes and not c.resume_with_changes:
      raise ValueError(f"{workdir} holds a run with a different config; refusing to append to "
                       "it (use another --workdir, or --config.resume_with_changes=True to "
                       "continue deliberately):\n  " + "\n  ".join(changes))
    if changes:
      log("resuming with changed config keys:\n  " + "\n  ".join(changes))
    # The stream position is part of the state: resume continues with the same items.
    exp.load_state_dict(exp_state, start)
    # A fresh experiment's extra models at `start` are the templates of the saved ones.
    exp.load_model_state(ckpt.restore_models(start, exp.model_state(start)))
    log(f"resumed from step {start} in {ckpt.directory}")
  if lead:  # What a killed run logged after its last checkpoint is played again: drop it.
    metrics.rewind(workdir, start)

  sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer), tokenizer=tokenizer,
                    max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens)
  writer = metrics.MetricsWriter(workdir, c.steps, console=env_spec.console,
                                 tensorboard=c.log.tensorboard,
                                 wandb_project=c.log.wandb_project, run_config=c.to_dict(),
                                 enabled=lead)
  rollouts = metrics.RolloutWriter(workdir, enabled=lead)
  meta = {"model_config": model_config.to_hf_dict(c.model.compute_dtype),
          "param_dtype": c.model.param_dtype, "compute_dtype": c.model.compute_dtype,
          "config": c.to_json_best_effort()}
  n_data = mesh.shape["data"] * mesh.shape["fsdp"]
  mb = c.grpo.micro_batch_size
  # Every update's rows split into whole micro-batches, every micro-batch over the data shards.
  rows_multiple = int(np.lcm(gcfg.updates_per_batch * (mb or 1), n_data))
  last: dict[str, Any] = {}

  def evaluate_heldout(step: int) -> None:
    policy_params = sampling_params(state)
    calls = itertools.count()

    def sample(prompts, **kw):  # Keys by call only: every evaluation draws the same numbers.
      return sampler(policy_params, prompts, seed=seeding.derive(c.seed, "heldout", next(calls)),
                     **kw)

    t0 = time.time()
    result = evaluate(sample, policy_params)
    sampler.release_weights()
    log(f"held-out evaluation at step {step}: {c.heldout.size} episodes in "
        f"{time.time() - t0:.0f} s")
    if lead:
      heldout.write(workdir, step, result)

  if c.heldout.size > 0 and start == 0:
    evaluate_heldout(0)
  try:
    for step in range(start + 1, c.steps + 1):
      t0 = time.time()
      calls = itertools.count()
      policy_params = sampling_params(state)  # One compute-dtype copy per step.

      def sample(prompts, **kw):
        # A key per (seed, step, call): a resumed run samples what an uninterrupted one would.
        seed = seeding.derive(c.seed, "policy", step, next(calls))
        return sampler(policy_params, prompts, seed=seed, **kw)

      played = filtering.play_step(lambda r: exp.play(step, sample, policy_params, r),
                                   filter_groups=gcfg.filter_groups,
                                   max_rounds=gcfg.max_num_gen_batches)
      # Before the update: with bf16 compute it is a copy of the weights, and the sampler
      # keeps its own copy, laid out for decoding, for the step's later calls.
      del policy_params
      sampler.release_weights()
      t_play = time.time() - t0
      batch = batching.build_batch(played.rows, gcfg, pad_id=tokenizer.pad_token_id or 0,
                                   batch_multiple=rows_multiple,
                                   share_prompts=gcfg.share_prompts and n_data == 1)
      state, step_metrics = train_step(state, parallel.put_batch(batch, mesh))
      step_metrics = jax.device_get(step_metrics)
      dt = time.time() - t0
      tokens = sum(len(t.completion_ids) for t in played.played)
      record = played.record()
      last = {**record.labels, **record.metrics, **played.metrics,
              **batching.rollout_metrics(played.played),
              **{k: float(v) for k, v in step_metrics.items()},
              "perf/step_s": dt, "perf/play_s": t_play, "perf/tokens_per_s": tokens / t_play}
      writer.write(step, last)
      rollouts.write(step, record)
      if step % c.checkpoint.every == 0 or step == c.steps:
        ckpt.save(step, state, exp.state_dict(), meta, models=exp.model_state(step))
    if c.heldout.size > 0 and not any(r["step"] == c.steps for r in heldout.read(workdir)):
      evaluate_heldout(c.steps)
  finally:  # Finish pending checkpoint writes and flush logs even when a step fails.
    ckpt.close()
    writer.close()
  if c.heldout.size > 0 and lead:
    log(heldout.table(heldout.read(workdir)))
  plot = metrics.plot_curves(workdir, panels=env_spec.plots) if lead else None
  log(f"done: {c.steps} steps in {workdir}" + (f"; curves in {plot}" if plot else ""))
  return last


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
