"""Model loading (sources and training runs) and prompt fitting of the Generator."""
import json

import jax
import numpy as np
import pytest

from rlsvr.eval import generation


@pytest.fixture(scope="module")
def tiny():
  """The smoke model: tiny random Qwen3 with the real Qwen3 tokenizer."""
  return generation.load("random:tiny", tokenizer="qwen3", seed=3)


def test_training_run_loads_with_its_tokenizer(tmp_path, tiny):
  from rlsvr import checkpoint
  from rlsvr.rl.train_step import GRPOConfig, init_train_state

  config, params, _, _ = tiny
  state = init_train_state(config, GRPOConfig(kl_coef=0.0), params)
  run_config = {"model": {"source": "random:tiny", "tokenizer": "qwen3"}}
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(4, state, {}, {"model_config": config.to_hf_dict("float32"),
                           "param_dtype": "float32", "config": json.dumps(run_config)})
  ckpt.close()
  assert generation.checkpoint_dir(str(tmp_path)) == tmp_path / "checkpoints"
  assert generation.checkpoint_dir(str(tmp_path / "checkpoints")) == tmp_path / "checkpoints"
  assert generation.checkpoint_dir(str(tmp_path / "nothing")) is None
  config2, params2, tok, name = generation.load(str(tmp_path))
  assert name.endswith("(step 4)") and config2.vocab_size == config.vocab_size
  assert tok.eos_token == "<|im_end|>"
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_long_document_is_cut_but_instructions_kept(tiny):
  config, params, tok, _ = tiny
  gen = generation.Generator(config, params, tok, max_prompt_tokens=64, batch_size=2)
  prompt = generation.Prompt("Summarize:\n", "word " * 500, "\nEND OF INSTRUCTIONS")
  ids = gen.encode(prompt)
  text = tok.decode(ids)
  assert len(ids) <= 64 and "Summarize:" in text and "END OF INSTRUCTIONS" in text
  assert text.rstrip().endswith("assistant")  # the generation prompt is intact
  short = gen.encode("hello")
  assert tok.decode(short).count("hello") == 1
  with pytest.raises(ValueError, match="instructions alone"):
    gen.encode(generation.Prompt("x " * 200, "body"))


def test_generate_returns_text_per_prompt(tiny):
  config, params, tok, _ = tiny
  gen = generation.Generator(config, params, tok, max_prompt_tokens=256, batch_size=4)
  out = gen(["a", "b", "c"], max_new_tokens=4, temperature=0.0)
  assert len(out) == 3 and all(isinstance(t, str) for t in out)
  assert gen(["a"], max_new_tokens=4, temperature=0.0)[0] == out[0]  # greedy: reproducible
