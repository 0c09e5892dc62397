"""Hugging Face weights <-> our params: safetensors load and save.

`load_pretrained` reads an HF directory (config.json and one or many
safetensors files with `model.safetensors.index.json`); `save_pretrained`
writes one that `transformers.AutoModelForCausalLM.from_pretrained` loads with
identical logits. Both directions read the names and layouts of
`rlsvr.model.params.TABLE`.

Safetensors files are memory-mapped and each parameter is assembled by
`jax.make_array_from_callback` from only the slices its device shards need, so
loading never holds a full host copy of the model: peak host memory stays near
one stacked parameter.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
from typing import Any, Iterator, Mapping

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from rlsvr.model import params as params_lib
from rlsvr.model.params import flatten, unflatten
from rlsvr.model.config import ModelConfig

# HF names that carry no weights of ours (buffers some exporters save).
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _hf_names(param: params_lib.Param, config: ModelConfig) -> list[str]:
  if param.per_layer:
    return [f"model.layers.{i}.{param.hf}" for i in range(config.num_layers)]
  return [param.hf]


def _to_ours(w: np.ndarray, n_in: int | None, shape: tuple[int, ...]) -> np.ndarray:
  return (w if n_in is None else w.T).reshape(shape)


# --------------------------------------------------------------------- safetensors

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
           "F64": np.float64}
_DTYPE_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def _read_header(path: pathlib.Path) -> tuple[dict[str, Any], int]:
  with open(path, "rb") as f:
    size_bytes = f.read(8)
    if len(size_bytes) != 8:
      raise ValueError(f"{path}: truncated safetensors file (no header)")
    n = int.from_bytes(size_bytes, "little")
    if n > 100 * 2**20 or n + 8 > path.stat().st_size:
      raise ValueError(f"{path}: corrupt safetensors header (length {n})")
    try:
      header = json.loads(f.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ValueError(f"{path}: corrupt safetensors header: {e}") from None
  return header, 8 + n


class SafetensorsReader(Mapping[str, np.ndarray]):
  """Read-only memory-mapped view of the tensors of one or more safetensors files."""

  def __init__(self, files: list[pathlib.Path]):
    self._entries: dict[str, tuple[pathlib.Path, dict[str, Any], int]] = {}
    self._maps: dict[pathlib.Path, np.memmap] = {}
    for path in files:
      header, offset = _read_header(path)
      header.pop("__metadata__", None)
      for name, info in header.items():
        if info["dtype"] not in _DTYPES:
          raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        self._entries[name] = (path, info, offset)

  def __getitem__(self, name: str) -> np.ndarray:
    path, info, offset = self._entries[name]
    if path not in self._maps:
      self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
    begin, end = info["data_offsets"]
    dtype = np.dtype(_DTYPES[info["dtype"]])
    shape = tuple(info["shape"])
    if end - begin != math.prod(shape) * dtype.itemsize or offset + end > self._maps[path].size:
      raise ValueError(f"{path}: tensor {name} is truncated or its header is corrupt")
    return self._maps[path][offset + begin:offset + end].view(dtype).reshape(shape)

  def __iter__(self) -> Iterator[str]:
    return iter(self._entries)

  def __len__(self) -> int:
    return len(self._entries)


def write_safetensors(path: pathlib.Path, tensors: list[tuple[str, np.ndarray]]) -> None:
  header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
  offset = 0
  for name, w in tensors:
    header[name] = {"dtype": _DTYPE_NAMES[w.dtype], "shape": list(w.shape),
                    "data_offsets": [offset, offset + w.nbytes]}
    offset += w.nbytes
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * (-len(raw) % 8)  # The spec aligns tensor data to 8 bytes.
  with open(path, "wb") as f:
    f.write(len(raw).to_bytes(8, "little"))
    f.write(raw)
    for _, w in tensors:
      f.write(np.ascontiguousarray(w).tobytes())


def safetensors_files(path: pathlib.Path) -> list[pathlib.Path]:
  """The weight files of an HF directory, via the index when there is one."""
  index = path / "model.safetensors.index.json"
  if index.is_file():
    weight_map = json.loads(index.read_text())["weight_map"]
    files = [path / f for f in sorted(set(weight_map.values()))]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
      raise FileNotFoundError(f"{index} names missing files: {missing}")
    return files
  single = path / "model.safetensors"
  if single.is_file():
    return [single]
  raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {path}")


# ---------------------------------------------------------------------------- load


def params_from_tensors(config: ModelConfig, tensors: Mapping[str, np.ndarray], dtype=jnp.float32,
                        shardings: Mapping[str, jax.sharding.Sharding] | None = None):
  """Our params from HF-named tensors (a safetensors reader or a torch state dict as numpy).

  `shardings` maps our "a/b/c" paths to shardings (default: the first device).
  Each device receives only its slice, read straight from `tensors`.
  """
  dtype = np.dtype(dtype)
  names = set(tensors)
  used: set[str] = set()
  out: dict[str, jax.Array] = {}
  for path, param in params_lib.present(config).items():
    shape = params_lib.shape_of(param, config)
    sharding = (shardings or {}).get(path) or jax.sharding.SingleDeviceSharding(jax.devices()[0])
    hf_names = _hf_names(param, config)
    if param.per_layer:
      def read(idx, hf_names=hf_names, n_in=param.n_in, shape=shape):
        layers = range(config.num_layers)[idx[0]]
        return np.stack([_to_ours(np.asarray(tensors[hf_names[i]]), n_in, shape[1:])[idx[1:]]
                         for i in layers])
    else:
      def read(idx, name=param.hf, n_in=param.n_in, shape=shape):
        return _to_ours(np.asarray(tensors[name]), n_in, shape)[idx]
    missing = [n for n in hf_names if n not in names]
    if missing:
      raise KeyError(f"checkpoint lacks {missing[:3]}{'...' if len(missing) > 3 else ''} "
                     f"needed for {path} ({config.model_type})")
    used.update(hf_names)
    out[path] = jax.make_array_from_callback(
        shape, sharding, lambda idx, read=read: read(idx).astype(dtype))
  unexpected = sorted(n for n in names - used
                      if not n.endswith(_IGNORED_SUFFIXES)
                      and not (n == "lm_head.weight" and config.tie_word_embeddings))
  if unexpected:
    raise KeyError(f"checkpoint has weights this config does not use: {unexpected[:5]} "
                   f"(is config.json right about biases / QK-norm / tied embeddings?)")
  return unflatten(out)


def load_pretrained(path: str | os.PathLike, dtype=jnp.float32, mesh=None):
  """Reads an HF Qwen3 / Qwen2 / Llama directory. Returns (config, params).

  With a `mesh`, each parameter is placed on it by `rlsvr.model.params.spec_for`,
  every device reading only its shard.
  """
  path = pathlib.Path(path)
  config = ModelConfig.from_hf_dir(path)
  shardings = params_lib.param_shardings(config, mesh) if mesh is not None else None
  reader = SafetensorsReader(safetensors_files(path))
  return config, params_from_tensors(config, reader, dtype, shardings)


# ---------------------------------------------------------------------------- save


def hf_tensors(config: ModelConfig, params, dtype=None) -> Iterator[tuple[str, np.ndarray]]:
  """(HF name, numpy array) pairs, one layer at a time to bound host memory."""
  flat = flatten(params)

  def host(x):
    x = np.asarray(jax.device_get(x))
    return x.astype(dtype) if dtype is not None else x

  present = params_lib.present(config)
  for path, param in present.items():
    if not param.per_layer:
      yield param.hf, _hf_layout(host(flat[path]), param)
  for i in range(config.num_layers):
    for path, param in present.items():
      if param.per_layer:
        yield f"model.layers.{i}.{param.hf}", _hf_layout(host(flat[path][i]), param)


def _hf_layout(w: np.ndarray, param: params_lib.Param) -> np.ndarray:
  if param.n_in is None:  # HF keeps the embedding table 2-D and every norm scale and bias 1-D.
    return w if param.path == "embed" else w.reshape(-1)
  return np.ascontiguousarray(w.reshape(math.prod(w.shape[:param.n_in]), -1).T)


def save_pretrained(path: str | os.PathLike, config: ModelConfig, params, tokenizer=None, *,
                    dtype=None, max_shard_bytes: int = 4 * 2**30) -> pathlib.Path:
  """Writes an HF directory that transformers loads with identical logits.

  Weights above `max_shard_bytes` are split over several files with an index.
  The directory is written next to `path` and renamed into place, so a crash
  never leaves a half-written model where a finished one is expected.
  """
  path = pathlib.Path(path)
  tmp = path.with_name(path.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  np_dtype = np.dtype(dtype) if dtype is not None else None
  shards: list[list[tuple[str, np.ndarray]]] = [[]]
  shard_bytes = 0
  files: list[pathlib.Path] = []
  weight_map: dict[str, int] = {}
  total = 0

  def flush():
    files.append(tmp / f"shard-{len(files)}.tmp")
    write_safetensors(files[-1], shards[-1])
    shards[-1] = []

  for name, w in hf_tensors(config, params, np_dtype):
    if shards[-1] and shard_bytes + w.nbytes > max_shard_bytes:
      flush()
      shard_bytes = 0
    shards[-1].append((name, w))
    weight_map[name] = len(files)
    shard_bytes += w.nbytes
    total += w.nbytes
    out_dtype = w.dtype
  flush()

  if len(files) == 1:
    files[0].rename(tmp / "model.safetensors")
  else:
    names = [f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i in range(len(files))]
    for f, n in zip(files, names):
      f.rename(tmp / n)
    index = {"metadata": {"total_size": total},
             "weight_map": {k: names[v] for k, v in weight_map.items()}}
    (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

  dtype_name = {np.dtype(np.float32): "float32", np.dtype(ml_dtypes.bfloat16): "bfloat16",
                np.dtype(np.float16): "float16"}.get(np.dtype(out_dtype), "float32")
  (tmp / "config.json").write_text(json.dumps(config.to_hf_dict(dtype_name), indent=2))
  generation = {k: v for k, v in {
      "bos_token_id": config.bos_token_id,
      "eos_token_id": list(config.eos_token_id) if isinstance(config.eos_token_id, tuple)
                      else config.eos_token_id,
      "pad_token_id": config.pad_token_id}.items() if v is not None}
  (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
  if tokenizer is not None:
    tokenizer.save_pretrained(str(tmp))
  if path.exists():
    shutil.rmtree(path)
  tmp.rename(path)
  return path
