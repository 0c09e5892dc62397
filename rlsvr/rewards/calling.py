"""Reward functions named by import path, called with TRL 1.16's `GRPOTrainer` convention.

Each function is called once per step with keyword arguments:

  prompts         one per completion, in the dataset's form: a string for a string
                  prompt (even when the chat template renders it for the policy), the
                  chat messages for a conversational prompt
  completions     in the same form (TRL's): strings for string prompts, and
                  [{"role": "assistant", "content": text}] for conversational ones.
                  The text starts with `answer_prefill` when one is set.
  completion_ids  the sampled ids (EOS included when one was produced)
  trainer_state   `TrainerState(global_step, max_steps)` (the fields of
                  transformers' TrainerState that reward schedules read)
  log_extra       log_extra(column, values): a per-completion column for the
                  rollout records
  log_metric      log_metric(name, value): a scalar metric of this step
  **columns       every other dataset column (all but prompt / completion /
                  completion_ids), as lists aligned with the completions

and returns (an `async def` function: its coroutine returns) one reward per
completion, in any form TRL accepts: a list or tuple of floats, ints, bools,
numpy scalars or 0-d torch tensors, or a 1-d numpy array or torch tensor.
As in TRL: None (or NaN) means "no reward from this function for this row":
it is left out of the function's `rewards/<name>/mean|std` and adds 0 to the
weighted sum; a row where every function returned None is unscorable
(`Scores.unscorable`, `rewards/unscorable`), and the environment keeps it out
of every group's baseline (`reward_fn.unscorable`). A function that raises
fails the step with an error naming it, as does a wrong-length, non-numeric or
infinite result: a silently zeroed reward would train on nothing.

With a time limit (`timeout_s` > 0) the functions run in a worker process
(`rlsvr.workers.WorkerPool`) that is killed at the limit, so a hang is bounded
in every launch mode (SIGINT ignored under `nohup ... &`) and inside C code (a
regex, a solver). The worker lives for the run: module state and callable
instances keep their state between steps until a limit kills it. Without a
limit they run in the caller's thread.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import inspect
import math
import numbers
import traceback
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from rlsvr import workers

# Keyword arguments the environment passes itself; a dataset column may not shadow them.
RESERVED = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
# Columns TRL does not pass on (the prompt travels as `prompts`).
NOT_COLUMNS = ("prompt", "completion", "completion_ids")


class RewardFunctionError(RuntimeError):
  """A reward function failed, returned something unusable, or ran past its time limit."""


@dataclasses.dataclass(frozen=True)
class TrainerState:
  """What TRL reward schedules read of transformers' `TrainerState`."""

  global_step: int  # Updates made before this step (TRL's meaning): step - 1.
  max_steps: int


def resolve(path: str) -> Callable[..., Any]:
  """The callable at `module:attr` or `module.attr`; ValueError naming `path` when absent."""
  module_name, sep, attr = path.partition(":")
  if not sep:
    module_name, _, attr = path.rpartition(".")
  if not module_name or not attr:
    raise ValueError(f"reward function {path!r} is not 'module:function' or 'module.function'")
  try:
    obj = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"reward function {path!r}: cannot import {module_name!r} ({e})") from None
  try:
    for part in attr.split("."):
      obj = getattr(obj, part)
  except AttributeError:
    raise ValueError(f"reward function {path!r}: {module_name!r} has no {attr!r}") from None
  if not callable(obj):
    raise ValueError(f"reward function {path!r} is a {type(obj).__name__}, not callable")
  return obj


def callable_name(fn: Callable[..., Any]) -> str:
  """TRL's metric name of a reward function: its `__name__` (partials unwrapped), else its
  class name."""
  while isinstance(fn, functools.partial):
    fn = fn.func
  return getattr(fn, "__name__", type(fn).__name__)


