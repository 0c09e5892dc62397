"""Every sharding decision in one place: the mesh and the parameter partition rules.

Mesh axes:
  data    pure data parallelism (batch only; weights replicated across it)
  fsdp    batch *and* the non-head dimension of every large weight (ZeRO-3 style)
  tensor  attention heads, MLP hidden units and the vocabulary (Megatron style)

A weight dimension is only sharded over an axis whose size divides it; otherwise
that dimension is replicated (tiny test models, 8 KV heads on tensor=16, ...).
"""
from __future__ import annotations

import re

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from rlsvr.model import hf, qwen3
from rlsvr.model.config import ModelConfig

MESH_AXES = ("data", "fsdp", "tensor")

# Path regex -> logical spec of the parameter's axes, first match wins. Stacked
# layer weights lead with the layer axis, which is never sharded (scan slices it).
_RULES: tuple[tuple[str, tuple[str | None, ...]], ...] = (
    (r"^embed$", ("tensor", "fsdp")),  # [V, D]
    (r"^lm_head$", ("fsdp", "tensor")),  # [D, V]
    (r"attn/[qkv]_proj$", (None, "fsdp", "tensor", None)),  # [L, D, H|K, Dh]
    (r"attn/o_proj$", (None, "tensor", None, "fsdp")),  # [L, H, Dh, D]
    (r"attn/[qkv]_bias$", (None, "tensor", None)),  # [L, H|K, Dh]
    (r"mlp/(gate|up)_proj$", (None, "fsdp", "tensor")),  # [L, D, F]
    (r"mlp/down_proj$", (None, "tensor", "fsdp")),  # [L, F, D]
    (r"mlp/(gate|up)_bias$", (None, "tensor")),  # [L, F]
    (r".*", ()),  # norms, o/down biases: small, replicated
)


def make_mesh(shape: dict[str, int] | None = None, devices=None) -> Mesh:
  """A mesh with axes `MESH_AXES`; missing axes have size 1, -1 takes the rest.

  Axis types are Auto: the model code relies on sharding propagation, with
  explicit constraints only where they matter.
  """
  devices = np.asarray(devices if devices is not None else jax.devices())
  sizes = {a: 1 for a in MESH_AXES}
  sizes.update(shape or {"fsdp": -1})
  unknown = set(sizes) - set(MESH_AXES)
  if unknown:
    raise ValueError(f"unknown mesh axes {sorted(unknown)}; use {MESH_AXES}")
  free = [a for a, n in sizes.items() if n == -1]
  known = int(np.prod([n for n in sizes.values() if n != -1]))
  if len(free) > 1 or (free and devices.size % known):
    raise ValueError(f"mesh {sizes} does not fit {devices.size} devices")
  for a in free:
    sizes[a] = devices.size // known
  dims = tuple(sizes[a] for a in MESH_AXES)
  if int(np.prod(dims)) > devices.size:
    raise ValueError(f"mesh {sizes} needs {np.prod(dims)} devices, {devices.size} available")
  # A fully specified smaller mesh takes the first devices (e.g. a 1-device CPU run).
  devices = devices.reshape(-1)[:int(np.prod(dims))]
  return Mesh(devices.reshape(dims), MESH_AXES,
              axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh) -> P:
  """The PartitionSpec of the parameter at `path` ("layers/attn/q_proj") on `mesh`."""
  for pattern, logical in _RULES:
    if re.search(pattern, path):
      break
  axes = [a if a is not None and mesh.shape[a] > 1 and dim % mesh.shape[a] == 0 else None
          for a, dim in zip(logical, shape)]
  return P(*axes, *([None] * (len(shape) - len(axes))))


def param_shardings(config: ModelConfig, mesh: Mesh, dtype=None) -> dict[str, NamedSharding]:
  """Flat {"a/b/c": NamedSharding} for every parameter of `config`."""
  abstract = qwen3.abstract_params(config) if dtype is None else qwen3.abstract_params(config,
                                                                                       dtype)
  return {path: NamedSharding(mesh, spec_for(path, leaf.shape, mesh))
          for path, leaf in hf.flatten(abstract).items()}


def shard_params(params, mesh: Mesh):
  """Places a params tree on `mesh` by the rules above."""
  return hf.unflatten({
      path: jax.device_put(x, NamedSharding(mesh, spec_for(path, x.shape, mesh)))
      for path, x in hf.flatten(params).items()})
