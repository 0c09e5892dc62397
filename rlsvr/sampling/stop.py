"""Stop strings, checked on the host between chunks of decode steps.

Why on the host: a stop string is text, and the same text has many token
spellings (`</answer>` may be one token, or `</`, `answer`, `>`); matching token
sequences on device would miss spellings. The decode loop therefore runs in
chunks of a few dozen steps; between chunks each row's new tokens are decoded
(with a window of earlier tokens, so a stop string spanning a chunk boundary is
found) and a row containing a stop string is cut right after the token that
completed it and marked done. A row may run up to one chunk past its stop
string before the device learns it is done; those tokens are discarded.
"""
from __future__ import annotations

from typing import Sequence


class StopStrings:
  """Finds where a completion first contains any of `stop_strings`."""

  def __init__(self, stop_strings: Sequence[str], tokenizer):
    if any(not s for s in stop_strings):
      raise ValueError("stop strings must be non-empty")
    if stop_strings and tokenizer is None:
      raise ValueError("stop_strings need a tokenizer to decode completions")
    self.stop_strings = tuple(stop_strings)
    self.tokenizer = tokenizer
    # Tokens may decode to zero characters (partial UTF-8 bytes), so the window of
    # earlier tokens re-decoded around a chunk boundary is generous.
    self.window = 4 * max((len(s) for s in stop_strings), default=0) + 8

  def __bool__(self) -> bool:
    return bool(self.stop_strings)

  def _contains(self, ids: Sequence[int]) -> bool:
    text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
    return any(s in text for s in self.stop_strings)

  def find_end(self, ids: Sequence[int], checked: int = 0) -> int | None:
    """Length to keep so the completion ends right after its first stop string.

    `checked` tokens at the front were already searched (a previous chunk) and
    contain no stop string. Returns None when `ids` contains none.
    """
    start = max(0, checked - self.window)
    if len(ids) <= checked or not self._contains(ids[start:]):
      return None
    # Containment only grows as tokens are appended: bisect for the first end.
    lo, hi = start + 1, len(ids)
    while lo < hi:
      mid = (lo + hi) // 2
      if self._contains(ids[start:mid]):
        hi = mid
      else:
        lo = mid + 1
    return lo