@dataclasses.dataclass
class Scores:
  """One step's rewards: per function (NaN = None), weighted sums, and what was logged."""

  names: list[str]
  per_func: np.ndarray  # N x F float64, NaN where a function gave no reward.
  total: np.ndarray  # N: the weighted sum over the functions that gave one.
  unscorable: np.ndarray  # N bool: every function returned None.
  metrics: dict[str, float]
  extra: list[dict[str, Any]]  # Per completion: the columns given to log_extra.


class RewardSet:
  """The configured reward functions with their weights (and, with a limit, their worker)."""

  def __init__(self, paths: Sequence[str], weights: Sequence[float], timeout_s: float = 0.0):
    self.paths = list(paths)
    self.funcs = [resolve(p) for p in self.paths]
    self.names = [callable_name(f) for f in self.funcs]
    self.weights = np.asarray(weights, np.float64)
    self.timeout_s = timeout_s
    self._pool: workers.WorkerPool | None = None
    if len(self.weights) != len(self.funcs):
      raise ValueError(f"{len(self.weights)} reward weights for {len(self.funcs)} functions")
    dupes = sorted({n for n in self.names if self.names.count(n) > 1})
    if dupes:  # Their rewards/<name>/mean metrics would collapse into one.
      raise ValueError(f"two reward functions are named {dupes}: {self.paths}")

  def start(self) -> None:
    """Starts the worker now (it imports the functions' modules while the caller goes on);
    `score` starts it otherwise. Nothing to start without a time limit."""
    if self.timeout_s > 0 and self._pool is None:
      modules = [_module_of(p) for p in self.paths]
      self._pool = workers.WorkerPool(num_workers=1, memory_bytes=None,
                                      preload=(__name__, *dict.fromkeys(modules)))
      self._closer = weakref.finalize(self, self._pool.close)  # at exit or when dropped

  def close(self) -> None:
    if self._pool is not None:
      self._closer()
      self._pool = None

  def score(self, *, prompts: Sequence[Any], completions: Sequence[Any],
            completion_ids: Sequence[Sequence[int]], columns: dict[str, list[Any]],
            trainer_state: TrainerState) -> Scores:
    n = len(completions)
    clash = sorted(set(columns) & set(RESERVED))
    if clash:
      raise ValueError(f"dataset columns {clash} shadow reward-function arguments; rename them")
    kwargs = dict(columns, prompts=list(prompts), completions=list(completions),
                  completion_ids=[[int(t) for t in ids] for ids in completion_ids],
                  trainer_state=trainer_state)
    logged: dict[str, list[float]] = {}
    extra: list[dict[str, Any]] = [{} for _ in range(n)]
    per_func = np.full((n, len(self.funcs)), np.nan)
    for j, (fn, path) in enumerate(zip(self.funcs, self.paths)):
      rewards, fn_logged, fn_extra = self._call(fn, path, kwargs, n)
      per_func[:, j] = rewards
      for name, values in fn_logged.items():
        logged.setdefault(name, []).extend(values)
      for row, columns_of_row in zip(extra, fn_extra):
        row.update(columns_of_row)
    unscorable = np.isnan(per_func).all(axis=1)
    total = np.nansum(per_func * self.weights[None, :], axis=1)
    metrics = {"rewards/unscorable": float(unscorable.sum())}
    for j, name in enumerate(self.names):
      given = per_func[~np.isnan(per_func[:, j]), j]
      if given.size:  # A function that gave no reward this step has no mean to report.
        metrics[f"rewards/{name}/mean"] = float(given.mean())
        metrics[f"rewards/{name}/std"] = float(given.std(ddof=1)) if given.size > 1 else 0.0
    metrics.update({k: float(np.mean(v)) for k, v in logged.items()})  # TRL averages them
    return Scores(self.names, per_func, total, unscorable, metrics, extra)

  def _call(self, fn: Callable[..., Any], path: str, kwargs: dict[str, Any],
            n: int) -> tuple[list[float], dict[str, list[float]], list[dict[str, Any]]]:
    if self.timeout_s <= 0:
      reply = _call_one(fn, path, kwargs, n)
    else:
      self.start()
      outcome = self._pool.run(_call_by_path, path, kwargs, n, timeout=self.timeout_s)
      if outcome.status == "timeout":
        raise RewardFunctionError(
            f"reward function {path!r} did not return within {self.timeout_s:g} s "
            "(reward_fn.reward_timeout_s); its worker process was killed")
      if not outcome.ok:
        raise RewardFunctionError(f"reward function {path!r}: its worker process failed "
                                  f"({outcome.error}); a crash, or an unpicklable result")
      reply = outcome.value
    if reply[0] != "ok":
      raise RewardFunctionError(reply[1])
    return reply[1], reply[2], reply[3]


