"""Shapes and helpers the benchmarks share."""
import ast
import importlib
import os

# The tiny random Qwen3 (case (a) of bench/sampler.py), as transformers config
# kwargs: `AutoConfig.for_model("qwen3", **TINY_QWEN3)` or
# `ModelConfig.from_hf_dict({"model_type": "qwen3", **TINY_QWEN3})`.
TINY_QWEN3 = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  tie_word_embeddings=True, max_position_embeddings=4096)


def set_key(c, assignment: str) -> None:
  """`--set key=value` on a config: dotted key, a Python literal or else a string."""
  key, _, raw = assignment.partition("=")
  *path, last = key.split(".")
  node = c
  for part in path:
    node = node[part]
  try:
    value = ast.literal_eval(raw)
  except (ValueError, SyntaxError):
    value = raw
  node[last] = value


def load_config(spec: str, sets=()):
  """`path/to/config.py[:arg]` as `python -m rlsvr.train --config=` reads it, with each
  `--set key=value` of `sets` applied."""
  path, _, arg = spec.partition(":")
  module = os.path.splitext(os.path.relpath(path))[0].replace(os.sep, ".")
  c = importlib.import_module(module).get_config(arg or None)
  for assignment in sets:
    set_key(c, assignment)
  return c
