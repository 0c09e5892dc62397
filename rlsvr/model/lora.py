"""LoRA adapters on the decoder's projections (Hu et al. 2021, as PEFT implements them).

  lora = LoraConfig(rank=16, alpha=32, targets=("q", "v"))
  adapters = init_adapters(model_config, lora, key)        # {"layers": {"attn": {"q_lora_a": ..}}}
  weights = attach(model_config, lora, base, adapters[, dropout_key])  # what `qwen3.forward` reads
  merged = merge(model_config, lora, base, adapters, dtype)  # W + alpha/r * A @ B, for sampling
  save_peft_adapter(dir, model_config, lora, adapters, base_model_name)

A target projection W (ours [L, in..., out...]) gets A [L, in..., r] and B [L, r, out...];
`layer` adds (x @ A) @ B, with B scaled by alpha/r (0 in layers the adapter leaves out), to
x @ W. A is PEFT's default init (kaiming-uniform with a=sqrt(5): U(-1/sqrt(in), 1/sqrt(in)))
and B is zero, so a fresh adapter leaves the model exactly as it was. With `dropout` p > 0
and a key, each adapter's input is dropped as PEFT's `lora_dropout` drops it (zero with
probability p, else scaled by 1 / (1 - p); the base's matmul sees x unchanged), with its own
mask per projection and layer. The adapters' paths,
"layers/attn/q_lora_a" and so on, are in `rlsvr.model.params.ADAPTERS`, which shards them:
A as its weight's input dims, B as its output dims, the rank never.

Training differentiates the adapters only: the base stays frozen in the compute dtype, and is
the KL reference too (adapters off), so no second copy of the weights exists
(`rlsvr.rl.train_step`). qwix, the JAX LoRA library tunix uses, intercepts the matmuls of Flax
modules; this model is pure functions over a dict of arrays, so the adapters are plain
leaves of that dict instead.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlsvr.model import params as params_lib
from rlsvr.model.config import ModelConfig

Params = dict[str, Any]

# Target names (PEFT's module names without "_proj") -> the weight they adapt.
TARGETS = {"q": "layers/attn/q_proj", "k": "layers/attn/k_proj", "v": "layers/attn/v_proj",
           "o": "layers/attn/o_proj", "gate": "layers/mlp/gate_proj",
           "up": "layers/mlp/up_proj", "down": "layers/mlp/down_proj"}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """rank r, alpha (the update is scaled by alpha / r), the adapted projections (PEFT's
  default for Qwen and Llama: q and v), the layers that get adapters (empty: all) and the
  dropout rate of the adapters' input in training."""

  rank: int
  alpha: float
  targets: tuple[str, ...] = ("q", "v")
  layers: tuple[int, ...] = ()
  dropout: float = 0.0

  def __post_init__(self):
    if self.rank < 1:
      raise ValueError(f"LoRA rank={self.rank} must be >= 1")
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"LoRA dropout={self.dropout} must be in [0, 1)")
    unknown = sorted(set(self.targets) - set(TARGETS))
    if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
      raise ValueError(f"LoRA targets={self.targets!r}: name each once, from {sorted(TARGETS)}")
    if len(set(self.layers)) != len(self.layers):
      raise ValueError(f"LoRA layers={self.layers!r} repeat a layer")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank

  def check(self, config: ModelConfig) -> None:
    bad = [i for i in self.layers if not 0 <= i < config.num_layers]
    if bad:
      raise ValueError(f"LoRA layers {bad} are not layers of a {config.num_layers}-layer model")

  def layer_scales(self, config: ModelConfig) -> np.ndarray:
    """[L] float32: alpha / r in adapted layers, 0 in the others."""
    on = np.zeros(config.num_layers, bool)
    on[list(self.layers) if self.layers else slice(None)] = True
    return np.where(on, self.scale, 0.0).astype(np.float32)

  def paths(self) -> list[str]:
    """The adapters' paths, A then B of each target, in `TARGETS` order."""
    return [p.path for t, w in TARGETS.items() if t in self.targets
            for p in params_lib.adapter_params(w)]


