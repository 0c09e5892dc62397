"""Per-device memory plan of a training config: will it fit, before anything is allocated?

  python -m rlsvr.plan --config=configs/spy_summ.py --devices=8 --device=h100-80gb \
      [--prompt_tokens=players=3000,detectors=6000] [--config.grpo.micro_batch_size=8]
  python -m rlsvr.plan --config=configs/rlvr_math.py --devices=1 --device=h200 --largest

Exact, from shapes and `rlsvr.parallel`'s rules on an abstract mesh (no devices needed):
params, AdamW moments, reference / judge copies, gradients, KV caches. Estimates ("est."):
prompt lengths (printed; `--prompt_tokens` overrides) and activations. Peak = resident
state + the largest phase (a sampler call, a train step, the update). Exit status 1: no fit.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from rlsvr.model.attention import DEFAULT_BLOCK
from rlsvr.model.config import ModelConfig
from rlsvr.envs import registry
from rlsvr.plan_costs import (MESH_AXES, Component, Estimates, batch_bucket, model_config_of,
                              param_bytes, sample_phase, train_activations)

GIB = 2**30
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}
# Memory of one device as the runtime reports it (MiB), and the share JAX may use by default
# (the GPU client preallocates XLA_PYTHON_CLIENT_MEM_FRACTION = 0.75).
DEVICES = {
    "a100-40gb": (40_960, 0.75), "a100-80gb": (81_920, 0.75), "h100-80gb": (81_559, 0.75),
    "h200": (143_771, 0.75), "tpu-v4": (32_768, 1.0), "tpu-v5e": (16_384, 1.0),
    "tpu-v5p": (97_280, 1.0), "tpu-v6e": (32_768, 1.0)}
def mesh_sizes(shape: dict[str, int] | None, num_devices: int) -> dict[str, int]:
  """Axis sizes `rlsvr.parallel.make_mesh(shape)` would build on `num_devices` devices."""
  sizes = {a: 1 for a in MESH_AXES}
  sizes.update(shape or {"fsdp": -1})
  free = [a for a, n in sizes.items() if n == -1]
  known = math.prod(n for n in sizes.values() if n != -1)
  for a in free:
    sizes[a] = num_devices // known
  if (set(sizes) - set(MESH_AXES) or len(free) > 1 or (free and num_devices % known)
      or math.prod(sizes.values()) > num_devices):
    raise ValueError(f"mesh {dict(shape or {})} does not fit {num_devices} devices (axes: "
                     f"{MESH_AXES}, -1 = the rest)")
  return sizes


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  """Per-device memory of a config on a mesh; `fits` is None when the memory is unknown."""

  components: tuple[Component, ...]
  header: str
  assumptions: tuple[str, ...]
  device_memory_bytes: int | None  # Usable by JAX (fraction already applied).

  def phase_bytes(self) -> dict[str, int]:
    names = dict.fromkeys(c.phase for c in self.components if c.phase != "resident")
    return {p: sum(c.bytes for c in self.components if c.phase == p) for p in names}

  @property
  def resident_bytes(self) -> int:
    return sum(c.bytes for c in self.components if c.phase == "resident")

  @property
  def peak_phase(self) -> str:
    return max(self.phase_bytes().items(), key=lambda kv: kv[1], default=("resident", 0))[0]

  @property
  def total_bytes(self) -> int:
    return self.resident_bytes + max(self.phase_bytes().values(), default=0)

  @property
  def headroom_bytes(self) -> int | None:
    return None if self.device_memory_bytes is None else self.device_memory_bytes - self.total_bytes

  @property
  def fits(self) -> bool | None:
    return None if self.device_memory_bytes is None else self.headroom_bytes >= 0

  def table(self) -> str:
    gib = lambda b: f"{b / GIB:>12,.2f}"
    lines = [self.header, f"{'component':<64}{'GiB/device':>12}  sharding", "-" * 106]
    for phase in ["resident", *self.phase_bytes()]:
      rows = [c for c in self.components if c.phase == phase]
      mark = "  <- peak phase" if phase == self.peak_phase else ""
      lines.append(f"{'[' + phase + ']':<64}{gib(sum(c.bytes for c in rows))}{mark}")
      lines += [f"  {c.name + (' (est.)' if c.estimate else ''):<62}{gib(c.bytes)}  {c.sharding}"
                for c in rows]
    lines += ["-" * 106, f"{'peak = resident + ' + self.peak_phase.split(' (')[0]:<64}"
              f"{gib(self.total_bytes)}"]
    if self.device_memory_bytes is None:
      lines.append("device memory unknown (--device or --device_memory_gb): no verdict")
    else:
      lines += [f"{'device memory usable by JAX':<64}{gib(self.device_memory_bytes)}",
                f"{'headroom':<64}{gib(self.headroom_bytes)}",
                "verdict: " + ("FITS" if self.fits else "DOES NOT FIT")]
    return "\n".join(lines + ["assumptions:"] + [f"  - {a}" for a in self.assumptions])


@dataclasses.dataclass(frozen=True)
class _Sharded:
  """A config's model on a mesh: what every component of its plan is computed from."""

  model: ModelConfig
  sizes: dict[str, int]
  data_shards: int  # data x fsdp: train rows and sampler prompts split over these.
  tensor_shards: int
  compute: str  # The sampler copy, reference, judge and activations; masters in `master`.
  master: str
  compute_bytes: int  # Per device, of one copy of all the params in the compute dtype.
  # Per device, of one copy of the trained weights (all of them, or the LoRA adapters).
  float32_bytes: int
  master_bytes: int
  trained_compute_bytes: int
  loaded_bytes: int  # All the params in the master dtype, as the model loads.
  sharding: str  # How the params are split, as the table prints it.
  trained_sharding: str
  # Parameters all-gathered where used when the weights are split (0 when they are not).
  gathered_params: int
  lora: Any = None  # rlsvr.model.lora.LoraConfig of a LoRA run.

  @property
  def compute_itemsize(self) -> int:
    return _ITEMSIZE[self.compute]

  @property
  def copies(self) -> bool:
    """The sampler reads a copy made each step: a compute-dtype cast of the masters, or
    the base with a LoRA run's adapters merged in."""
    return self.compute != self.master or self.lora is not None


