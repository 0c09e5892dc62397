"""The parameter table: what the model initialises, and how each weight is partitioned."""
import dataclasses

import jax
import pytest
from jax.sharding import PartitionSpec as P

from rlsvr import parallel
from rlsvr.model import params as params_lib
from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig, preset

BARE = ModelConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=4, qk_norm=False)
EVERYTHING = dataclasses.replace(BARE, model_type="llama", qkv_bias=True, o_bias=True,
                                 mlp_bias=True, tie_word_embeddings=False)


@pytest.mark.parametrize("config", [BARE, EVERYTHING, preset("qwen3-0.6b")],
                         ids=["bare", "everything", "qwen3-0.6b"])
def test_init_has_exactly_the_weights_and_shapes_of_the_table(config):
  params = params_lib.flatten(jax.eval_shape(lambda: qwen3.init_params(config, jax.random.key(0))))
  present = params_lib.present(config)
  assert list(params) == sorted(present)
  assert {path: x.shape for path, x in params.items()} == {
      path: params_lib.shape_of(p, config) for path, p in present.items()}
  assert sum(x.size for x in params.values()) == config.num_params()
  assert jax.tree.structure(qwen3.abstract_params(config)) == jax.tree.structure(
      params_lib.unflatten(params))


def test_every_switch_adds_its_weights():
  assert len(params_lib.present(EVERYTHING)) == len(params_lib.TABLE) - 2  # no QK-norm
  assert "lm_head" not in params_lib.present(BARE)
  assert not any(path.endswith("_bias") for path in params_lib.present(BARE))


def test_rules_cover_every_qwen3_8b_parameter():
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  shardings = params_lib.param_shardings(preset("qwen3-8b"), mesh)
  assert shardings["layers/attn/q_proj"].spec == P(None, "fsdp", "tensor", None)
  assert shardings["layers/attn/o_proj"].spec == P(None, "tensor", None, "fsdp")
  assert shardings["layers/mlp/down_proj"].spec == P(None, "tensor", "fsdp")
  assert shardings["embed"].spec == P("tensor", "fsdp")
  assert shardings["lm_head"].spec == P("fsdp", "tensor")
  assert shardings["layers/input_norm/scale"].spec == P(None, None)


def test_vectors_split_over_tensor_only():
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  specs = {path: s.spec for path, s in params_lib.param_shardings(EVERYTHING, mesh).items()}
  assert specs["layers/attn/q_bias"] == P(None, "tensor", None)
  assert specs["layers/mlp/gate_bias"] == P(None, "tensor")
  assert specs["layers/mlp/down_bias"] == specs["layers/attn/o_bias"] == P(None, None)
  assert specs["final_norm/scale"] == P(None)


def test_indivisible_dimensions_and_unknown_leaves_are_replicated():
  mesh = parallel.make_mesh({"tensor": 8})
  # 2 KV heads cannot be split 8 ways: that axis stays whole.
  assert params_lib.spec_for("layers/attn/k_proj", (2, 64, 2, 16), mesh) == P(None, None, None,
                                                                              None)
  assert params_lib.spec_for("layers/attn/q_proj", (2, 64, 8, 16), mesh) == P(None, None,
                                                                              "tensor", None)
  assert params_lib.spec_for("", (), mesh) == P()  # An optimizer's step count.
