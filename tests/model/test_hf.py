"""HF weight I/O: export loads back in transformers with identical logits."""
import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
import transformers

from rlsvr import parallel
from rlsvr.model import hf, qwen3
from tests import xla
from tests.model.hf_reference import hf_logits, left_padded, make_hf_model

apply = jax.jit(qwen3.apply, static_argnums=0)


@pytest.mark.parametrize("model_type,overrides", [
    ("qwen3", dict(tie_word_embeddings=False)),
    ("qwen3", dict(tie_word_embeddings=True, attention_bias=True)),
    ("qwen2", dict(tie_word_embeddings=True)),
    ("llama", dict(mlp_bias=True, attention_bias=True, tie_word_embeddings=False)),
])
def test_save_then_transformers_load_gives_identical_logits(tmp_path, model_type, overrides):
  model, config, params = make_hf_model(model_type, seed=3, **overrides)
  out = hf.save_pretrained(tmp_path / "export", config, params)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  assert type(reloaded) is type(model)
  tokens, mask = left_padded([40, 25], config.vocab_size, seed=1)
  np.testing.assert_array_equal(hf_logits(reloaded, tokens, mask), hf_logits(model, tokens, mask))
  # And our own loader reads the export back bit for bit.
  config2, params2 = hf.load_pretrained(out)
  assert config2 == config
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_load_transformers_export_sharded_with_index(tmp_path):
  model, config, params = make_hf_model("qwen3", seed=4, tie_word_embeddings=False)
  model.save_pretrained(tmp_path, max_shard_size="50KB")
  assert (tmp_path / "model.safetensors.index.json").is_file()
  assert len(list(tmp_path.glob("model-*.safetensors"))) > 3
  config2, params2 = hf.load_pretrained(tmp_path)
  assert config2 == config
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_our_sharded_export_has_a_valid_index(tmp_path):
  model, config, params = make_hf_model("qwen3", seed=5)
  out = hf.save_pretrained(tmp_path / "m", config, params, max_shard_bytes=40_000)
  index = json.loads((out / "model.safetensors.index.json").read_text())
  files = sorted(out.glob("model-*.safetensors"))
  assert len(files) > 3 and set(index["weight_map"].values()) == {f.name for f in files}
  assert index["metadata"]["total_size"] == config.num_params() * 4
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
  tokens, mask = left_padded([30], config.vocab_size)
  np.testing.assert_array_equal(hf_logits(reloaded, tokens, mask), hf_logits(model, tokens, mask))


def test_bfloat16_round_trip(tmp_path):
  model, config, params = make_hf_model("qwen3", seed=6)
  model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
  config2, params_bf16 = hf.load_pretrained(tmp_path / "bf16", dtype=jnp.bfloat16)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params_bf16))
  expected = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
  jax.tree.map(np.testing.assert_array_equal, params_bf16, expected)
  out = hf.save_pretrained(tmp_path / "again", config2, params_bf16)
  assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
  reader = hf.SafetensorsReader(hf.safetensors_files(out))
  assert reader["model.norm.weight"].dtype == ml_dtypes.bfloat16


def test_load_onto_a_mesh_matches_single_device(tmp_path):
  model, config, params = make_hf_model("qwen3", seed=7, tie_word_embeddings=False,
                                        num_key_value_heads=4)
  model.save_pretrained(tmp_path)
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  _, sharded = hf.load_pretrained(tmp_path, mesh=mesh)
  q = sharded["layers"]["attn"]["q_proj"]
  assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor", None)
  assert len(q.addressable_shards) == 8 and q.addressable_shards[0].data.shape == (2, 32, 1, 16)
  tokens, mask = left_padded([33, 12], config.vocab_size)
  np.testing.assert_allclose(apply(config, sharded, tokens, mask),
                             apply(config, params, tokens, mask), atol=1e-5)


def test_corrupt_or_incomplete_checkpoints_fail_clearly(tmp_path):
  model, config, params = make_hf_model("qwen3", seed=8)
  good = hf.save_pretrained(tmp_path / "good", config, params)
  with pytest.raises(FileNotFoundError, match="config.json"):
    hf.load_pretrained(tmp_path)
  (tmp_path / "trunc").mkdir()
  (tmp_path / "trunc" / "config.json").write_text((good / "config.json").read_text())
  data = (good / "model.safetensors").read_bytes()
  (tmp_path / "trunc" / "model.safetensors").write_bytes(data[: len(data) // 2])
  with pytest.raises(ValueError, match="truncated"):
    hf.load_pretrained(tmp_path / "trunc")
  (tmp_path / "trunc" / "model.safetensors").write_bytes(b"\xff" * 64)
  with pytest.raises(ValueError, match="corrupt"):
    hf.load_pretrained(tmp_path / "trunc")
  # A config that disagrees with the weights (biases it does not declare).
  hf_cfg = json.loads((good / "config.json").read_text())
  hf_cfg["attention_bias"] = True
  (good / "config.json").write_text(json.dumps(hf_cfg))
  with pytest.raises(KeyError, match=r"checkpoint lacks .*proj\.bias"):
    hf.load_pretrained(good)


def test_loading_needs_no_more_host_memory_than_the_largest_tensor(tmp_path):
  """bench/load_memory.py's measurement, on a ~115 MB checkpoint in fresh processes: the
  memory used only while loading (peak - final anonymous RSS) stays within one largest
  tensor, where reading the file whole and then placing it costs the model 2-3 times."""
  import importlib.util
  import os
  import subprocess
  import sys

  bench_path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "load_memory.py")
  spec = importlib.util.spec_from_file_location("load_memory", bench_path)
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  sizes = bench.write_checkpoint(str(tmp_path), layers=1, vocab=8000)
  largest = sizes["largest_tensor"]  # the 8000 x 1024 float32 embedding: 31 MB

  def transient(method):
    out = subprocess.run([sys.executable, bench_path, "--child", method, str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=True,
                         env=xla.child_env(devices=8))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["final"] - r["baseline"] > 0.8 * sizes["file"]  # the weights did arrive
    return r["peak"] - r["final"]

  assert transient("ours-mesh") <= 1.25 * largest
  assert transient("ours-1dev") <= 1.25 * largest
  assert transient("host-copy") > 2 * largest  # the measurement can see a full copy
