"""ModelConfig <-> HF config.json, and the presets against transformers' own models."""
import pytest
import torch
import transformers

from rlsvr.model.config import PRESETS, ModelConfig, preset
from tests.model.hf_reference import hf_config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_param_count_matches_transformers(name):
  config = preset(name)
  hf_cfg = transformers.AutoConfig.for_model(**config.to_hf_dict())
  with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg)
  assert config.num_params() == sum(p.numel() for p in model.parameters())
  assert ModelConfig.from_hf_dict(hf_cfg.to_dict()) == config


def test_known_sizes():
  assert round(preset("qwen3-0.6b").num_params() / 1e6) == 596
  assert round(preset("qwen3-8b").num_params() / 1e9, 1) == 8.2


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_hf_dict_round_trip(model_type):
  config = ModelConfig.from_hf_dict(hf_config(model_type).to_dict())
  assert config.qk_norm == (model_type == "qwen3")
  assert config.qkv_bias == (model_type == "qwen2")
  assert ModelConfig.from_hf_dict(config.to_hf_dict()) == config


def test_legacy_rope_keys_are_read():
  hf = hf_config("llama").to_dict()
  hf.pop("rope_parameters")
  hf.update(rope_theta=500000.0, rope_scaling={"type": "linear", "factor": 2.0})
  config = ModelConfig.from_hf_dict(hf)
  assert config.rope_theta == 500000.0 and config.rope_type == "linear"


@pytest.mark.parametrize("bad,match", [
    (dict(model_type="gpt2"), "model_type"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}), "yarn"),
    (dict(num_attention_heads=6, num_key_value_heads=4), "multiple"),
])
def test_unsupported_configs_are_refused(bad, match):
  hf = {**hf_config("qwen3").to_dict(), **bad}
  with pytest.raises(ValueError, match=match):
    ModelConfig.from_hf_dict(hf)


def test_unknown_preset():
  with pytest.raises(ValueError, match="qwen3-0.6b"):
    preset("qwen3-7b")