def init_adapters(config: ModelConfig, lora: LoraConfig, key: jax.Array,
                  dtype=jnp.float32) -> Params:
  """Fresh adapters: A kaiming-uniform as PEFT draws it (bound 1/sqrt(fan_in)), B zero.
  The i-th target (TARGETS order) draws from `fold_in(key, i)`."""
  flat = {}
  for i, (target, weight) in enumerate(TARGETS.items()):
    if target not in lora.targets:
      continue
    a, b = params_lib.adapter_params(weight)
    a_shape = params_lib.adapter_shape(a, config, lora.rank)
    bound = 1.0 / math.sqrt(math.prod(a_shape[1:-1]))
    flat[a.path] = jax.random.uniform(jax.random.fold_in(key, i), a_shape, dtype, -bound, bound)
    flat[b.path] = jnp.zeros(params_lib.adapter_shape(b, config, lora.rank), dtype)
  return params_lib.unflatten(flat)


def _scaled_b(config: ModelConfig, lora: LoraConfig, b):
  scales = jnp.asarray(lora.layer_scales(config), b.dtype)
  return b * scales.reshape(-1, *([1] * (b.ndim - 1)))


def attach(config: ModelConfig, lora: LoraConfig, base: Params, adapters: Params,
           dropout_key: jax.Array | None = None) -> Params:
  """The weights the forward reads: `base` with each layer's adapters beside its weights,
  B already scaled (differentiable in `adapters`; `base` is left as it is). With a
  `dropout_key` and `lora.dropout` > 0, each layer's part also gets its key and keep
  rate (`dropout` reads them)."""
  flat = params_lib.flatten(base)
  for path, x in params_lib.flatten(adapters).items():
    flat[path] = _scaled_b(config, lora, x) if path.endswith("_lora_b") else x
  if lora.dropout and dropout_key is not None:
    keys_L = jax.random.split(dropout_key, config.num_layers)
    keep_L = jnp.full((config.num_layers,), 1.0 - lora.dropout, jnp.float32)
    for part in {path.rsplit("/", 1)[0] for path in params_lib.flatten(adapters)}:
      flat[f"{part}/lora_dropout_key"], flat[f"{part}/lora_keep"] = keys_L, keep_L
  return params_lib.unflatten(flat)


def dropout(x, part: Params, name: str):
  """The input of projection `name`'s adapter in one layer's `part` (attn or mlp, as
  `attach` left it): zero with probability 1 - keep, else x / keep."""
  keep = part["lora_keep"]
  key = jax.random.fold_in(part["lora_dropout_key"], list(TARGETS).index(name))
  return jnp.where(jax.random.bernoulli(key, keep, x.shape), x / keep.astype(x.dtype),
                   jnp.zeros((), x.dtype))


def _delta(config: ModelConfig, lora: LoraConfig, a, b):
  """alpha/r * A @ B per layer, in float32, shaped like the adapted weight."""
  a32, b32 = a.astype(jnp.float32), _scaled_b(config, lora, b.astype(jnp.float32))
  layers, rank = a.shape[0], a.shape[-1]
  d = jnp.matmul(a32.reshape(layers, -1, rank), b32.reshape(layers, rank, -1),
                 precision=jax.lax.Precision.HIGHEST)
  return d.reshape(*a.shape[:-1], *b.shape[2:])


def merge(config: ModelConfig, lora: LoraConfig, base: Params, adapters: Params,
          dtype=None) -> Params:
  """Plain weights with the adapters folded in: W + alpha/r * A @ B, summed in float32
  and cast to `dtype` (default: the base's). What the sampler and an HF export read."""
  flat, adapter_flat = params_lib.flatten(base), params_lib.flatten(adapters)
  out = {}
  for path, w in flat.items():
    dtype_out = dtype or w.dtype
    prefix = path[:-len("_proj")] if path.endswith("_proj") else None
    if prefix is not None and f"{prefix}_lora_a" in adapter_flat:
      delta = _delta(config, lora, adapter_flat[f"{prefix}_lora_a"],
                     adapter_flat[f"{prefix}_lora_b"])
      out[path] = (w.astype(jnp.float32) + delta).astype(dtype_out)
    else:
      out[path] = w.astype(dtype_out)
  return params_lib.unflatten(out)


