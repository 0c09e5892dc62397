"""The largest Qwen3 a config fits on a device, and the settings it needs (`python -m
rlsvr.plan --largest`): a search over `rlsvr.plan.plan`."""
from __future__ import annotations

from rlsvr.envs import registry
from rlsvr.plan import plan
from rlsvr.plan_costs import Estimates

# Qwen3 base models from the largest; `largest_fitting` walks them down.
QWEN3_LADDER = ("Qwen3-32B", "Qwen3-14B", "Qwen3-8B", "Qwen3-4B", "Qwen3-1.7B", "Qwen3-0.6B")


def _halvings(n: int) -> list[int]:
  """n, n/2, ... down to 1, while they divide n."""
  return [n >> k for k in range(n.bit_length()) if n % (n >> k) == 0]


def largest_fitting(c, num_devices: int, device_memory_bytes: int,
                    estimates: Estimates = Estimates(), models: tuple[str, ...] = QWEN3_LADDER):
  """[(hub name, settings or None, plan)] down `models` until one fits.

  Each model gets the first settings that fit among: `sampling.max_rows` (rows per sampler
  slice) all of a call's rows, then halvings; within each, `grpo.micro_batch_size` the
  config's, then halvings. The sampler and the update are separate phases, so this finds the
  largest of each that fits. Settings None: nothing fits (the plan shown is the smallest
  settings'). The last entry is the largest model that fits, if any does."""
  tried = []
  env = registry.get(c.env).plan(c, estimates)
  call_rows = max((call.rows for call in env.calls), default=1)
  rows_options = [0] + [r for r in _halvings(call_rows)[1:] if r >= max(
      (call.rows_per_prompt for call in env.calls), default=1)]
  micro_options = _halvings(c.grpo.micro_batch_size or 1)
  for name in models:
    c = c.copy_and_resolve_references()
    c.model.source = f"hub:Qwen/{name}"
    result, found = None, None
    for rows in rows_options:
      for micro in micro_options:
        c.sampling.max_rows, c.grpo.micro_batch_size = rows, micro
        result = plan(c, num_devices, device_memory_bytes, estimates)
        if result.fits:
          found = {"sampling.max_rows": rows, "grpo.micro_batch_size": micro}
          break
      if found:
        break
    tried.append((name, found, result))
    if found:
      break
  return tried
