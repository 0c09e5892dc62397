"""Stop strings: first occurrence, chunk boundaries, multi-token spellings."""
import pytest

from rlsvr.sampling.stop import StopStrings


class LetterTokenizer:
  """Token i decodes to letter i % 26; token 100 decodes to '</a>' (a one-token spelling)."""

  def decode(self, ids, skip_special_tokens=False):
    return "".join("</a>" if i == 100 else chr(97 + i % 26) for i in ids)


def ids_of(text):
  return [ord(c) - 97 for c in text]


def test_cut_right_after_the_token_completing_the_first_stop_string():
  stops = StopStrings(["cab", "xyz"], LetterTokenizer())
  ids = ids_of("aaxyzcabcab")
  assert stops.find_end(ids) == 5  # "aaxyz": the earliest of either string wins.


def test_no_stop_string():
  assert StopStrings(["zz"], LetterTokenizer()).find_end(ids_of("abcabc")) is None


def test_stop_string_spanning_a_chunk_boundary_is_found():
  stops = StopStrings(["hello"], LetterTokenizer())
  ids = ids_of("xxxxxxhel") + ids_of("loxx")
  assert stops.find_end(ids[:9], checked=0) is None
  assert stops.find_end(ids, checked=9) == 11


def test_one_token_and_many_token_spellings():
  stops = StopStrings(["</a>"], LetterTokenizer())
  assert stops.find_end([1, 2, 100, 3]) == 3
  assert stops.find_end([1] + [ord(c) - 97 for c in "</"] + [100]) == 4


def test_stop_strings_need_a_tokenizer():
  with pytest.raises(ValueError, match="tokenizer"):
    StopStrings(["x"], None)
  assert not StopStrings([], None)
