"""A tiny Qwen3 and random weights made on the host (fast: no per-test compile of the init)."""
import jax
import jax.numpy as jnp
import numpy as np

from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig

CONFIG = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, head_dim=8, tie_word_embeddings=False)


def random_params(config: ModelConfig = CONFIG, seed: int = 0, std: float = 0.2):
  """Normal(0, std) weights, unit norm scales, zero biases, as float32 device arrays."""
  rng = np.random.default_rng(seed)

  def make(path, leaf):
    name = "/".join(str(k.key) for k in path)
    if "norm" in name:
      return jnp.ones(leaf.shape, jnp.float32)
    if name.endswith("bias"):
      return jnp.zeros(leaf.shape, jnp.float32)
    return jnp.asarray(rng.normal(0.0, std, leaf.shape).astype(np.float32))

  return jax.tree_util.tree_map_with_path(make, qwen3.abstract_params(config))

