"""Every weight of the decoder in one table: its path, shape, HF name and partitioning.

  present(config) -> {path: Param}        # the weights `config` has, in table order
  shape_of(param, config) -> tuple[int, ...]
  spec_for(path, shape, mesh) -> PartitionSpec
  param_shardings(config, mesh) -> {path: NamedSharding}
  flatten(tree) / unflatten(flat)          # nested params dict <-> {"a/b/c": leaf}

Our params are a nested dict whose "a/b/c" paths are the table's; per-layer
weights are stacked on a leading layer axis L. `qwen3` builds its random init
from the table, `hf` maps the names and layouts to transformers' in both
directions, `decode` relays the matrices out-major by `n_in`, and the mesh
placement of every weight follows from its dims:

  tensor  splits heads (H, K), MLP hidden units (F) and the vocabulary (V): Megatron
  fsdp    splits the model dimension D of every matrix (ZeRO-3); vectors (norm
          scales, biases) are small and never split over it
  none    the layer axis L (the forward scans it), head_dim Dh and a LoRA rank R

A dimension is only split over a mesh axis whose size divides it; otherwise it
is replicated (tiny test models, 8 KV heads on tensor=16, ...).
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from rlsvr.model.config import ModelConfig


class Param(NamedTuple):
  """One weight. `hf` is transformers' name, after "model.layers.{i}." for layer weights.

  HF Linear weights are [out, in]; ours are [in..., out...] with the first `n_in`
  axes (after L) forming HF's `in`. `n_in=None`: the same values, only reshaped
  (embeddings, norm scales, biases). `when`: the config switch the weight needs.
  """

  path: str
  dims: tuple[str, ...]
  hf: str
  n_in: int | None = None
  when: str = ""

  @property
  def per_layer(self) -> bool:
    return self.dims[0] == "L"


def _p(path: str, dims: str, hf: str, n_in: int | None = None, when: str = "") -> Param:
  return Param(path, tuple(dims.split()), hf, n_in, when)


TABLE: tuple[Param, ...] = (
    _p("embed", "V D", "model.embed_tokens.weight"),
    _p("layers/input_norm/scale", "L D", "input_layernorm.weight"),
    _p("layers/attn/q_proj", "L D H Dh", "self_attn.q_proj.weight", 1),
    _p("layers/attn/k_proj", "L D K Dh", "self_attn.k_proj.weight", 1),
    _p("layers/attn/v_proj", "L D K Dh", "self_attn.v_proj.weight", 1),
    _p("layers/attn/o_proj", "L H Dh D", "self_attn.o_proj.weight", 2),
    _p("layers/attn/q_bias", "L H Dh", "self_attn.q_proj.bias", when="qkv_bias"),
    _p("layers/attn/k_bias", "L K Dh", "self_attn.k_proj.bias", when="qkv_bias"),
    _p("layers/attn/v_bias", "L K Dh", "self_attn.v_proj.bias", when="qkv_bias"),
    _p("layers/attn/o_bias", "L D", "self_attn.o_proj.bias", when="o_bias"),
    _p("layers/attn/q_norm/scale", "L Dh", "self_attn.q_norm.weight", when="qk_norm"),
    _p("layers/attn/k_norm/scale", "L Dh", "self_attn.k_norm.weight", when="qk_norm"),
    _p("layers/post_attn_norm/scale", "L D", "post_attention_layernorm.weight"),
    _p("layers/mlp/gate_proj", "L D F", "mlp.gate_proj.weight", 1),
    _p("layers/mlp/up_proj", "L D F", "mlp.up_proj.weight", 1),
    _p("layers/mlp/down_proj", "L F D", "mlp.down_proj.weight", 1),
    _p("layers/mlp/gate_bias", "L F", "mlp.gate_proj.bias", when="mlp_bias"),
    _p("layers/mlp/up_bias", "L F", "mlp.up_proj.bias", when="mlp_bias"),
    _p("layers/mlp/down_bias", "L D", "mlp.down_proj.bias", when="mlp_bias"),
    _p("final_norm/scale", "D", "model.norm.weight"),
    _p("lm_head", "D V", "lm_head.weight", 1, when="untied"),
)
BY_PATH: dict[str, Param] = {p.path: p for p in TABLE}


def adapter_params(weight_path: str) -> tuple[Param, Param]:
  """LoRA's A and B of the matrix at `weight_path` (`rlsvr.model.lora`): A takes the
  weight's input dims to the rank R, B the rank to its output dims; `hf` is PEFT's name."""
  w = BY_PATH[weight_path]
  split = 1 + w.n_in
  prefix, module = w.path[:-len("_proj")], w.hf[:-len(".weight")]
  return (Param(f"{prefix}_lora_a", (*w.dims[:split], "R"), f"{module}.lora_A.weight", w.n_in),
          Param(f"{prefix}_lora_b", ("L", "R", *w.dims[split:]), f"{module}.lora_B.weight", 1))


# Every adapter a LoRA run may train, by path.
ADAPTERS: dict[str, Param] = {a.path: a for p in TABLE if p.per_layer and p.n_in
                              for a in adapter_params(p.path)}

_TENSOR_DIMS = ("H", "K", "F", "V")


def _has(config: ModelConfig, when: str) -> bool:
  if when == "untied":
    return not config.tie_word_embeddings
  return not when or getattr(config, when)


def present(config: ModelConfig) -> dict[str, Param]:
  """The weights of `config` by path, in table order."""
  return {p.path: p for p in TABLE if _has(config, p.when)}


def shape_of(param: Param, config: ModelConfig) -> tuple[int, ...]:
  return adapter_shape(param, config, 0)


def adapter_shape(param: Param, config: ModelConfig, rank: int) -> tuple[int, ...]:
  """`shape_of`, where the LoRA rank R is `rank`."""
  sizes = {"L": config.num_layers, "D": config.hidden_size, "H": config.num_heads,
           "K": config.num_kv_heads, "Dh": config.head_dim, "F": config.intermediate_size,
           "V": config.vocab_size, "R": rank}
  return tuple(sizes[d] for d in param.dims)


def _mesh_axes(param: Param) -> tuple[str | None, ...]:
  """The mesh axis each of the weight's dims is split over (the module docstring's rule)."""
  matrix = len([d for d in param.dims if d != "L"]) > 1
  return tuple("tensor" if d in _TENSOR_DIMS else "fsdp" if d == "D" and matrix else None
               for d in param.dims)


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh) -> P:
  """The PartitionSpec of the weight at `path` ("layers/attn/q_proj") on `mesh`.

  LoRA adapters follow their weight's dims; leaves the table does not name (an
  optimizer's step count) are replicated.
  """
  param = BY_PATH.get(path) or ADAPTERS.get(path)
  logical = _mesh_axes(param) if param else ()
  axes = [a if a is not None and mesh.shape[a] > 1 and dim % mesh.shape[a] == 0 else None
          for a, dim in zip(logical, shape)]
  return P(*axes, *([None] * (len(shape) - len(axes))))


def param_shardings(config: ModelConfig, mesh: Mesh) -> dict[str, NamedSharding]:
  """Flat {"a/b/c": NamedSharding} for every weight of `config`."""
  return {path: NamedSharding(mesh, spec_for(path, shape_of(p, config), mesh))
          for path, p in present(config).items()}


def flatten(tree) -> dict[str, Any]:
  """{"layers/attn/q_proj": leaf, ...}: a params tree by the table's paths."""
  return {"/".join(str(k.key) for k in path): leaf
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
  tree: dict[str, Any] = {}
  for path, value in flat.items():
    node = tree
    *parents, last = path.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[last] = value
  return tree
