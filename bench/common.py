"""Shapes the benchmarks share."""

# The tiny random Qwen3 (case (a) of bench/sampler.py), as transformers config
# kwargs: `AutoConfig.for_model("qwen3", **TINY_QWEN3)` or
# `ModelConfig.from_hf_dict({"model_type": "qwen3", **TINY_QWEN3})`.
TINY_QWEN3 = dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  tie_word_embeddings=True, max_position_embeddings=4096)