def _shard(c, num_devices: int) -> _Sharded:
  from rlsvr.model import lora as lora_lib  # noqa: PLC0415

  model, sizes = model_config_of(c.model.source), mesh_sizes(dict(c.mesh.shape), num_devices)
  compute, master = c.model.compute_dtype, c.model.param_dtype
  lora = lora_lib.from_config(c.model.get("lora"))
  data_shards, tensor_shards = sizes["data"] * sizes["fsdp"], sizes["tensor"]
  compute_bytes, sharding = param_bytes(model, sizes, _ITEMSIZE[compute])
  trained = lambda itemsize: param_bytes(model, sizes, itemsize, lora)
  # Weights split over the mesh are all-gathered where used: count the embedding (+ head)
  # and one layer whole. Which of them XLA holds at once is its choice: an estimate.
  embed = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
  one_layer = (model.num_params() - embed) // model.num_layers
  return _Sharded(model=model, sizes=sizes, data_shards=data_shards, tensor_shards=tensor_shards,
                  compute=compute, master=master, compute_bytes=compute_bytes,
                  float32_bytes=trained(4)[0], master_bytes=trained(_ITEMSIZE[master])[0],
                  trained_compute_bytes=trained(_ITEMSIZE[compute])[0],
                  loaded_bytes=param_bytes(model, sizes, _ITEMSIZE[master])[0],
                  sharding=sharding, trained_sharding=trained(4)[1],
                  gathered_params=embed + one_layer if data_shards * tensor_shards > 1 else 0,
                  lora=lora)


