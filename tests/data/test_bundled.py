"""Tests for rlsvr.data.bundled: the generated corpora are stable and usable."""
import pytest

from rlsvr.data import bundled as bundled_module
from rlsvr.data.bundled import BUNDLED
from rlsvr.envs.spy import mechanics


@pytest.mark.parametrize("task,min_words", [("summarisation", 120), ("writing", 8), ("math", 40)])
def test_each_task_has_distinct_documents(task, min_words):
  docs = BUNDLED[task]
  assert 20 <= len(docs) <= 40
  assert len(set(docs)) == len(docs)
  assert all(len(doc.split()) >= min_words for doc in docs)
  # Long enough that a 20% mask hides at least a word.
  assert all(mechanics.span_length(len(doc), 0.2) >= 8 for doc in docs)


def test_generation_is_deterministic():
  assert bundled_module._build() == BUNDLED  # pylint: disable=protected-access


def test_writing_prompts_fit_the_128_word_truncation():
  assert all(mechanics.truncate_words(p, 128) == p for p in BUNDLED["writing"])


def test_fact_sheets_are_six_short_distinct_facts():
  sheets = BUNDLED["facts"]
  assert len(sheets) >= 1000 and len(set(sheets)) > 0.99 * len(sheets)
  for sheet in sheets[:50]:
    assert [part.split(":")[0] for part in sheet.rstrip(".").split(". ")] == [
        "Name", "Age", "Home town", "Job", "Pets", "Favourite food"]
    assert 15 <= len(sheet.split()) <= 30
    # A 20% mask hides about one fact: more than a word, far less than the sheet.
    assert 16 <= mechanics.span_length(len(sheet), 0.2) <= 30
  # Any count, and the bundled ones are the generator's first.
  assert bundled_module.fact_sheets(5000)[:len(sheets)] == sheets
