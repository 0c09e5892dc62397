"""Decoder models (Qwen3 and the Llama/Qwen2 family), HF weight I/O, tokenizers."""
