"""The evaluated model: loading from any source, and batched text generation.

`load(model)` accepts what `--config.model` may name: a model source
(`rlsvr.model.sources`: "smollm2", "hub:<name>", "random:<preset>", an HF
directory) or a training run (its workdir, or its `checkpoints/` folder), whose
model source and tokenizer come from the run's saved config.

`Generator` turns prompt texts into response texts: one user message through
the chat template, the sampler in batches, special tokens stripped. A prompt
that does not fit `max_prompt_tokens` is cut inside its `Prompt.body` (the
document), never inside the instructions.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any, NamedTuple, Sequence

from rlsvr import seeding


class Prompt(NamedTuple):
  """A user message `before + body + after`; only `body` is shortened to fit."""

  before: str
  body: str
  after: str = ""


def checkpoint_dir(model: str) -> pathlib.Path | None:
  """The orbax checkpoints folder of a training run named by `model`, or None."""
  path = pathlib.Path(model).expanduser()
  if (path / "checkpoints").is_dir():
    path = path / "checkpoints"
  if path.is_dir() and any(p.name.isdigit() and (p / "meta").is_dir() for p in path.iterdir()):
    return path
  return None


def load(model: str, *, tokenizer: str = "", dtype: str = "float32", seed: int = 0,
         step: int | None = None):
  """(ModelConfig, params, tokenizer, description) of a model source or a training run."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  from rlsvr.model import sources  # noqa: PLC0415

  ckpt = checkpoint_dir(model)
  if ckpt is None:
    config, params, tok = sources.load_model(model, dtype=jnp.dtype(dtype), seed=seed,
                                             tokenizer=tokenizer)
    return config, params, tok, model
  from rlsvr import checkpoint  # noqa: PLC0415

  step, config, params, meta = checkpoint.restore_run(str(ckpt), step)
  run = json.loads(meta["config"])
  params = jax.tree.map(lambda x: x.astype(dtype), params)
  tok = sources.tokenizer_for(run["model"]["source"],
                              tokenizer or run["model"].get("tokenizer", ""))
  return config, params, tok, f"{model} (step {step})"


class Generator:
  """Batched chat generation with one model (see the module docstring)."""

  def __init__(self, model_config, params, tokenizer, *, max_prompt_tokens: int = 4096,
               batch_size: int = 16, chat_template_kwargs: dict[str, Any] | None = None,
               name: str = ""):
    from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
    from rlsvr.sampling import Buckets, Sampler  # noqa: PLC0415
    from rlsvr.sampling.layout import length_buckets  # noqa: PLC0415

    self.params = params
    self.tokenizer = tokenizer
    self.max_prompt_tokens = max_prompt_tokens
    self.batch_size = batch_size
    self.chat_template_kwargs = dict(chat_template_kwargs or {})
    self.name = name
    # Few compiled shapes: every batch is padded to batch_size, every prompt to >= 256 tokens.
    # Evaluation prompts are mostly that long anyway, and a compile costs more than the padding.
    buckets = Buckets(batch=tuple(b for b in Buckets().batch if b >= batch_size),
                      prompt=length_buckets(min(256, max_prompt_tokens)))
    self.sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer),
                           tokenizer=tokenizer, buckets=buckets)

  def encode(self, prompt: str | Prompt) -> list[int]:
    """Prompt ids; a `Prompt` body is cut (from its end) until the whole fits."""
    from rlsvr.model.tokenizer import encode_chat  # noqa: PLC0415

    def chat(text: str) -> list[int]:
      return encode_chat(self.tokenizer, text, chat_template_kwargs=self.chat_template_kwargs)

    if isinstance(prompt, str):
      prompt = Prompt(prompt, "")
    ids = chat(prompt.before + prompt.body + prompt.after)
    excess = len(ids) - self.max_prompt_tokens
    if excess <= 0:
      return ids
    body_ids = self.tokenizer.encode(prompt.body, add_special_tokens=False)
    keep = len(body_ids)
    for _ in range(3):  # Decoding a cut can merge or split tokens at the seam: recheck.
      keep -= excess + 8
      if keep <= 0:
        break
      ids = chat(prompt.before + self.tokenizer.decode(body_ids[:keep]) + prompt.after)
      excess = len(ids) - self.max_prompt_tokens
      if excess <= 0:
        return ids
    raise ValueError(f"prompt does not fit max_prompt_tokens={self.max_prompt_tokens}: its "
                     "instructions alone are too long")

  def __call__(self, prompts: Sequence[str | Prompt], *, max_new_tokens: int,
               temperature: float = 0.0, top_p: float = 1.0, seed: int = 0) -> list[str]:
    """One response text per prompt, in order."""
    texts = []
    encoded = [self.encode(p) for p in prompts]
    for start in range(0, len(encoded), self.batch_size):
      completions = self.sampler(self.params, encoded[start:start + self.batch_size],
                                 max_new_tokens=max_new_tokens, temperature=temperature,
                                 top_p=top_p, seed=seeding.derive(seed, "eval", start))
      texts += [self.tokenizer.decode(list(c.ids), skip_special_tokens=True)
                for c in completions]
    return texts


def build(c_model: str, *, tokenizer: str = "", dtype: str = "float32", seed: int = 0,
          step: int | None = None, **kwargs: Any) -> Generator:
  """A `Generator` for `--config.model`-style names (`load` + `Generator`)."""
  config, params, tok, name = load(c_model, tokenizer=tokenizer, dtype=dtype, seed=seed, step=step)
  return Generator(config, params, tok, name=name, **kwargs)