def _module_of(path: str) -> str:
  module, sep, _ = path.partition(":")
  return module if sep else path.rpartition(".")[0]


@functools.lru_cache(maxsize=None)
def _resolved(path: str) -> Callable[..., Any]:
  return resolve(path)  # Once per worker: a callable instance keeps its state across steps.


def _call_by_path(path: str, kwargs: dict[str, Any], n: int) -> tuple:
  """`_call_one` of the function at `path` (runs in the worker)."""
  return _call_one(_resolved(path), path, kwargs, n)


def _call_one(fn: Callable[..., Any], path: str, kwargs: dict[str, Any], n: int) -> tuple:
  """("ok", rewards, logged metrics, extra columns per row), or ("error", message): plain
  values that cross a process boundary (a torch tensor result becomes floats here)."""
  logged: dict[str, list[float]] = {}
  extra: list[dict[str, Any]] = [{} for _ in range(n)]

  def log_metric(name: str, value: float) -> None:
    logged.setdefault(name, []).append(float(value))

  def log_extra(column: str, values: Sequence[Any]) -> None:
    for row, value in zip(extra, values):
      row[column] = value

  try:
    out = fn(**kwargs, log_extra=log_extra, log_metric=log_metric)
    if inspect.isawaitable(out):  # An `async def` reward function (TRL runs those too).
      out = asyncio.run(_awaited(out))
  except Exception as e:  # noqa: BLE001  -- reported as a failed step naming the function
    where = "".join(traceback.format_exception(e)[-6:]).rstrip()
    return ("error", f"reward function {path!r} raised {type(e).__name__}: {e}\n{where}")
  try:
    return ("ok", _as_rewards(out, n, path), logged, extra)
  except RewardFunctionError as e:
    return ("error", str(e))


async def _awaited(awaitable: Any) -> Any:
  return await awaitable


def _as_rewards(out: Any, n: int, path: str) -> list[float]:
  """`out` as n floats (NaN for None/NaN); RewardFunctionError for what TRL would not take."""
  if isinstance(out, (str, bytes, dict)) or getattr(out, "ndim", 1) != 1:
    raise RewardFunctionError(f"reward function {path!r} returned {_shown(out)}, not one "
                              "reward per completion")
  try:
    values = list(out)
  except TypeError:
    raise RewardFunctionError(f"reward function {path!r} returned a {type(out).__name__}, not "
                              "a list of rewards") from None
  if len(values) != n:
    raise RewardFunctionError(f"reward function {path!r} returned {len(values)} rewards for "
                              f"{n} completions (one per completion expected)")
  rewards = []
  for k, v in enumerate(values):
    reward = _as_reward(v)
    if reward is None or math.isinf(reward):
      raise RewardFunctionError(f"reward function {path!r} returned {_shown(v)} for completion "
                                f"{k}; rewards are finite numbers, bools or None")
    rewards.append(reward)
  return rewards


def _as_reward(v: Any) -> float | None:
  """One reward as a float (None/NaN -> NaN), or None when `v` is not a real number."""
  if v is None:
    return math.nan
  if isinstance(v, (numbers.Real, np.bool_)):  # bool, int, float, numpy scalars
    return float(v)
  if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # 0-d torch tensor or numpy array
    item = v.item()
    return float(item) if isinstance(item, (numbers.Real, np.bool_)) else None
  return None


def _shown(v: Any) -> str:
  text = repr(v)
  return text if len(text) <= 80 else f"a {type(v).__name__} ({text[:60]}...)"