def _resident(c, s: _Sharded, env: registry.EnvPlan,
              models: dict[str, ModelConfig]) -> list[Component]:
  """Always held: masters, AdamW moments, the reference and the environment's extra models
  (`models`, by name); and the init phase's loaded params."""
  held = lambda name, nbytes=s.compute_bytes, sharding=s.sharding: Component(
      "resident", name, nbytes, sharding)
  if s.lora is None:
    comps = [held(f"master params ({s.master})", s.master_bytes)]
  else:  # The frozen base is the KL reference too.
    comps = [held(f"frozen base params ({s.compute}; also the KL reference)"),
             held(f"LoRA adapters, rank {s.lora.rank} ({s.master} masters)", s.master_bytes,
                  s.trained_sharding)]
  comps.append(held("AdamW mu + nu (float32)", 2 * s.float32_bytes, s.trained_sharding))
  if c.grpo.kl_coef > 0 and s.lora is None:
    comps.append(held(f"reference params ({s.compute})"))
  for name, source in env.extra_models.items():
    comps.append(held(f"{name} params ({source or 'a copy of the policy'})",
                      *param_bytes(models[name], s.sizes, s.compute_itemsize)))
  # init_train_state copies the loaded params while they are alive (a LoRA run loads its
  # base in the compute dtype and keeps it: no copy).
  if not env.extra_models and s.lora is None:
    comps.append(Component("init", "loaded params during init_train_state", s.loaded_bytes,
                           s.sharding))
  return comps


def _prompt_lengths(env: registry.EnvPlan, estimates: Estimates) -> dict[str, int]:
  """Prompt tokens of each sampler call: the environment's estimate or --prompt_tokens."""
  overrides = dict(estimates.prompt_tokens)
  if set(overrides) - {call.name for call in env.calls}:
    raise ValueError(f"--prompt_tokens names {sorted(overrides)}; calls: "
                     f"{[call.name for call in env.calls]}")
  return {call.name: overrides.get(call.name, call.prompt_tokens) for call in env.calls}


def _sampler_phase(c, s: _Sharded, call: registry.SamplerCall, prompt_tokens: int,
                   model: ModelConfig) -> list[Component]:
  comps = sample_phase(call.name, call.rows, prompt_tokens, call.new_tokens, model,
                       s.compute_itemsize, s.data_shards, s.tensor_shards,
                       s.gathered_params if model is s.model else 0, DEFAULT_BLOCK,
                       max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens,
                       per_prompt=call.rows_per_prompt)
  if s.copies:  # Made once per step; alive while the step plays.
    what = "base + adapters merged" if s.lora is not None else "copy"
    comps.append(Component(comps[0].phase, f"policy weights for the sampler ({s.compute} {what})",
                           s.compute_bytes, s.sharding))
  return comps


