"""The main job's loop behind `rlsvr.train.train`: set up, restore or start, then steps.

  run(c, grpo, workdir) -> last metrics

A module of its own so that `python -m rlsvr.train` can restart itself on huge pages
and check its config before JAX, the model and the environments are imported.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rlsvr import checkpoint, heldout, metrics, parallel, plan, runtime, seeding
from rlsvr.envs import registry
from rlsvr.model import lora as lora_lib
from rlsvr.model import sources
from rlsvr.model.tokenizer import stop_ids
from rlsvr.rl import batch as batching
from rlsvr.rl import filtering
from rlsvr.rl.config import GRPOConfig
from rlsvr.rl.train_step import (TrainState, cast_params, init_train_state, sampling_params,
                                 train_step)
from rlsvr.sampling import Sampler

Sample = Callable[..., Any]  # sample(prompts, **sampler_kwargs), as environments call it.


@dataclasses.dataclass(frozen=True)
class Setup:
  """What every step reads, set up once."""

  config: Any
  grpo: GRPOConfig
  workdir: str
  lead: bool  # Process 0 alone writes logs, rollouts and plots.
  log: Callable[..., None]  # print on the lead process, nothing elsewhere.
  mesh: jax.sharding.Mesh
  experiment: Any  # registry.Experiment
  sampler: Sampler
  pad_id: int
  # Every update's rows split into whole micro-batches, every micro-batch over the data shards.
  rows_multiple: int
  # The update's batch layout (`rlsvr.rl.batch`): on one batch shard only, since over data
  # shards each row's forward would read other shards' prompts (or buffers).
  share_prompts: bool
  pack_tokens: int


def run(c, grpo: GRPOConfig, workdir: str) -> dict[str, Any]:
  """Runs (or resumes) the checked experiment `c` in `workdir`; returns the last metrics."""
  lead, log = _start(c, workdir)
  mesh = parallel.make_mesh(dict(c.mesh.shape))
  env_spec = registry.get(c.env)
  model_config, state, experiment, tokenizer = _build(c, grpo, env_spec, mesh)
  ckpt = checkpoint.Checkpointer(workdir, keep=c.checkpoint.keep)
  state, start = restore_or_start(c, workdir, ckpt, state, experiment, log)
  if lead:  # What a killed run logged after its last checkpoint is played again: drop it.
    metrics.rewind(workdir, start)

  n_data = mesh.shape["data"] * mesh.shape["fsdp"]
  sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer), tokenizer=tokenizer,
                    max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens)
  setup = Setup(config=c, grpo=grpo, workdir=workdir, lead=lead, log=log, mesh=mesh,
                experiment=experiment, sampler=sampler, pad_id=tokenizer.pad_token_id or 0,
                rows_multiple=int(np.lcm(grpo.updates_per_batch
                                         * (c.grpo.micro_batch_size or 1), n_data)),
                share_prompts=grpo.share_prompts and n_data == 1,
                pack_tokens=grpo.pack_tokens if n_data == 1 else 0)
  writer = metrics.MetricsWriter(workdir, c.steps, console=env_spec.console,
                                 tensorboard=c.log.tensorboard,
                                 wandb_project=c.log.wandb_project, run_config=c.to_dict(),
                                 enabled=lead)
  rollouts = metrics.RolloutWriter(workdir, enabled=lead)
  # With "lora", `checkpoint.restore_run` rebuilds the base from the config's model source.
  meta = {"model_config": model_config.to_hf_dict(c.model.compute_dtype),
          "param_dtype": c.model.param_dtype, "compute_dtype": c.model.compute_dtype,
          "lora": lora_lib.to_dict(state.lora), "config": c.to_json_best_effort()}

  last: dict[str, Any] = {}
  # A run restarted before its first checkpoint keeps its step-0 evaluation (`rewind`
  # keeps steps <= 0): evaluating again would add a second step-0 column.
  evaluated = {h["step"] for h in heldout.read(workdir)} if c.heldout.size > 0 else set()
  if c.heldout.size > 0 and start == 0 and 0 not in evaluated:
    evaluate_heldout(setup, state, 0)
  try:
    for step in range(start + 1, c.steps + 1):
      state, last, record = train_one_step(setup, state, step)
      writer.write(step, last)
      rollouts.write(step, record)
      if step % c.checkpoint.every == 0 or step == c.steps:
        ckpt.save(step, state, experiment.state_dict(), meta,
                  models=experiment.model_state(step))
    if c.heldout.size > 0 and not any(h["step"] == c.steps for h in heldout.read(workdir)):
      evaluate_heldout(setup, state, c.steps)
  finally:  # Finish pending checkpoint writes and flush logs even when a step fails.
    ckpt.close()
    writer.close()
  if c.heldout.size > 0 and lead:
    log(heldout.table(heldout.read(workdir)))
  plot = metrics.plot_curves(workdir, panels=env_spec.plots) if lead else None
  log(f"done: {c.steps} steps in {workdir}" + (f"; curves in {plot}" if plot else ""))
  return last


def _start(c, workdir: str) -> tuple[bool, Callable[..., None]]:
  """Joins the other processes, turns the compilation cache on, checks the memory plan
  and writes config.txt; returns (lead process?, its log)."""
  parallel.initialize_distributed(**c.distributed)
  lead = parallel.is_lead_process()
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
  return lead, log


def _build(c, grpo: GRPOConfig, env_spec: registry.EnvSpec, mesh):
  """(model config, fresh train state, experiment, tokenizer) of step 0."""
  lora = lora_lib.from_config(c.model.get("lora"))
  # A LoRA run's base is frozen in the compute dtype: loaded in it, it is never copied.
  model_config, params, tokenizer = sources.load_model(
      c.model.source, dtype=c.model.compute_dtype if lora else c.model.param_dtype,
      mesh=mesh if mesh.size > 1 else None, seed=c.seed, tokenizer=c.model.tokenizer)
  state = init_train_state(model_config, grpo, params, lora=lora, seed=c.seed)
  # The state holds its own copy of the masters; an environment may keep the initial
  # weights in the compute dtype (e.g. a fixed judge): a copy, as the masters are donated.
  # A LoRA run's frozen base is those weights, and never donated: the environment shares it.
  initial = state.base if lora is not None else cast_params(params, grpo.dtype)
  experiment = env_spec.build(registry.BuildContext(c, tokenizer, model_config, initial, mesh))
  del params
  if c.heldout.size > 0 and getattr(experiment, "evaluate", None) is None:
    raise ValueError(f"heldout.size={c.heldout.size}, but env {c.env!r} has no evaluate()")
  return model_config, state, experiment, tokenizer


def restore_or_start(c, workdir: str, ckpt: checkpoint.Checkpointer, state: TrainState,
                     experiment, log) -> tuple[TrainState, int]:
  """(state, last step done): the latest checkpoint's, loaded into `experiment` too, or
  `state` and 0 when `workdir` has none. Refuses a checkpoint of another config unless
  `resume_with_changes`."""
  if ckpt.latest_step() is None:
    return state, 0
  state, experiment_state, saved_meta = ckpt.restore(state)
  start = int(state.step)
  changes = checkpoint.changed_keys(saved_meta.get("config", "{}"), c.to_json_best_effort())
  if changes and not c.resume_with_changes:
    raise ValueError(f"{workdir} holds a run with a different config; refusing to append to "
                     "it (use another --workdir, or --config.resume_with_changes=True to "
                     "continue deliberately):\n  " + "\n  ".join(changes))
  if changes:
    log("resuming with changed config keys:\n  " + "\n  ".join(changes))
  # The stream position is part of the state: resume continues with the same items.
  experiment.load_state_dict(experiment_state, start)
  # A fresh experiment's extra models at `start` are the templates of the saved ones.
  experiment.load_model_state(ckpt.restore_models(start, experiment.model_state(start)))
  log(f"resumed from step {start} in {ckpt.directory}")
  return state, start


def sampler_closure(sampler: Sampler, policy_params, seed: int, *key_path) -> Sample:
  """`sample(prompts, **kw)` on `policy_params`, its n-th call keyed by
  (seed, *key_path, n): a resumed run samples what an uninterrupted one would."""
  calls = itertools.count()

  def sample(prompts, **kw):
    return sampler(policy_params, prompts, seed=seeding.derive(seed, *key_path, next(calls)),
                   **kw)

  return sample


def release_sampler_weights(setup: Setup) -> None:
  """Drops every sampler's decode layout of its weights (the policy's and any the
  environment keeps, e.g. a judge's): the update, which `rlsvr.plan` sizes without
  them, needs that memory."""
  setup.sampler.release_weights()
  release = getattr(setup.experiment, "release_weights", None)
  if release is not None:
    release()


def train_one_step(setup: Setup, state: TrainState, step: int):
  """Plays the step's episodes and makes one update: (state, metrics, rollout record)."""
  c, grpo = setup.config, setup.grpo
  t0 = time.time()
  policy_params = sampling_params(state)  # One compute-dtype copy per step.
  sample = sampler_closure(setup.sampler, policy_params, c.seed, "policy", step)
  played = filtering.play_step(lambda r: setup.experiment.play_round(step, sample, policy_params, r),
                               filter_groups=grpo.filter_groups,
                               max_rounds=grpo.max_num_gen_batches)
  finish_step = getattr(setup.experiment, "finish_step", None)
  if finish_step is not None:
    finish_step(played.rows)
  # Before the update: with bf16 compute it is a copy of the weights, and the sampler
  # keeps its own copy, laid out for decoding, for the step's later calls.
  del policy_params, sample
  release_sampler_weights(setup)
  play_s = time.time() - t0
  batch = batching.build_batch(played.rows, grpo, pad_id=setup.pad_id,
                               batch_multiple=setup.rows_multiple,
                               share_prompts=setup.share_prompts,
                               pack_tokens=setup.pack_tokens)
  state, step_metrics = train_step(state, parallel.put_batch(batch, setup.mesh))
  step_metrics = jax.device_get(step_metrics)
  step_s = time.time() - t0
  tokens = sum(len(t.completion_ids) for t in played.played)
  record = played.record()
  row_tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in played.rows if t.trained)
  step_metrics = {**record.labels, **record.metrics, **played.metrics,
                  **batching.rollout_metrics(played.played),
                  **{k: float(v) for k, v in step_metrics.items()},
                  "perf/step_s": step_s, "perf/play_s": play_s,
                  "perf/tokens_per_s": tokens / play_s,
                  "perf/update_slots_per_token": batching.forward_slots(batch) / max(row_tokens, 1)}
  peak = runtime.peak_device_bytes()
  if peak is not None:  # GPU, TPU: compare with `python -m rlsvr.plan`.
    step_metrics["perf/peak_device_bytes"] = float(peak)
  return state, step_metrics, record


def evaluate_heldout(setup: Setup, state: TrainState, step: int) -> None:
  """The experiment's held-out evaluation on the current weights, appended to
  heldout.jsonl. Keyed by call only: every evaluation draws the same numbers."""
  policy_params = sampling_params(state)
  sample = sampler_closure(setup.sampler, policy_params, setup.config.seed, "heldout")
  t0 = time.time()
  result = setup.experiment.evaluate(sample, policy_params)
  release_sampler_weights(setup)
  setup.log(f"held-out evaluation at step {step}: {setup.config.heldout.size} episodes in "
        f"{time.time() - t0:.0f} s")
  if setup.lead:
    heldout.write(setup.workdir, step, result)
