"""Tests for rlsvr.model.tokenizer: Qwen3 ids equal tiktoken's, specials, chat template, cache."""
import json
import os
import re
import subprocess
import sys
import unicodedata

from hypothesis import given, settings, strategies as st
import pytest
import tiktoken
from tiktoken.load import load_tiktoken_bpe
import transformers

from rlsvr.model import tokenizer as tokenizer_lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIED_TEXTS = [
    "Hello, world!",
    "",
    " ",
    "def f(x):\n\treturn x ** 2  # square\n\n\nclass A:\n    pass\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "机器学习是人工智能的一个分支。日本語のテキスト、한국어 문장.",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✨",
    r"\int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}, \boxed{42}",
    "tabs\t\tand  spaces   and\n\n\nnewlines\r\n\r\nend   ",
    "       leading and trailing whitespace     \n",
    "Numbers: 1234567890, 3.14159, -42, 1e-10, 1,000,000 and ١٢٣ ½",
    "I'm sure they're fine; we'll see. He'd've known. IT'S DON'T",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",  # NFC
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m",  # NFD
    "Mixed: Привет мир, Γειά σου, שלום, مرحبا, नमस्ते, สวัสดี, abc123xyz",
    "zero\u200bwidth\u00a0nbsp\u3000ideographic\u2028line sep",
    "<html><body class=\"x\">&amp;</body></html>",
    "!!!???...---___***   ///\\\\",
    "a" * 300,
]


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
  return tmp_path_factory.mktemp("rlsvr_cache")


@pytest.fixture(scope="module")
def tok(cache_root):
  return tokenizer_lib.qwen3_tokenizer(cache_dir=cache_root)


@pytest.fixture(scope="module")
def reference():
  """tiktoken on the same ranks and pattern, without any added tokens."""
  return tiktoken.Encoding(
      name="qwen_ranks",
      pat_str=tokenizer_lib.QWEN3_PATTERN,
      mergeable_ranks=load_tiktoken_bpe(tokenizer_lib.qwen3_ranks_path()),
      special_tokens={},
  )


def _nfc(text):
  return unicodedata.normalize("NFC", text)


_ADDED_IDS = {
    content: tokenizer_lib.QWEN3_NUM_RANKS + i
    for i, (content, _) in enumerate(tokenizer_lib.QWEN3_ADDED_TOKENS)
}
_ADDED_RE = re.compile("(" + "|".join(map(re.escape, _ADDED_IDS)) + ")")


def _reference_encode(reference, text):
  r"""Expected (ids, decoded text): added tokens are cut out first, the rest is NFC'd.

  Normalising piece by piece matters: NFC may compose a combining mark with the
  `>` that ends an added token (">\u0338" -> "\u226f").
  """
  ids, decoded = [], []
  for i, piece in enumerate(_ADDED_RE.split(text)):
    if i % 2:
      ids.append(_ADDED_IDS[piece])
      decoded.append(piece)
    else:
      ids.extend(reference.encode_ordinary(_nfc(piece)))
      decoded.append(_nfc(piece))
  return ids, "".join(decoded)


def test_reference_ids(tok):
  assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
  assert tok.encode("<|im_start|>user\n") == [151644, 872, 198]


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_ids_equal_tiktoken(tok, reference, text):
  ids = tok.encode(text)
  assert ids == reference.encode_ordinary(_nfc(text))
  assert tok.decode(ids) == _nfc(text)


def test_digits_split_individually(tok):
  assert tok.convert_ids_to_tokens(tok.encode("2024")) == ["2", "0", "2", "4"]


def test_nfd_input_is_normalised(tok):
  assert tok.encode("Cafe\u0301") == tok.encode("Caf\u00e9")


# Hypothesis also draws string constants from the code under test, so added
# tokens show up inside the random text.
@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=64))
def test_random_text_matches_tiktoken(tok, reference, text):
  ids = tok.encode(text)
  expected_ids, expected_text = _reference_encode(reference, text)
  assert ids == expected_ids
  assert tok.decode(ids) == expected_text


def test_vocabulary_layout(tok):
  assert len(tok) == 151_669
  added = [content for content, _ in tokenizer_lib.QWEN3_ADDED_TOKENS]
  assert len(added) == 26
  assert tok.convert_ids_to_tokens(list(range(151_643, 151_669))) == added
  assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
      151643, 151644, 151645,
  ]
  assert tok.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]
  assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
  assert (tok.pad_token, tok.pad_token_id) == ("<|endoftext|>", 151643)
  assert tok.bos_token is None
  assert tok.model_max_length == 131_072


def test_special_flags_match_qwen3(tok):
  # Qwen3: the 14 control tokens are special; tool/fim/repo/think markers are not.
  assert set(tok.all_special_ids) == set(range(151_643, 151_657))