def _train_phase(c, s: _Sharded, train: registry.TrainPhase,
                 prompt_lengths: dict[str, int]) -> list[Component]:
  """One update over `train`'s rows, padded as `rlsvr.rl.batch` pads them."""
  from rlsvr.rl.batch import row_bucket  # noqa: PLC0415
  from rlsvr.rl.logprobs import chunk_len  # noqa: PLC0415

  prompt_len = batch_bucket(max(prompt_lengths[call] for call in train.calls))
  completion_len = batch_bucket(train.completion_tokens)
  micro_batch_config = c.grpo.micro_batch_size  # 0: the whole batch at once.
  # The trainer pads the rows to whole micro-batches, each split over the data shards.
  rows_multiple = (math.lcm(micro_batch_config, s.data_shards) if micro_batch_config
                   else s.data_shards)
  batch_rows = row_bucket(train.rows, rows_multiple)  # As `build_batch` pads them.
  micro_batch_rows = micro_batch_config or batch_rows
  split = micro_batch_rows % s.data_shards == 0
  rows_per_device = micro_batch_rows // s.data_shards if split else micro_batch_rows
  phase = (f"train: {train.name} ({batch_rows} rows, micro-batch {micro_batch_rows}, "
           f"T={prompt_len}+{completion_len})")
  logits_chunk = c.grpo.get("logits_chunk", 0) or chunk_len(
      micro_batch_rows, completion_len + 1, s.model.vocab_size)
  comps = [Component(phase, "FSDP-gathered embedding + one layer, and their grads",
                     s.gathered_params * (s.compute_itemsize + 4), "whole", estimate=True)
           ] if s.gathered_params else []
  activations = train_activations(
      s.model, rows_per_device, prompt_len + completion_len, completion_len, s.compute_itemsize,
      remat=c.grpo.remat, t=s.tensor_shards, chunk=logits_chunk, block=DEFAULT_BLOCK)
  # Two full-length and two completion-length 4-byte arrays per row, twice: the host
  # batch and its micro-batch split.
  batch_bytes = 2 * batch_rows * (2 * (prompt_len + completion_len) + 2 * completion_len) * 4
  comps += [
      Component(phase, "gradient accumulator (float32)", s.float32_bytes, s.trained_sharding),
      Component(phase, f"micro-batch gradients ({s.compute})", s.trained_compute_bytes,
                s.trained_sharding),
      Component(phase, f"activations, {rows_per_device} rows, remat={c.grpo.remat}", activations,
                f"rows/{s.data_shards} (data·fsdp)" if rows_per_device < micro_batch_rows
                else "micro-batch whole", estimate=True),
      Component(phase, "batch arrays (host numpy: whole) + micro split", batch_bytes, "whole",
                estimate=True)]
  if s.compute != s.master:  # Cast once per update, alive through its micro-batches.
    comps.append(Component(phase, f"trained weights of the forward ({s.compute} copy)",
                           s.trained_compute_bytes, s.trained_sharding))
  return comps


def plan(c, num_devices: int, device_memory_bytes: int | None = None,
         estimates: Estimates = Estimates()) -> MemoryPlan:
  """The per-device memory plan of config `c` on `num_devices` devices (none needed here)."""
  s = _shard(c, num_devices)
  registry.import_plugins(c)
  env = registry.get(c.env).plan(c, estimates)
  # The sampler's model of each call: the policy ("") or an extra model.
  models = {"": s.model, **{name: model_config_of(source) if source else s.model
                            for name, source in env.extra_models.items()}}
  comps = _resident(c, s, env, models)
  prompt_lengths = _prompt_lengths(env, estimates)
  for call in env.calls:
    comps += _sampler_phase(c, s, call, prompt_lengths[call.name], models[call.model])
  for train in env.phases:
    comps += _train_phase(c, s, train, prompt_lengths)
  comps.append(Component("optimizer update", "gradients + fp32 params + updates (float32)",
                         3 * s.float32_bytes, s.trained_sharding, estimate=True))
  notes = [*env.notes,
           f"prompt tokens per call before bucketing: {prompt_lengths} (--prompt_tokens=name=N)",
           "buckets as the sampler's and the train batch's; train rows split over data·fsdp",
           "params, optimizer state, KV caches: exact for these shapes; activations: estimates "
           f"(attention in blocks of {DEFAULT_BLOCK} queries)"]
  m = s.model
  lora = (f", LoRA rank {s.lora.rank} on {','.join(s.lora.targets)}" if s.lora is not None
          else "")
  header = (f"{c.model.source}: {m.num_params() / 1e9:.2f}B params{lora}, {s.master} masters, "
            f"{s.compute} compute, L{m.num_layers} D{m.hidden_size} H{m.num_heads} "
            f"K{m.num_kv_heads} V{m.vocab_size}\nmesh {s.sizes} "
            f"({math.prod(s.sizes.values())} of {num_devices} devices)")
  return MemoryPlan(tuple(comps), header, tuple(notes), device_memory_bytes)


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


