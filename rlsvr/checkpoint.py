"""Orbax checkpoints of a training run: train state, environment state, run metadata.

Layout under `workdir/checkpoints/<step>/`:
  state/      params, optimizer state and step (sharded arrays, tensorstore)
  env/        the environment's JSON state (e.g. role baselines)
  meta/       JSON: the model config (HF config.json dict) and the run config
  models/     weights of extra models the environment asks to keep (e.g. a judge that
              holds a delayed copy of the policy), by name

The frozen reference weights are not saved: they are the initial weights and
are rebuilt from the model source on resume. Orbax writes each step to a
temporary directory and renames it when complete, so a crash mid-save leaves
the previous checkpoint intact and resume picks the newest complete one. A
complete step whose files are bad (a truncated file, a missing item, malformed
metadata) is moved to `workdir/checkpoints_unreadable/` with a warning naming
it, and the next older one is restored; only when none is readable does restore
fail. Any other error (a network file system or GCS hiccup, a timeout, out of
memory) may pass: the read is retried (`RETRY_DELAYS_S`), and if it still fails
restore raises with nothing moved, so a rerun resumes from the same step. In a
multi-process run a step is readable only when every process read its shards
of it, so all processes resume from the same step.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils

from rlsvr.model.config import ModelConfig
from rlsvr.rl.train_step import TrainState


def _processes_where(flag: bool) -> list[int]:
  """The indices of the processes on which `flag` is true (every process calls this)."""
  if jax.process_count() == 1:
    return [0] if flag else []
  flags = multihost_utils.process_allgather(np.array([flag]), tiled=True)
  return [i for i, f in enumerate(np.asarray(flags).reshape(-1)) if f]


def _saveable(state: TrainState) -> dict[str, Any]:
  return {"step": state.step, "params": state.params, "opt_state": state.opt_state}


_ITEMS = ("state", "env", "meta", "models")
RETRY_DELAYS_S = (2.0, 8.0, 30.0)  # Before each new attempt at a read that may pass.
# What tensorstore, orbax and the JSON reader say of files that are bad, not unreachable.
_BAD_FILE_MARKS = ("data_loss", "not_found", "not found", "no such file", "out_of_range",
                   "invalid_argument", "corrupt", "truncat", "checksum", "decode",
                   "unexpected end", "expecting value", "unterminated", "missing")
# ... and of a read that may pass (checked first: "deadline exceeded ... not found" passes).
_PASSING_MARKS = ("resource_exhausted", "out of memory", "unavailable", "deadline_exceeded",
                  "deadline exceeded", "timed out")
_PASSING_ERRNOS = {errno.EIO, errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOMEM,
                   errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.ENETDOWN,
                   errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ESTALE, errno.ENOLINK}


class CheckpointReadError(RuntimeError):
  """A checkpoint could not be read for a reason that may pass; nothing was moved or cut."""


def files_are_bad(e: BaseException) -> bool:
  """Whether `e`, raised reading a checkpoint, shows that its files are bad (so the step
  may be set aside) rather than unreachable for now (retry; never discard)."""
  if isinstance(e, (MemoryError, TimeoutError, ConnectionError)):
    return False
  if isinstance(e, OSError) and e.errno in _PASSING_ERRNOS:
    return False
  if isinstance(e, (FileNotFoundError, json.JSONDecodeError)):
    return True
  text = f"{type(e).__name__}: {e}".lower()
  if any(mark in text for mark in _PASSING_MARKS):
    return False
  return any(mark in text for mark in _BAD_FILE_MARKS)


class Checkpointer:
  """Saves and restores `TrainState` + environment state under `workdir/checkpoints`."""

  def __init__(self, workdir: str, *, keep: int = 3):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
        item_names=_ITEMS)
    self._own_reader: ocp.CheckpointManager | None = None  # See `_reader`.

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: TrainState, env_state: dict[str, Any],
           meta: dict[str, Any], models: dict[str, Any] | None = None) -> None:
    """`models`: extra weights by name (`Experiment.model_state`), saved when not empty."""
    items = dict(state=ocp.args.StandardSave(_saveable(state)),
                 env=ocp.args.JsonSave(env_state), meta=ocp.args.JsonSave(meta))
    if models:
      items["models"] = ocp.args.StandardSave(dict(models))
    self.manager.save(step, args=ocp.args.Composite(**items))

  def restore_models(self, step: int, like: dict[str, Any]) -> dict[str, Any]:
    """The extra models saved at `step`, shaped and sharded like `like` (name -> weights,
    e.g. `Experiment.model_state(step)` of a freshly built experiment); {} when none."""
    if not like or "models" not in self.manager.item_metadata(step):
      return {}
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, dict(like))
    restored = self.manager.restore(step, args=ocp.args.Composite(
        models=ocp.args.StandardRestore(abstract)))
    return dict(restored["models"])

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def restore(self, state: TrainState, step: int | None = None
              ) -> tuple[TrainState, dict[str, Any], dict[str, Any]]:
    """Restores into the structure and shardings of `state` (a freshly built one).

    Without `step`: the newest readable checkpoint (unreadable newer ones are set
    aside, see the module docstring); RuntimeError when none is readable.
    """
    steps = sorted(self.manager.all_steps(), reverse=True) if step is None else [step]
    if not steps:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    errors = []
    for s in steps:
      restored, why, passing = self._read_with_retries(state, s, raise_errors=step is not None)
      # Every process reads its own shards: a step counts as readable only if it is on all
      # of them, or the processes would resume from different steps.
      passing_on = _processes_where(passing)
      if passing_on:
        raise CheckpointReadError(
            f"checkpoint step {s} in {self.directory} could not be read on process(es) "
            f"{passing_on} after {len(RETRY_DELAYS_S) + 1} attempts ({why or 'see them'}); "
            "the error may pass (file system, network, memory), so nothing was moved and no "
            "output was cut: rerun to resume from it")
      unreadable_on = _processes_where(bool(why))
      if unreadable_on:
        errors.append((s, why or f"unreadable on process(es) {unreadable_on}"))
        continue
      if errors:
        self._set_aside([bad for bad, _ in errors])
        print("WARNING: unreadable checkpoint(s) " + "; ".join(f"step {b} ({why})"
              for b, why in errors) + f", moved to {self.unreadable_dir}; resuming from step "
              f"{s} instead", file=sys.stderr, flush=True)
      return restored
    raise RuntimeError(f"no readable checkpoint in {self.directory}: " + "; ".join(
        f"step {b}: {why}" for b, why in errors))

  def _read_with_retries(self, state: TrainState, step: int, raise_errors: bool):
    """(restored or None, why it failed or "", whether the failure may pass)."""
    for attempt, delay in enumerate((*RETRY_DELAYS_S, None)):
      try:
        return self._restore_step(state, step), "", False
      except Exception as e:  # noqa: BLE001 (orbax and tensorstore raise many kinds)
        if raise_errors:
          raise
        why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        if files_are_bad(e):
          return None, why, False
        if delay is None:
          return None, why, True
        print(f"WARNING: reading checkpoint step {step} failed ({why}); attempt "
              f"{attempt + 2} in {delay:g} s", file=sys.stderr, flush=True)
        time.sleep(delay)
        self.manager.reload()

  @property
  def unreadable_dir(self) -> str:
    return os.path.join(os.path.dirname(self.directory), "checkpoints_unreadable")

  def _set_aside(self, steps: list[int]) -> None:
    """Moves unreadable steps out of the manager's folder, so the run can save them anew.
    Process 0 moves the shared folder; the others wait for it before they reload."""
    if jax.process_index() == 0:
      os.makedirs(self.unreadable_dir, exist_ok=True)
      for s in steps:
        target = os.path.join(self.unreadable_dir, f"{s}.{int(time.time())}")
        shutil.move(os.path.join(self.directory, str(s)), target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("rlsvr checkpoint set aside " + ",".join(map(str, steps)))
    self.manager.reload()

  def _reader(self) -> ocp.CheckpointManager:
    """What `restore` reads a step with. In a multi-process run a manager of this process
    alone (no cross-process barrier inside a read): a process that fails on a step must not
    leave the others waiting halfway through it; `restore` then settles the step for all."""
    if jax.process_count() == 1:
      return self.manager
    if self._own_reader is None:
      me = jax.process_index()
      self._own_reader = ocp.CheckpointManager(self.directory, item_names=_ITEMS, options=(
          ocp.CheckpointManagerOptions(read_only=True, multiprocessing_options=(
              ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me},
                                                 barrier_sync_key_prefix=f"reader{me}")))))
    return self._own_reader

  def _restore_step(self, state: TrainState, step: int):
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _saveable(state))
    saved = ocp.StandardCheckpointHandler().metadata(
        epath.Path(self.directory) / str(step) / "state")
    if "rng" in saved:  # Written when TrainState still held an (unused) key: read, dropped.
      abstract["rng"] = jax.ShapeDtypeStruct(saved["rng"].shape, saved["rng"].dtype,
                                             sharding=abstract["step"].sharding)
    restored = self._reader().restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract),
        env=ocp.args.JsonRestore(),
        meta=ocp.args.JsonRestore()))
    s = restored["state"]
    state = dataclasses.replace(state, step=s["step"], params=s["params"],
                                opt_state=s["opt_state"])
    return state, dict(restored["env"]), dict(restored["meta"])

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
    if self._own_reader is not None:
      self._own_reader.close()


# Config keys a resumed run may change: they cannot change what the run computes.
RESUME_SAFE_KEYS = ("steps", "workdir", "check_memory", "resume_with_changes", "log.",
                    "checkpoint.", "distributed.")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if not isinstance(tree, dict):
    return {prefix[:-1]: tree}
  out: dict[str, Any] = {}
  for k, v in tree.items():
    out.update(_flatten(v, f"{prefix}{k}."))
  return out


def changed_keys(saved_config_json: str, config_json: str) -> list[str]:
  """The keys, other than RESUME_SAFE_KEYS, whose values differ between a checkpoint's
  run config and this run's (both as `ConfigDict.to_json_best_effort`), as "key: a -> b"."""
  saved, now = _flatten(json.loads(saved_config_json)), _flatten(json.loads(config_json))
  safe = lambda k: any(k == s or (s.endswith(".") and k.startswith(s)) for s in RESUME_SAFE_KEYS)
  return [f"{k}: {saved.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r}"
          for k in sorted(set(saved) | set(now)) if not safe(k) and saved.get(k) != now.get(k)]


