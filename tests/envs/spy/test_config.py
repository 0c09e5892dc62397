"""Tests for rlsvr.envs.spy.config: per-task defaults, variants, validation."""
import pytest

from rlsvr.envs.spy import SpyGameConfig
from rlsvr.envs.spy.config import canonical_task


@pytest.mark.parametrize("task,players,detectors,fraction,words", [
    ("summarisation", 4, 8, 0.2, 16000),
    ("writing", 5, 8, 0.2, 128),
    ("math", 5, 4, 0.4, 1000),
])
def test_task_defaults(task, players, detectors, fraction, words):
  config = SpyGameConfig.for_task(task)
  assert (config.num_players, config.rollout_n, config.mask_fraction, config.truncate_words) == (
      players, detectors, fraction, words)
  assert (config.variant, config.spy_view, config.rounds) == ("parallel", "masked", 1)
  assert (config.beta, config.lam, config.baseline_momentum) == (0.1, 0.1, 0.9)
  assert (config.vote_pick, config.detection_reward) == ("last", "paper")


def test_variant_defaults():
  seq = SpyGameConfig.for_task("summarisation", "sequential")
  assert (seq.num_players, seq.mask_fraction, seq.spy_view) == (2, 0.5, "masked")
  assert SpyGameConfig.for_task("math", "sequential").spy_view == "none"
  assert SpyGameConfig.for_task("writing", "no_spy").training_phase == "clue"
  assert SpyGameConfig.for_task("writing", num_players=3).num_players == 3


def test_task_aliases():
  assert canonical_task("summarization") == "summarisation"
  assert SpyGameConfig(task="summarization").task == "summarisation"
  with pytest.raises(ValueError, match="unknown spy task"):
    SpyGameConfig.for_task("poetry")


@pytest.mark.parametrize("overrides", [
    dict(variant="duel"), dict(num_players=1), dict(rollout_n=0), dict(rounds=0),
    dict(mask_fraction=1.5), dict(vote_pick="middle"), dict(detection_reward="x"),
    dict(training_phase="both"), dict(cycle_length=0), dict(spy_view="half"),
    dict(detector_orders="shuffled"), dict(detector_groups="order"),
    dict(variant="no_spy"), dict(variant="no_spy", training_phase="clue", joint=True),
])
def test_validation(overrides):
  with pytest.raises(ValueError, match="SpyGameConfig"):
    SpyGameConfig(**overrides)


def test_frozen():
  with pytest.raises(AttributeError):
    SpyGameConfig().num_players = 3


def test_stratified_seats_are_for_the_parallel_game():
  assert SpyGameConfig.for_task("facts", spy_seats="stratified").spy_seats == "stratified"
  with pytest.raises(ValueError, match="spy_seats='stratified' is for the parallel game"):
    SpyGameConfig.for_task("summarisation", "sequential", spy_seats="stratified")
  with pytest.raises(ValueError, match="spy_seats must be one of"):
    SpyGameConfig.for_task("facts", spy_seats="balanced")
