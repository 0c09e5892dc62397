"""Tiny random `transformers` models (the PyTorch reference) and their weights as ours."""
import numpy as np
import torch
import transformers

from rlsvr.model import hf
from rlsvr.model.config import ModelConfig

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)


def hf_config(model_type: str, **overrides) -> transformers.PretrainedConfig:
  kw = {**TINY, **overrides}
  return transformers.AutoConfig.for_model(model_type, **kw)


def randomize_(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
  """Unit-scale random weights, so logits are O(1..10) and mistakes are visible.

  HF's own init (std 0.02, norms at exactly 1, zero biases) would hide swapped
  norms, missing biases and tiny RoPE errors behind near-zero activations.
  """
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight") or "layernorm" in name:
        p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
      elif name.endswith("bias"):
        p.copy_(0.2 * torch.randn(p.shape, generator=g))
      elif "embed_tokens" in name:
        p.copy_(torch.randn(p.shape, generator=g))
      else:
        p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
  return model


def make_hf_model(model_type: str, seed: int = 0, **overrides):
  """(torch model in eval mode, our ModelConfig, our params) with identical weights."""
  cfg = hf_config(model_type, **overrides)
  model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
  randomize_(model, seed).eval()
  ours = ModelConfig.from_hf_dict(cfg.to_dict())
  tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
  return model, ours, hf.params_from_tensors(ours, tensors)


def hf_logits(model, tokens_BxT: np.ndarray, mask_BxT: np.ndarray) -> np.ndarray:
  """Reference logits; positions count real tokens only, as ours do (left padding)."""
  mask = torch.tensor(mask_BxT)
  positions = (mask.cumsum(-1) - 1).clamp(min=0)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(tokens_BxT), attention_mask=mask, position_ids=positions)
  return out.logits.numpy()


def left_padded(lengths, vocab, seed=0, pad_id=0):
  rng = np.random.default_rng(seed)
  t = max(lengths)
  tokens = np.full((len(lengths), t), pad_id, np.int64)
  mask = np.zeros((len(lengths), t), np.int64)
  for b, n in enumerate(lengths):
    tokens[b, t - n:] = rng.integers(1, vocab, n)
    mask[b, t - n:] = 1
  return tokens, mask
