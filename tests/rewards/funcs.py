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


class Scorer:
  """A callable instance, named by its class (TRL's `get_callable_name`)."""

  def __call__(self, completions, **kwargs):
    return [0.5] * len(completions)


scorer = Scorer()
NOT_CALLABLE = 3
