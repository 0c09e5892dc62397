"""`ModelConfig`: one frozen description of a Qwen3 / Qwen2 / Llama decoder.

The three families differ only in a few switches (QK-norm, q/k/v and o biases,
RoPE scaling), so one module serves all of them. `from_hf_dict` reads any HF
`config.json` of `model_type` qwen3, qwen2 or llama; `to_hf_dict` writes one
back that transformers loads. The config is hashable so jitted functions can
take it as a static argument.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen2", "llama")
_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
}
# RoPE variants whose frequencies we reproduce exactly; anything else (yarn,
# dynamic NTK, ...) is refused rather than silently computed wrong.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of a decoder-only LM (field names follow HF where they exist)."""

  model_type: str = "qwen3"
  vocab_size: int = 151936
  hidden_size: int = 1024
  intermediate_size: int = 3072
  num_layers: int = 28
  num_heads: int = 16
  num_kv_heads: int = 8
  head_dim: int = 128
  rms_norm_eps: float = 1e-6
  rope_theta: float = 1_000_000.0
  # Hashable RoPE scaling parameters, e.g. (("factor", 32.0), ("rope_type", "llama3"), ...).
  rope_scaling: tuple[tuple[str, Any], ...] = ()
  max_position_embeddings: int = 40960
  tie_word_embeddings: bool = True
  qk_norm: bool = True  # Qwen3: RMSNorm over head_dim on q and k before RoPE.
  qkv_bias: bool = False  # Qwen2: True; Llama/Qwen3: `attention_bias`.
  o_bias: bool = False  # Llama/Qwen3: `attention_bias`; Qwen2: always False.
  mlp_bias: bool = False  # Llama `mlp_bias`.
  bos_token_id: int | None = None
  eos_token_id: int | tuple[int, ...] | None = None
  pad_token_id: int | None = None

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(f"model_type={self.model_type!r} is not one of {SUPPORTED_MODEL_TYPES}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
    if self.rope_type not in SUPPORTED_ROPE_TYPES:
      raise ValueError(
          f"rope_type={self.rope_type!r} is not supported (supported: {SUPPORTED_ROPE_TYPES})")

  @property
  def rope_type(self) -> str:
    return dict(self.rope_scaling).get("rope_type", "default")

  @property
  def num_groups(self) -> int:
    """Query heads per KV head (GQA)."""
    return self.num_heads // self.num_kv_heads

  def num_params(self) -> int:
    """Parameter count, embeddings included (tied ones once)."""
    d, f, l = self.hidden_size, self.intermediate_size, self.num_layers
    q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
    attn = d * (q + 2 * kv) + q * d + (q + 2 * kv if self.qkv_bias else 0) + (d if self.o_bias else 0)
    mlp = 3 * d * f + ((2 * f + d) if self.mlp_bias else 0)
    norms = 2 * d + (2 * self.head_dim if self.qk_norm else 0)
    head = 0 if self.tie_word_embeddings else d * self.vocab_size
    return self.vocab_size * d + l * (attn + mlp + norms) + d + head

  # ------------------------------------------------------------------ HF config.json

  @classmethod
  def from_hf_dict(cls, hf: dict[str, Any]) -> "ModelConfig":
    """Builds a config from an HF `config.json` dict (transformers 4 or 5 layout)."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(
          f"config.json has model_type={model_type!r}; supported: {SUPPORTED_MODEL_TYPES}")
    hidden_act = hf.get("hidden_act", "silu")
    if hidden_act != "silu":
      raise ValueError(f"hidden_act={hidden_act!r} is not supported (only 'silu')")
    num_heads = hf["num_attention_heads"]
    # transformers 5 folds rope_theta and rope_scaling into `rope_parameters`.
    rope = dict(hf.get("rope_parameters") or {})
    rope.update(hf.get("rope_scaling") or {})
    rope_theta = float(hf.get("rope_theta", rope.pop("rope_theta", 10000.0)))
    rope.pop("rope_theta", None)
    if "type" in rope:  # pre-4.45 spelling of rope_type
      rope.setdefault("rope_type", rope.pop("type"))
    if rope.get("rope_type", "default") == "default":
      rope = {}
    if model_type == "qwen2":
      qkv_bias, o_bias = True, False
    else:
      qkv_bias = o_bias = bool(hf.get("attention_bias", False))
    eos = hf.get("eos_token_id")
    return cls(
        model_type=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=hf.get("num_key_value_heads") or num_heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=tuple(sorted(rope.items())),
        max_position_embeddings=hf.get("max_position_embeddings", 32768),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qk_norm=model_type == "qwen3",
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
        pad_token_id=hf.get("pad_token_id"),
    )

  @classmethod
  def from_hf_dir(cls, path: str | pathlib.Path) -> "ModelConfig":
    config_path = pathlib.Path(path) / "config.json"
    if not config_path.is_file():
      raise FileNotFoundError(f"{config_path} not found: not an HF model directory")
    return cls.from_hf_dict(json.loads(config_path.read_text()))

  def to_hf_dict(self, dtype: str = "float32") -> dict[str, Any]:
    """An HF `config.json` dict that transformers reads back into this config."""
    if self.model_type == "qwen2" and (not self.qkv_bias or self.o_bias):
      raise ValueError("Qwen2 always has q/k/v biases and no o_proj bias")
    if self.model_type != "qwen2" and self.qkv_bias != self.o_bias:
      raise ValueError(f"{self.model_type} has one `attention_bias` for q/k/v/o")
    if self.qk_norm != (self.model_type == "qwen3"):
      raise ValueError("QK-norm exists exactly in model_type='qwen3'")
    hf: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[self.model_type]],
        "model_type": self.model_type,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": self.rms_norm_eps,
        # transformers 5 layout; `from_hf_dict` also reads the older rope_theta/rope_scaling.
        "rope_parameters": {"rope_type": "default", **dict(self.rope_scaling),
                            "rope_theta": self.rope_theta},
        "max_position_embeddings": self.max_position_embeddings,
        "tie_word_embeddings": self.tie_word_embeddings,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": dtype,
        "bos_token_id": self.bos_token_id,
        "eos_token_id": list(self.eos_token_id) if isinstance(self.eos_token_id, tuple)
                        else self.eos_token_id,
        "pad_token_id": self.pad_token_id,
    }
    if self.model_type != "qwen2":
      hf["attention_bias"] = self.qkv_bias
    if self.model_type == "llama":
      hf["mlp_bias"] = self.mlp_bias
    elif self.mlp_bias:
      raise ValueError(f"{self.model_type} has no MLP biases")
    return hf


def _qwen3(hidden, inter, layers, heads, tie, **kw) -> ModelConfig:
  return ModelConfig(model_type="qwen3", hidden_size=hidden, intermediate_size=inter,
                     num_layers=layers, num_heads=heads, num_kv_heads=8, head_dim=128,
                     tie_word_embeddings=tie, bos_token_id=151643, eos_token_id=151645,
                     **kw)


# Architectures of the released Qwen3 dense models (their HF config.json files).
PRESETS: dict[str, ModelConfig] = {
    "qwen3-0.6b": _qwen3(1024, 3072, 28, 16, True),
    "qwen3-1.7b": _qwen3(2048, 6144, 28, 16, True),
    "qwen3-4b": _qwen3(2560, 9728, 36, 32, True),
    "qwen3-4b-instruct-2507": _qwen3(2560, 9728, 36, 32, True, rope_theta=5_000_000.0,
                                     max_position_embeddings=262144),
    "qwen3-8b": _qwen3(4096, 12288, 36, 32, False),
    "qwen3-14b": _qwen3(5120, 17408, 40, 40, False),
    "qwen3-32b": _qwen3(5120, 25600, 64, 64, False),
}


def preset(name: str) -> ModelConfig:
  try:
    return PRESETS[name.lower()]
  except KeyError:
    raise ValueError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}") from None
