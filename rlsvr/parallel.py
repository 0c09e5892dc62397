"""Processes, the mesh, and placing batches and parameters on it.

Mesh axes:
  data    pure data parallelism (batch only; weights replicated across it)
  fsdp    batch *and* the non-head dimension of every large weight (ZeRO-3 style)
  tensor  attention heads, MLP hidden units and the vocabulary (Megatron style)

Which dimension of which weight splits over which axis is the parameter table's
rule (`rlsvr.model.params.spec_for`, which `load_pretrained` needs too).

Multi-host (`initialize_distributed`): JAX's multi-controller runtime. Every
process runs the same program on the same host data (the game logic is
deterministic given the seed and the sampled tokens, which every process
fetches whole with `to_host`); each process feeds only the shards of the batch
that live on its own devices, writes its own checkpoint shards, and process 0
alone writes logs and rollouts.
"""
from __future__ import annotations

import os

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from rlsvr.model.params import flatten, spec_for, unflatten

MESH_AXES = ("data", "fsdp", "tensor")


# Environment variables that say "this is one process of several" for the cluster
# types `jax.distributed.initialize()` detects by itself.
_CLUSTER_SIZE_VARS = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "JAX_NUM_PROCESSES")


def _in_multiprocess_cluster() -> bool:
  if os.environ.get("JAX_COORDINATOR_ADDRESS") or os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
    return True
  if "," in os.environ.get("TPU_WORKER_HOSTNAMES", os.environ.get("TPU_PROCESS_ADDRESSES", "")):
    return True
  return any(int(os.environ.get(v, "1") or 1) > 1 for v in _CLUSTER_SIZE_VARS)


def initialize_distributed(mode: str = "auto", coordinator_address: str = "",
                           num_processes: int = 0, process_id: int = -1) -> bool:
  """Starts the multi-controller runtime when this is one process of several.

  mode "off" never starts it; "on" always does; "auto" does when the
  environment says so (SLURM with several tasks, Open MPI, a multi-host TPU
  slice, JAX_COORDINATOR_ADDRESS). Empty/0/-1 arguments are left to JAX's
  cluster detection. Must run before anything touches a device; a second call
  is a no-op. Returns whether this is a multi-process run.
  """
  if mode not in ("auto", "on", "off"):
    raise ValueError(f"distributed.mode={mode!r} is not one of auto/on/off")
  if jax.distributed.is_initialized():
    return jax.process_count() > 1
  if mode == "off" or (mode == "auto" and not coordinator_address
                       and not _in_multiprocess_cluster()):
    return False
  # CPU processes need a collectives backend to talk to each other (GPUs use NCCL).
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address or None,
                             num_processes=num_processes or None,
                             process_id=None if process_id < 0 else process_id)
  return jax.process_count() > 1


def is_lead_process() -> bool:
  """Process 0: the one that writes logs, rollouts and plots."""
  return jax.process_index() == 0


def to_host(tree):
  """Whole numpy copies of (possibly multi-process sharded) arrays, on every process."""
  def fetch(x):
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
      return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return jax.tree.map(fetch, tree)


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


BATCH_AXES = ("data", "fsdp")  # Rows of every batch (sampler prompts, train step) split here.


def batch_spec(mesh: Mesh, rows: int) -> P:
  """Rows over data x fsdp when they divide evenly; replicated otherwise."""
  axes = tuple(a for a in BATCH_AXES if mesh.shape[a] > 1)
  size = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
  return P(axes) if axes and rows % size == 0 else P()


# Rows of a sampler call from which CPU weights on one device are copied to every host
# device for it, each decoding its share of the rows (`host_split_mesh`). Fewer rows: each
# device reading every weight costs more than the second core gains; from 32 rows on the
# split wins (one device against data=2: `bench/sampler.py`).
HOST_SPLIT_MIN_ROWS = 32


def host_split_mesh(params, rows: int) -> Mesh | None:
  """The mesh a sampler call of `rows` rows should run on instead of the params' one
  device: on CPU, with `rows >= HOST_SPLIT_MIN_ROWS` and more host devices in this
  process (`runtime.set_host_devices`: one per core), a data mesh of one device per core.
  A decode step's matmuls are too small for XLA:CPU to keep both cores busy on one device.
  None for accelerators, meshes, several processes and small calls."""
  from rlsvr import runtime  # noqa: PLC0415

  leaf = jax.tree.leaves(params)[0]
  if (rows < HOST_SPLIT_MIN_ROWS or len(leaf.devices()) != 1 or jax.process_count() > 1
      or next(iter(leaf.devices())).platform != "cpu"):
    return None
  count = min(runtime.cpu_cores(), jax.local_device_count())
  return make_mesh({"data": count}, jax.local_devices()[:count]) if count > 1 else None


def replicate(tree, mesh: Mesh):
  """Every array of `tree` whole on every device of `mesh`. The copy on an array's own
  device may be that array's buffer, so use the result only while `tree` lives (the
  sampler keeps it only that long)."""
  return jax.device_put(tree, NamedSharding(mesh, P()))


def put_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """A host batch (identical on every process) as global arrays split by rows.

  Each process copies only the rows of its own devices.
  """
  def put(x):
    x = np.asarray(x)
    sharding = NamedSharding(mesh, batch_spec(mesh, x.shape[0]))
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])
  return {k: put(v) for k, v in batch.items()}


def _param_path(path) -> str:
  # Optimizer moments nest the params' dict under their own tuple/attribute keys.
  return "/".join(str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey))


def constrain_params(tree, mesh: Mesh):
  """Inside jit: pins every params-shaped leaf of `tree` (params, Adam moments, reference
  copy) to the rules. Without it XLA is free to hand back, say, norm scales split over
  fsdp, and the next step would then compile again for the new input layout."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: jax.lax.with_sharding_constraint(
          x, NamedSharding(mesh, spec_for(_param_path(path), x.shape, mesh))), tree)


def mesh_of(tree) -> Mesh | None:
  """The mesh the arrays of `tree` live on, or None for single-device arrays."""
  for x in jax.tree.leaves(tree):
    if isinstance(getattr(x, "sharding", None), NamedSharding):
      return x.sharding.mesh
  return None


def param_shardings_of(tree, mesh: Mesh):
  """The NamedSharding of every leaf of a params tree (arrays or shapes) on `mesh`."""
  return unflatten({path: NamedSharding(mesh, spec_for(path, x.shape, mesh))
                    for path, x in flatten(tree).items()})


def shard_params(params, mesh: Mesh):
  """Places a params tree on `mesh` by the parameter table's rule."""
  return unflatten({
      path: jax.device_put(x, NamedSharding(mesh, spec_for(path, x.shape, mesh)))
      for path, x in flatten(params).items()})
