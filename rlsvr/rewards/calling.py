"""Reward functions named by import path, called with TRL 1.16's `GRPOTrainer` convention.

Each function is called once per step, in the caller's thread (math-verify's
own signal timeouts need the main thread, as in TRL), with keyword arguments:

  prompts         one per completion: the prompt as sent (a string, or the chat
                  messages list for conversational prompts)
  completions     strings for plain-text prompts; for conversational prompts
                  [{"role": "assistant", "content": text}] (TRL's form). The
                  text starts with `answer_prefill` when one is set.
  completion_ids  the sampled ids (EOS included when one was produced)
  trainer_state   `TrainerState(global_step, max_steps)` (the fields of
                  transformers' TrainerState that reward schedules read)
  log_extra       log_extra(column, values): a per-completion column for the
                  rollout records
  log_metric      log_metric(name, value): a scalar metric of this step
  **columns       every other dataset column (all but prompt / completion /
                  completion_ids), as lists aligned with the completions

and returns one reward per completion. As in TRL: None (or NaN) means "no
reward from this function for this row": it is left out of the function's
`rewards/<name>/mean|std` and adds 0 to the weighted sum; a row where every
function returned None is unscorable: reported in `rewards/unscorable` and
left out of training (TRL gives it advantage 0 and keeps it out of the group
baseline). A function that raises fails the step with an error naming it,
as does a wrong-length or non-numeric result: a silently zeroed reward would
train on nothing.
"""
from __future__ import annotations

import _thread
import dataclasses
import functools
import importlib
import math
import numbers
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

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
  """The configured reward functions with their weights."""

  def __init__(self, paths: Sequence[str], weights: Sequence[float], timeout_s: float = 0.0):
    self.paths = list(paths)
    self.funcs = [resolve(p) for p in self.paths]
    self.names = [callable_name(f) for f in self.funcs]
    self.weights = np.asarray(weights, np.float64)
    self.timeout_s = timeout_s
    if len(self.weights) != len(self.funcs):
      raise ValueError(f"{len(self.weights)} reward weights for {len(self.funcs)} functions")
    dupes = sorted({n for n in self.names if self.names.count(n) > 1})
    if dupes:  # Their rewards/<name>/mean metrics would collide.
      raise ValueError(f"two reward functions are named {dupes}: {self.paths}")

  def score(self, *, prompts: Sequence[Any], completions: Sequence[Any],
            completion_ids: Sequence[Sequence[int]], columns: dict[str, list[Any]],
            trainer_state: TrainerState) -> Scores:
    n = len(completions)
    clash = sorted(set(columns) & set(RESERVED))
    if clash:
      raise ValueError(f"dataset columns {clash} shadow reward-function arguments; rename them")
    logged: dict[str, list[float]] = {}
    extra: list[dict[str, Any]] = [{} for _ in range(n)]

    def log_metric(name: str, value: float) -> None:
      logged.setdefault(name, []).append(float(value))

    def log_extra(column: str, values: Sequence[Any]) -> None:
      for row, value in zip(extra, values):
        row[column] = value

    kwargs = dict(columns, prompts=list(prompts), completions=list(completions),
                  completion_ids=[list(ids) for ids in completion_ids],
                  trainer_state=trainer_state, log_extra=log_extra, log_metric=log_metric)
    per_func = np.full((n, len(self.funcs)), np.nan)
    for j, (fn, path) in enumerate(zip(self.funcs, self.paths)):
      try:
        out = _call_with_deadline(fn, kwargs, self.timeout_s, path)
      except RewardFunctionError:
        raise
      except Exception as e:
        raise RewardFunctionError(f"reward function {path!r} raised {type(e).__name__}: "
                                  f"{e}") from e
      per_func[:, j] = _as_rewards(out, n, path)
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


def _as_rewards(out: Any, n: int, path: str) -> list[float]:
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
    if v is None:
      rewards.append(math.nan)
    elif isinstance(v, numbers.Real) and not math.isinf(v):
      rewards.append(float(v))
    else:
      raise RewardFunctionError(f"reward function {path!r} returned {v!r} for completion {k}; "
                                "rewards are finite numbers or None")
  return rewards


def _call_with_deadline(fn: Callable[..., Any], kwargs: dict[str, Any], seconds: float,
                        what: str) -> Any:
  """`fn(**kwargs)`, interrupted after `seconds` with RewardFunctionError (0: no limit).

  The call stays in the caller's thread (see the module docstring), so the limit
  is a watchdog thread that interrupts the main thread (`_thread.interrupt_main`,
  the KeyboardInterrupt of Ctrl-C). It applies in the main thread only: elsewhere
  the call runs unbounded. A KeyboardInterrupt that the watchdog did not send
  (a real Ctrl-C) passes through.
  """
  if seconds <= 0 or threading.current_thread() is not threading.main_thread():
    return fn(**kwargs)
  lock, fired, done = threading.Lock(), threading.Event(), threading.Event()

  def fire():
    with lock:  # Never interrupt after the call returned (done is set under the lock).
      if not done.is_set():
        fired.set()
        _thread.interrupt_main()

  timer = threading.Timer(seconds, fire)
  timer.daemon = True
  message = f"reward function {what!r} did not return within {seconds:g} s " \
            "(reward_fn.reward_timeout_s)"
  try:
    timer.start()
    try:
      out = fn(**kwargs)
    finally:
      with lock:
        done.set()
      timer.cancel()
    if fired.is_set():
      # The deadline passed while `fn` ran, and `fn` swallowed the interrupt, or the
      # interrupt is still on its way: let it arrive here rather than in the caller.
      end = time.monotonic() + 1.0
      while time.monotonic() < end:
        time.sleep(0.01)
      raise RewardFunctionError(message)
    return out
  except KeyboardInterrupt:
    if fired.is_set():
      raise RewardFunctionError(message) from None
    raise