def detect_device_memory() -> int | None:
  """The allocator's limit on device 0 (None on backends without memory stats, e.g. CPU)."""
  import jax  # noqa: PLC0415
  return (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")


def check_fits(c, num_devices: int | None = None, device_memory_bytes: int | None = None,
               estimates: Estimates = Estimates()) -> MemoryPlan:
  """The plan (by default for this machine's devices); ValueError with the table if it does not
  fit. Without a known memory size (e.g. on CPU) it returns the plan unchecked."""
  import jax  # noqa: PLC0415

  result = plan(c, num_devices or jax.device_count(),
                device_memory_bytes or detect_device_memory(), estimates)
  if result.fits is False:
    raise ValueError(f"the config does not fit in device memory:\n{result.table()}")
  return result


def usable_memory(device: str | None, memory_gb: float | None,
                  fraction: float | None) -> int | None:
  """Bytes JAX may use per device from the CLI's --device / --device_memory_gb / --mem_fraction."""
  if device and device not in DEVICES:
    raise ValueError(f"unknown --device={device!r}; known: {sorted(DEVICES)}")
  if memory_gb or not device:
    total = memory_gb * GIB if memory_gb else detect_device_memory()
    return None if total is None else int(total * (fraction or 1.0))
  mib, default = DEVICES[device]
  env = None if device.startswith("tpu") else os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
  return int(mib * 2**20 * (fraction or float(env or default)))


def main(argv: Any) -> None:
  from absl import app, flags  # noqa: PLC0415

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  est = Estimates(f.tokens_per_word, f.template_tokens, f.output_tokens, tuple(
      (k, int(v)) for k, v in (kv.split("=") for kv in f.prompt_tokens)))
  num_devices = f.devices or __import__("jax").device_count()
  memory = usable_memory(f.device, f.device_memory_gb, f.mem_fraction)
  if f.largest:
    if memory is None:
      raise app.UsageError("--largest needs the device memory: --device or --device_memory_gb")
    tried = largest_fitting(f.config, num_devices, memory, est)
    for name, found, result in tried:
      verdict = ("FITS with " + " ".join(f"--config.{k}={v}" for k, v in found.items())
                 if found else "does not fit")
      print(f"{name}: peak {result.total_bytes / GIB:.2f} of {memory / GIB:.2f} GiB/device "
            f"({result.peak_phase}): {verdict}")
    name, found, result = tried[-1]
    print(f"\nlargest that fits: {name}\n\n{result.table()}" if found else "\nno Qwen3 fits",
          flush=True)
    raise SystemExit(0 if found else 1)
  result = plan(f.config, num_devices, memory, est)
  print(result.table(), flush=True)
  raise SystemExit(1 if result.fits is False else 0)


if __name__ == "__main__":
  from absl import app, flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file("config", None, "Experiment config file[:variant].")
  flags.DEFINE_integer("devices", None, "Plan for a mesh of this many devices (default: here).")
  flags.DEFINE_string("device", None, f"Device kind: one of {sorted(DEVICES)}.")
  flags.DEFINE_float("device_memory_gb", None, "Memory per device in GiB (2**30 bytes).")
  flags.DEFINE_float("mem_fraction", None, "Usable share (GPU default: env or 0.75).")
  flags.DEFINE_float("tokens_per_word", Estimates.tokens_per_word, "Tokens per word of prose.")
  flags.DEFINE_integer("template_tokens", Estimates.template_tokens, "Prompt template tokens.")
  flags.DEFINE_integer("output_tokens", 0, "Public output tokens per player turn (0: max).")
  flags.DEFINE_list("prompt_tokens", [], "Prompt tokens per sampler call by name, e.g. policy=900.")
  flags.DEFINE_bool("largest", False, "Find the largest Qwen3 that fits, with the sampler slice "
                    "and micro-batch it needs, instead of planning the config's model.")
  flags.mark_flag_as_required("config")
  app.run(main)