# `merge` compiled once per (config, lora, dtype): the sampler's weights each step, exports.
merge_jit = jax.jit(merge, static_argnums=(0, 1, 4))


# ----------------------------------------------------------------------- PEFT export


def peft_tensors(config: ModelConfig, lora: LoraConfig, adapters: Params):
  """(PEFT name, numpy array in HF's [out, in] layout) of every adapted layer."""
  flat = {path: np.asarray(jax.device_get(x), np.float32)
          for path, x in params_lib.flatten(adapters).items()}
  layers = lora.layers or tuple(range(config.num_layers))
  for i in sorted(layers):
    for path, x in flat.items():
      param = params_lib.ADAPTERS[path]
      w = x[i]
      w = np.ascontiguousarray(w.reshape(math.prod(w.shape[:param.n_in]), -1).T)
      yield f"base_model.model.model.layers.{i}.{param.hf}", w


def peft_config(lora: LoraConfig, base_model_name: str) -> dict[str, Any]:
  """PEFT's adapter_config.json for these adapters."""
  return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
          "lora_alpha": lora.alpha, "lora_dropout": lora.dropout, "bias": "none",
          "target_modules": sorted(f"{t}_proj" for t in lora.targets),
          "layers_to_transform": sorted(lora.layers) or None, "fan_in_fan_out": False,
          "use_rslora": False, "use_dora": False, "init_lora_weights": True,
          "base_model_name_or_path": base_model_name, "inference_mode": True}


def save_peft_adapter(path: str | os.PathLike, config: ModelConfig, lora: LoraConfig,
                      adapters: Params, base_model_name: str = "") -> pathlib.Path:
  """Writes a PEFT adapter directory (adapter_config.json, adapter_model.safetensors)
  that `peft.PeftModel.from_pretrained(base, path)` loads; renamed into place when done."""
  from rlsvr.model import hf  # noqa: PLC0415

  path = pathlib.Path(path)
  tmp = path.with_name(path.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  hf.write_safetensors(tmp / "adapter_model.safetensors",
                       list(peft_tensors(config, lora, adapters)))
  (tmp / "adapter_config.json").write_text(json.dumps(peft_config(lora, base_model_name),
                                                      indent=2))
  if path.exists():
    shutil.rmtree(path)
  tmp.rename(path)
  return path


def from_config(c) -> LoraConfig | None:
  """The LoraConfig of a run's `model.lora` ConfigDict (None when rank is 0)."""
  if c is None or not c.rank:
    return None
  targets = tuple(TARGETS) if c.targets.strip() == "all" else tuple(
      t.strip() for t in c.targets.split(",") if t.strip())
  try:
    layers = tuple(int(i) for i in str(c.layers).split(",") if i.strip())
  except ValueError:
    raise ValueError(f"LoRA layers={c.layers!r}: comma-separated layer indices") from None
  return LoraConfig(rank=int(c.rank), alpha=float(c.alpha), targets=targets, layers=layers,
                    dropout=float(c.get("dropout", 0.0)))


def to_dict(lora: LoraConfig | None) -> dict[str, Any] | None:
  """JSON form (checkpoint metadata); `from_dict` reads it back."""
  return None if lora is None else {**dataclasses.asdict(lora), "targets": list(lora.targets),
                                    "layers": list(lora.layers)}


def from_dict(d: dict[str, Any] | None) -> LoraConfig | None:
  return None if not d else LoraConfig(rank=int(d["rank"]), alpha=float(d["alpha"]),
                                       targets=tuple(d["targets"]), layers=tuple(d["layers"]),
                                       dropout=float(d.get("dropout", 0.0)))
