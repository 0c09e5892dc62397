"""Reward functions for the tests, importable by path as a config names them."""
import time

CALLS: list[dict] = []  # Every call's keyword arguments, in order.


def trl_style(prompts, completions, **kwargs):
  """Written for TRL: records what it was given; reward = completion length in characters."""
  CALLS.append(dict(kwargs, prompts=prompts, completions=completions))
  texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
  return [float(len(t)) for t in texts]


def one(completions, **kwargs):
  return [1.0] * len(completions)


def none_for_odd(completions, completion_ids, **kwargs):
  """None for every odd row: "no reward from this function" (TRL)."""
  return [None if k % 2 else 1.0 for k in range(len(completion_ids))]


def length_or_none_odd(completions, **kwargs):
  """Length in characters for even rows, None (no reward) for odd ones."""
  return [None if k % 2 else float(len(c)) for k, c in enumerate(completions)]


def always_none(completions, **kwargs):
  return [None] * len(completions)


def logs(completions, log_metric, log_extra, **kwargs):
  log_metric("custom/count", float(len(completions)))
  log_extra("note", [f"row {k}" for k in range(len(completions))])
  return [0.0] * len(completions)


def raises(completions, **kwargs):
  raise KeyError("gold")


def too_few(completions, **kwargs):
  return [1.0] * (len(completions) - 1)


def not_numbers(completions, **kwargs):
  return ["yes"] * len(completions)


def infinite(completions, **kwargs):
  return [1.0, float("inf")] + [0.0] * (len(completions) - 2)


def a_string(completions, **kwargs):
  return "ok"


# The values TRL accepts; each gives [1, 0, 0.5, None] for four completions.
def bools(completions, **kwargs):
  return [True, False, 0.5, None]


def numpy_values(completions, **kwargs):
  import numpy as np  # noqa: PLC0415
  return [np.bool_(True), np.int64(0), np.float32(0.5), np.nan]


def numpy_array(completions, **kwargs):
  import numpy as np  # noqa: PLC0415
  return np.array([1.0, 0.0, 0.5, np.nan])


def torch_tensor(completions, **kwargs):
  import torch  # noqa: PLC0415
  return torch.tensor([1.0, 0.0, 0.5, float("nan")])


def torch_scalars(completions, **kwargs):
  import torch  # noqa: PLC0415
  return [torch.tensor(True), torch.tensor(0), torch.tensor(0.5), None]


def a_tuple(completions, **kwargs):
  return (1, 0, 0.5, None)


def hangs(completions, **kwargs):
  while True:
    time.sleep(0.02)


def swallows_interrupt(completions, **kwargs):
  """Catches the watchdog's interrupt and returns as if nothing happened."""
  try:
    while True:
      time.sleep(0.02)
  except KeyboardInterrupt:
    return [1.0] * len(completions)


def hangs_in_c(completions, **kwargs):
  """Catastrophic backtracking: hours inside the regex engine, deaf to signals."""
  import re  # noqa: PLC0415
  re.match(r"(a+)+$", "a" * 40 + "b")
  return [1.0] * len(completions)


def crashes(completions, **kwargs):
  import os  # noqa: PLC0415
  os._exit(3)


_COUNT = [0]


def counter(completions, **kwargs):
  """Module state that lasts between calls: 1, 2, 3, ..."""
  _COUNT[0] += 1
  return [float(_COUNT[0])] * len(completions)


class Scorer:
  """A callable instance, named by its class (TRL's `get_callable_name`)."""

  def __call__(self, completions, **kwargs):
    return [0.5] * len(completions)


scorer = Scorer()
NOT_CALLABLE = 3