def _run_manager(checkpoint_dir: str) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(os.path.abspath(checkpoint_dir), item_names=_ITEMS)


def _meta(manager: ocp.CheckpointManager, step: int | None, where: str) -> tuple[int, dict]:
  step = manager.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"no checkpoint in {where}")
  meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  return step, dict(meta)


def restore_trained(checkpoint_dir: str, step: int | None = None):
  """(step, model config, trained weights, meta) of a run's checkpoint, on the default
  device, as saved: every weight, or a LoRA run's adapters (`meta["lora"]` then says so)."""
  from rlsvr.model import lora as lora_lib  # noqa: PLC0415 (only the export path needs them)
  from rlsvr.model import qwen3  # noqa: PLC0415

  manager = _run_manager(checkpoint_dir)
  step, meta = _meta(manager, step, checkpoint_dir)
  config = ModelConfig.from_hf_dict(meta["model_config"])
  dtype = meta.get("param_dtype", "float32")
  lora = lora_lib.from_dict(meta.get("lora"))
  abstract = (qwen3.abstract_params(config, dtype) if lora is None else jax.eval_shape(
      lambda key: lora_lib.init_adapters(config, lora, key, dtype), jax.random.key(0)))
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.PyTreeRestore(
          item={"params": abstract},
          restore_args={"params": jax.tree.map(
              lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=device), abstract)},
          partial_restore=True)))
  return step, config, restored["state"]["params"], meta


def restore_run(checkpoint_dir: str, step: int | None = None):
  """(step, model config, params, meta) of a run's checkpoint, on the default device.
  A LoRA run's params are its base (loaded again from the run's model source, in the
  compute dtype it trained on) with the adapters merged in, in the masters' dtype."""
  from rlsvr.model import lora as lora_lib  # noqa: PLC0415
  from rlsvr.model import sources  # noqa: PLC0415

  step, config, params, meta = restore_trained(checkpoint_dir, step)
  lora = lora_lib.from_dict(meta.get("lora"))
  if lora is not None:
    run, dtype = json.loads(meta["config"]), meta.get("param_dtype", "float32")
    _, base, _ = sources.load_model(run["model"]["source"],
                                    dtype=meta.get("compute_dtype", dtype),
                                    seed=run.get("seed", 0),
                                    tokenizer=run["model"].get("tokenizer", ""))
    params = lora_lib.merge_jit(config, lora, base, params, jnp.dtype(dtype))
  return step, config, params, meta


def restore_params(checkpoint_dir: str, step: int | None = None):
  """(step, model config, params) of a run's checkpoint, on the default device."""
  return restore_run(checkpoint_dir, step)[:3]
