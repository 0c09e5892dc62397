"""Where a run's model comes from: `config.model.source` -> (config, params, tokenizer).

  smollm2            the bundled SmolLM2-135M-Instruct (offline after setup)
  hub:<org/name>     an HF hub repository (needs network or the HF cache)
  random:<preset>    random weights of a preset (`rlsvr.model.config.PRESETS`) or "tiny"
  <path>             a local HF directory
"""
from __future__ import annotations

import os
import pathlib

import jax
import jax.numpy as jnp

from rlsvr.model import assets, hf, qwen3, tokenizer as tokenizers
from rlsvr.model import params as params_lib
from rlsvr.model.config import ModelConfig, preset

# A Qwen3 small enough for seconds-long smoke runs, with the real Qwen3 vocabulary. The
# embedding is nearly all of its weights, so its width sets a smoke step's time: 16 wide,
# a warm two-step smoke run takes 3.3 s against 5.0 s at 64 (docs/benchmarks.md, "Test
# suite, cold cache"). Four query and two KV heads keep the sharding cases of the tests.
TINY_QWEN3 = ModelConfig(vocab_size=151936, hidden_size=16, intermediate_size=32, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=4, tie_word_embeddings=True,
                         bos_token_id=151643, eos_token_id=151645)


class ModelSourceError(ValueError):
  pass


def resolve(source: str) -> pathlib.Path | ModelConfig:
  """A local HF directory, or the config of a random-init source. Fails fast offline."""
  if source == "smollm2":
    return assets.smollm2_135m()
  if source.startswith("random:"):
    name = source.split(":", 1)[1]
    return TINY_QWEN3 if name == "tiny" else preset(name)
  if source.startswith("hub:"):
    repo = source.split(":", 1)[1]
    import huggingface_hub  # noqa: PLC0415

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    try:
      return pathlib.Path(huggingface_hub.snapshot_download(
          repo, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"],
          local_files_only=offline))
    except Exception as e:  # noqa: BLE001 (hub errors come in many types)
      raise ModelSourceError(
          f"model.source={source!r}: cannot fetch {repo} from the HF hub ({type(e).__name__}). "
          "Without network use a `cpu` variant (e.g. --config=configs/spy_summ.py:cpu) or point "
          "--config.model.source at a local HF directory.") from None
  path = pathlib.Path(source).expanduser()
  if not (path / "config.json").is_file():
    raise ModelSourceError(
        f"model.source={source!r} is not 'smollm2', 'hub:<name>', 'random:<preset>' or an HF "
        "directory with a config.json")
  return path


def tokenizer_for(source: str, tokenizer: str = "", where=None):
  """The tokenizer of a run: "qwen3" (built offline), a tokenizer directory, or ""
  (the model directory's own; random-init sources have none)."""
  if tokenizer == "qwen3":
    return tokenizers.qwen3_tokenizer()
  if tokenizer:
    return tokenizers.load_tokenizer(tokenizer)
  where = resolve(source) if where is None else where
  if isinstance(where, ModelConfig):
    raise ModelSourceError(f"model.source={source!r} has no tokenizer: set model.tokenizer")
  return tokenizers.load_tokenizer(where)


def load_model(source: str, *, dtype=jnp.float32, mesh=None, seed: int = 0, tokenizer: str = ""):
  """(ModelConfig, params, tokenizer) for a model source.

  `tokenizer` "" takes the model directory's; "qwen3" builds the offline Qwen3
  tokenizer (required for random-init sources).
  """
  where = resolve(source)
  if isinstance(where, ModelConfig):
    config = where
    params = qwen3.init_params(config, jax.random.key(seed), dtype)
    if mesh is not None:
      shardings = params_lib.param_shardings(config, mesh)
      params = jax.device_put(params, params_lib.unflatten(shardings))
  else:
    config, params = hf.load_pretrained(where, dtype=dtype, mesh=mesh)
  tok = tokenizer_for(source, tokenizer, where)
  if len(tok) > config.vocab_size:
    raise ModelSourceError(f"tokenizer has {len(tok)} tokens but the model only "
                           f"{config.vocab_size} embeddings")
  return config, params, tok