def test_added_tokens_in_text_are_single_ids(tok, reference):
  text = "<|im_start|>user\nx<|im_end|><think>\ny\n</think><tool_call><|fim_prefix|><|endoftext|>"
  ids = tok.encode(text)
  assert ids == [151644, 872, 198, 87, 151645, 151667, 198, 88, 198, 151668, 151657, 151659, 151643]
  assert _reference_encode(reference, text)[0] == ids
  # The NFC pitfall of the reference helper: a combining mark after an added token.
  assert tok.encode("<think>\u0338") == [151667] + reference.encode_ordinary("\u0338")
  assert tok.decode(ids) == text
  # Only the special ones are dropped.
  kept = "user\nx<think>\ny\n</think><tool_call><|fim_prefix|>"
  assert tok.decode(ids, skip_special_tokens=True) == kept


def test_no_bos_or_eos_added(tok):
  assert tok("hi")["input_ids"] == tok.encode("hi", add_special_tokens=False)


MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "Why?"},
]
EXPECTED_CHAT = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\n2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4<|im_end|>\n"
    "<|im_start|>user\nWhy?<|im_end|>\n"
)


@pytest.mark.parametrize(
    "kwargs, suffix",
    [
        ({}, ""),
        ({"add_generation_prompt": True}, "<|im_start|>assistant\n"),
        ({"add_generation_prompt": True, "enable_thinking": True}, "<|im_start|>assistant\n"),
        (
            {"add_generation_prompt": True, "enable_thinking": False},
            "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        ),
        ({"add_generation_prompt": False, "enable_thinking": False}, ""),
    ],
)
def test_chat_template_text(tok, kwargs, suffix):
  assert tok.apply_chat_template(MESSAGES, tokenize=False, **kwargs) == EXPECTED_CHAT + suffix


def test_chat_template_ids(tok):
  messages = [{"role": "user", "content": "Hi"}]
  ids = tok.apply_chat_template(
      messages, tokenize=True, return_dict=False, add_generation_prompt=True, enable_thinking=False
  )
  # "assistant" = 77091, "\n\n" = 271, as in Qwen3's own non-thinking prompts.
  assert list(ids) == [
      151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271,
  ]


def test_chat_template_rejects_unknown_role(tok):
  with pytest.raises(Exception, match="Unsupported role: tool"):
    tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_disk_cache_is_reused(tok, cache_root, monkeypatch):
  cache_dir = cache_root / "qwen3_tokenizer"
  assert (cache_dir / "tokenizer.json").is_file()
  # No leftover temporary build directories next to it.
  assert os.listdir(cache_root) == ["qwen3_tokenizer"]
  monkeypatch.setenv("RLSVR_CACHE", str(cache_root))
  assert tokenizer_lib.qwen3_tokenizer() is tok  # same directory: in-process cache

  def no_build():
    raise AssertionError("rebuilt although the cache exists")

  monkeypatch.setattr(tokenizer_lib, "build_qwen3_tokenizer", no_build)
  tokenizer_lib._load_or_build.cache_clear()
  try:
    fresh = tokenizer_lib.qwen3_tokenizer()
  finally:
    tokenizer_lib._load_or_build.cache_clear()
  assert fresh is not tok
  for text in VARIED_TEXTS:
    assert fresh.encode(text) == tok.encode(text)
  assert fresh.chat_template == tokenizer_lib.CHATML_TEMPLATE


def test_loading_the_cached_tokenizer_does_not_import_torch(tok, cache_root):
  """A trainer's start-up pays for what the tokenizer load imports: AutoTokenizer's class
  lookup imports torch (seconds) where it is installed, the class itself does not."""
  code = ("import sys; from rlsvr.model import tokenizer as t; "
          f"tok = t.qwen3_tokenizer(cache_dir={str(cache_root)!r}); "
          "print(len(tok), 'torch' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, cwd=REPO).stdout.split()
  assert out == [str(len(tok)), "False"]


def _token_fields(token) -> dict:
  return {k: getattr(token, k) for k in ("content", "single_word", "lstrip", "rstrip",
                                         "normalized", "special")}


def test_loading_leaves_tokenizer_json_to_rust(tok, cache_root, monkeypatch):
  """Unless its added tokens are given, transformers parses the 19 MB tokenizer.json in
  Python for them (about 1 s of every start-up); given, they are the ones the file lists."""
  path = cache_root / "qwen3_tokenizer"
  listed = {t.pop("id"): t for t in json.loads((path / "tokenizer.json").read_text())
            ["added_tokens"]}
  parsed, real_load = [], json.load
  monkeypatch.setattr(json, "load", lambda f, *a, **k: parsed.append(
      os.path.basename(getattr(f, "name", ""))) or real_load(f, *a, **k))
  tokenizer_lib._load_or_build.cache_clear()
  try:
    fresh = tokenizer_lib.qwen3_tokenizer(cache_dir=cache_root)
  finally:
    tokenizer_lib._load_or_build.cache_clear()
  assert "tokenizer.json" not in parsed and "tokenizer_config.json" in parsed
  assert {i: _token_fields(t) for i, t in tokenizer_lib.qwen3_added_tokens().items()} == listed
  legacy = transformers.PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
  assert ({i: _token_fields(t) for i, t in fresh.added_tokens_decoder.items()}
          == {i: _token_fields(t) for i, t in legacy.added_tokens_decoder.items()})
  assert (fresh.all_special_tokens, fresh.eos_token, fresh.pad_token) == (
      legacy.all_special_tokens, legacy.eos_token, legacy.pad_token)
  for text in [*VARIED_TEXTS, "<|im_start|>a<think>b</think><|im_end|>"]:
    ids = fresh.encode(text)
    assert ids == legacy.encode(text)
    assert fresh.decode(ids, skip_special_tokens=True) == legacy.decode(ids,
                                                                         skip_special_tokens=True)


def test_losing_build_race_keeps_winner(tmp_path, monkeypatch):
  final = tmp_path / "qwen3_tokenizer"
  final.mkdir()
  (final / "winner").write_text("complete")

  class Loser:

    def save_pretrained(self, path):
      with open(os.path.join(path, "loser"), "w") as f:
        f.write("late")

  monkeypatch.setattr(tokenizer_lib, "build_qwen3_tokenizer", Loser)
  tokenizer_lib._build_into(final)
  assert os.listdir(final) == ["winner"]
  assert os.listdir(tmp_path) == ["qwen3_tokenizer"]


def test_load_tokenizer_on_saved_dir(tok, tmp_path):
  tok.save_pretrained(tmp_path)
  loaded = tokenizer_lib.load_tokenizer(tmp_path)
  assert loaded.encode(VARIED_TEXTS[3]) == tok.encode(VARIED_TEXTS[3])
  assert loaded.apply_chat_template(MESSAGES, tokenize=False) == EXPECTED_CHAT
  assert loaded.eos_token_id == 151645


def test_a_saved_fast_tokenizer_loads_as_autotokenizer_would_without_torch(tok, tmp_path):
  """The SmolLM2 asset's class (TokenizersBackend) is loaded directly: AutoTokenizer picks
  the same class, but its lookup imports torch, about 2 s of the main job's start-up."""
  tok.save_pretrained(tmp_path)
  code = ("import sys; from rlsvr.model import tokenizer as t; "
          f"tok = t.load_tokenizer({str(tmp_path)!r}); print(type(tok).__name__, "
          "'torch' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, cwd=REPO).stdout.split()
  assert out == ["TokenizersBackend", "False"]
  ours = tokenizer_lib.load_tokenizer(tmp_path)
  auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
  assert type(ours) is type(auto)
  assert {k: repr(v) for k, v in vars(ours).items()} == {k: repr(v) for k, v in vars(auto).items()}
  # Another saved class still goes through AutoTokenizer.
  config = json.loads((tmp_path / "tokenizer_config.json").read_text())
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config,
                                                              "tokenizer_class": "Qwen2Tokenizer"}))
  assert type(tokenizer_lib.load_tokenizer(tmp_path)) is type(
      transformers.AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True))


def test_load_tokenizer_missing_dir(tmp_path):
  with pytest.raises(FileNotFoundError):
    tokenizer_lib.load_tokenizer(tmp_path / "absent")


def test_stop_ids_take_a_list_a_single_id_or_a_missing_one():
  import types

  import dataclasses

  from rlsvr.model.tokenizer import stop_ids
  from tests.rl.tiny import CONFIG

  llama3 = dataclasses.replace(CONFIG, eos_token_id=(128001, 128008, 128009))  # as loaded
  tok = types.SimpleNamespace(eos_token_id=128009)
  assert stop_ids(llama3, tok) == [128001, 128008, 128009]
  assert stop_ids(llama3, types.SimpleNamespace(eos_token_id=None)) == [128001, 128008, 128009]
  qwen = dataclasses.replace(CONFIG, eos_token_id=151645)
  assert stop_ids(qwen, types.SimpleNamespace(eos_token_id=151643)) == [151643, 151645]
  bare = dataclasses.replace(CONFIG, eos_token_id=None)
  assert stop_ids(bare, tok) == [128009]  # the config has none, the tokenizer has one
  with pytest.raises(ValueError, match="eos_token_id"):
    stop_ids(bare, object())
