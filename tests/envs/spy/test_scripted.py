"""Tests for rlsvr.envs.spy.scripted: the model-free detectors of the ceiling, by hand."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from rlsvr.envs.spy import mechanics, scripted

REF = "Name: Ada Moreno. Age: 41. Home town: Lisbon. Job: baker. Pets: a cat. Favourite food: soup."
CIVILIAN = "Ada Moreno, 41, is a baker from Lisbon with a cat who loves soup."
SPY_COPY = "Ada Moreno, 41, is a baker from Li****** with a cat."
SPY_VAGUE = "Ada Moreno, 41, works in a shop and has a cat."


def test_content_words_drop_case_punctuation_and_function_words():
  assert scripted.content_words("The Cat, and THE dog's 41!") == {"cat", "dog", "s", "41"}


def test_recall_counts_the_reference_words_an_output_uses():
  ref = scripted.content_words(REF)
  assert scripted.recall(REF, REF) == 1.0
  assert scripted.recall(REF, "") == 0.0
  assert scripted.recall(REF, "Ada soup") == pytest.approx(2 / len(ref))
  assert scripted.recall("", "anything") == 1.0


def test_mask_chars_counts_runs_of_three_or_more_stars_only():
  assert scripted.mask_chars(REF, [CIVILIAN, SPY_COPY, "**bold** text", "a * b"]) == [0, 6, 0, 0]


def test_each_detector_finds_the_spy_it_is_built_for():
  outputs = [CIVILIAN, CIVILIAN, SPY_VAGUE, CIVILIAN]
  for name in ("least_recall", "missed_consensus"):
    assert scripted.vote_accuracy(scripted.DETECTORS[name](REF, outputs), spy=3) == 1.0
  # "works", "shop" are not in the sheet: the vague spy invents the most.
  assert scripted.vote_accuracy(scripted.most_unsupported(REF, outputs), spy=3) == 1.0
  assert scripted.vote_accuracy(scripted.mask_chars(REF, [CIVILIAN, SPY_COPY]), spy=2) == 1.0


def test_ties_split_the_vote_so_a_blind_detector_scores_chance():
  assert scripted.vote_accuracy([0.0, 0.0, 0.0, 0.0], spy=2) == 0.25
  assert scripted.vote_accuracy([1.0, 1.0, 0.0], spy=1) == 0.5
  assert scripted.vote_accuracy([1.0, 1.0, 0.0], spy=3) == 0.0
  same = scripted.game_accuracies(REF, [CIVILIAN] * 4, spy=4)
  assert all(v == 0.25 for v in same.values())


def test_best_per_game_is_the_best_detector_of_each_game_and_summarise_gives_se():
  games = [scripted.game_accuracies(REF, [CIVILIAN, SPY_COPY, CIVILIAN, CIVILIAN], spy=2),
           scripted.game_accuracies(REF, [CIVILIAN] * 4, spy=1)]
  assert games[0]["mask_chars"] == 1.0 and games[0]["best_per_game"] == 1.0
  assert games[1]["best_per_game"] == 0.25
  # Luck alone: mask_chars always suspects player 2, so over the four possible spies the
  # best rule is right a quarter of the time plus what the recall rules add by chance.
  assert games[0]["best_per_game_chance"] == pytest.approx(np.mean(
      [max(scripted.vote_accuracy(d(REF, [CIVILIAN, SPY_COPY, CIVILIAN, CIVILIAN]), k)
           for d in scripted.DETECTORS.values()) for k in range(1, 5)]))
  assert 0.25 <= games[0]["best_per_game_chance"] < 1.0
  summary = scripted.summarise(games)
  assert summary["best_per_game"] == pytest.approx((0.625, 0.375))


@given(st.lists(st.text(max_size=60), min_size=2, max_size=6), st.data())
def test_accuracies_are_probabilities_that_sum_to_one_over_spies(outputs, data):
  reference = data.draw(st.text(max_size=80))
  per_spy = [scripted.game_accuracies(reference, outputs, spy)
             for spy in range(1, len(outputs) + 1)]
  for name in scripted.DETECTORS:
    values = [a[name] for a in per_spy]
    assert all(a["best_per_game"] >= a[name] for a in per_spy)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert sum(values) == pytest.approx(1.0)  # Every vote goes to some player.


def test_a_real_mask_is_found_when_the_spy_copies_its_view():
  rng = np.random.default_rng(0)
  masked = mechanics.mask_span(REF, 0.2, rng).text
  acc = scripted.game_accuracies(REF, [REF, REF, masked, REF], spy=3)
  assert acc["mask_chars"] == 1.0 and acc["least_recall"] == 1.0


def test_huge_hostile_outputs_are_cut_not_scanned_whole():
  big = "*" * (10 * scripted.MAX_CHARS)
  assert scripted.mask_chars(REF, [big])[0] == scripted.MAX_CHARS
