"""Test fakes for the spy game: a byte-level tokenizer and a scripted policy."""
import re
from typing import Callable

from rlsvr.envs.base import Completion

USER, ASSISTANT, EOS = 256, 257, 258


class ByteTokenizer:
  """UTF-8 bytes as ids 0..255 plus three special ids; a chat template of two markers."""

  def __init__(self, as_mapping: bool = False):
    self.as_mapping = as_mapping

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    del add_special_tokens  # no special tokens around plain text either way
    return list(text.encode("utf-8"))

  def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True, **kwargs):
    assert tokenize and add_generation_prompt
    ids = []
    for message in messages:
      ids += [USER] + self.encode(message["content"])
    ids.append(ASSISTANT)
    # transformers 5 returns a BatchEncoding (a mapping) by default.
    return {"input_ids": ids} if self.as_mapping else ids

  def decode(self, ids, skip_special_tokens=False):
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def spy_marker_player(prompt: str, task: str) -> str:
  """A player that says who it is and whether it is the spy, in the task's format (and
  "P0-PLAIN" for the plain task prompt, which names no player)."""
  match = re.search(r"You are Player (\d+)", prompt)
  if match is None:
    return "Answer: P0-PLAIN text"
  player = int(match.group(1))
  tag = f"P{player}-{'SPY' if 'you are the spy' in prompt else 'CIV'}"
  if task == "math":
    return f"Working...\n\\boxed{{{tag} problem}} and a second \\boxed{{hidden}}"
  return f"Thinking about it.\nAnswer: {tag} text"


def spy_finding_detector(prompt: str) -> str:
  """A detector that votes for the player whose public output is marked SPY."""
  match = re.search(r"Player (\d+)(?: \(round \d+\))?: P\d+-SPY", prompt)
  return f"Reasoning. \\boxed{{{match.group(1)}}}" if match else "\\boxed{N/A}"


class ScriptedPolicy:
  """A SampleFn answering from the decoded prompt; records every call."""

  def __init__(self, tokenizer, player: Callable[[str], object], detector: Callable[[str], object],
               eos_id: int = EOS):
    self.tokenizer, self.player, self.detector, self.eos_id = tokenizer, player, detector, eos_id
    self.calls: list[tuple[list[str], dict]] = []

  def __call__(self, prompts, **sampling):
    texts = [self.tokenizer.decode(p) for p in prompts]
    self.calls.append((texts, sampling))
    out = []
    for text in texts:
      fn = self.detector if "You are the judge of" in text else self.player
      result = fn(text)
      if isinstance(result, Completion):
        out.append(result)
        continue
      ids = tuple(self.tokenizer.encode(result)) + (self.eos_id,)
      out.append(Completion(ids, tuple(-0.5 for _ in ids), "eos"))
    return out
