"""Mesh construction and partition rules."""
import pytest
from jax.sharding import PartitionSpec as P

from rlsvr import parallel
from rlsvr.model.config import preset


def test_mesh_shapes():
  assert dict(parallel.make_mesh().shape) == {"data": 1, "fsdp": 8, "tensor": 1}
  assert dict(parallel.make_mesh({"data": 2, "tensor": -1}).shape) == {"data": 2, "fsdp": 1,
                                                                        "tensor": 4}
  assert parallel.make_mesh({"fsdp": 1}).size == 1  # a smaller mesh takes the first devices
  with pytest.raises(ValueError, match="needs 16"):
    parallel.make_mesh({"fsdp": 16})
  with pytest.raises(ValueError, match="unknown mesh axes"):
    parallel.make_mesh({"model": 2})


def test_rules_cover_every_qwen3_8b_parameter():
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  shardings = parallel.param_shardings(preset("qwen3-8b"), mesh)
  assert shardings["layers/attn/q_proj"].spec == P(None, "fsdp", "tensor", None)
  assert shardings["layers/attn/o_proj"].spec == P(None, "tensor", None, "fsdp")
  assert shardings["layers/mlp/down_proj"].spec == P(None, "tensor", "fsdp")
  assert shardings["embed"].spec == P("tensor", "fsdp")
  assert shardings["lm_head"].spec == P("fsdp", "tensor")
  assert shardings["layers/input_norm/scale"].spec == P(None, None)


def test_indivisible_dimensions_are_replicated():
  mesh = parallel.make_mesh({"tensor": 8})
  # 2 KV heads cannot be split 8 ways: that axis stays whole.
  assert parallel.spec_for("layers/attn/k_proj", (2, 64, 2, 16), mesh) == P(None, None, None, None)
  assert parallel.spec_for("layers/attn/q_proj", (2, 64, 8, 16), mesh) == P(None, None, "tensor",
                                                                             None)
