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
