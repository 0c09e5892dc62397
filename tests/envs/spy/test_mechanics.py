"""Tests for rlsvr.envs.spy.mechanics: votes, masks, rewards, baselines, phases."""
import time

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from rlsvr.envs.spy import mechanics
from rlsvr.envs.spy import (detection_reward, mask_span, parse_vote, performance_rewards,
                            phase_at)

NA = "N/A"

# (response, num_players, pick, expected vote)
VOTE_TABLE = [
    ("\\boxed{3}", 4, "last", 3),
    ("\\boxed{ 3 }", 4, "last", 3),
    ("\\boxed{\n2\n}", 4, "last", 2),
    ("\\boxed{1} then \\boxed{2}", 4, "last", 2),
    ("\\boxed{1} then \\boxed{2}", 4, "first", 1),
    ("\\boxed{2}\\boxed{3}", 4, "last", 3),
    ("\\boxed{N/A}", 4, "last", NA),
    ("\\boxed{n/a}", 4, "last", NA),
    ("\\boxed{NA}", 4, "last", NA),
    ("\\boxed{na}", 4, "last", NA),
    ("\\boxed{ N / A }", 4, "last", NA),
    ("\\boxed{N.A.}", 4, "last", None),
    ("\\boxed{3} \\boxed{N/A}", 4, "last", NA),
    ("\\boxed{3} \\boxed{N/A}", 4, "first", 3),
    ("\\boxed{0}", 4, "last", None),
    ("\\boxed{5}", 4, "last", None),
    ("\\boxed{4}", 4, "last", 4),
    ("\\boxed{5}", 5, "last", 5),
    ("\\boxed{-1}", 4, "last", None),
    ("\\boxed{+2}", 4, "last", None),
    ("\\boxed{02}", 4, "last", 2),
    ("\\boxed{2.0}", 4, "last", None),
    ("\\boxed{12}", 4, "last", None),
    ("\\boxed{99999999999999999999999}", 5, "last", None),
    ("\\boxed{1, 2}", 4, "last", None),
    ("\\boxed{1 2}", 4, "last", None),  # whitespace removed: "12", out of range
    ("\\boxed{Player 2}", 4, "last", None),
    ("\\boxed{３}", 4, "last", None),  # full-width digit
    ("\\boxed{ ２ }", 4, "last", None),
    ("", 4, "last", None),
    ("I vote for player 3.", 4, "last", None),
    ("\\boxed{}", 4, "last", None),
    ("\\boxed{3", 4, "last", None),  # cut off by the length limit
    ("\\boxed{2} and finally \\boxed{3", 4, "last", 2),
    ("\\boxed{{3}}", 4, "last", None),  # nested braces belong to the content
    ("\\boxed{\\boxed{3}}", 4, "last", None),
    ("\\boxed{\\text{3}}", 4, "last", None),
    ("}}}\\boxed{2}{{{", 4, "last", 2),
    ("{ \\boxed{2} ", 4, "last", 2),
    ("\\boxed {2}", 4, "last", None),
    ("\\Boxed{2}", 4, "last", None),
    ("\\fbox{2}", 4, "last", None),
    ("$\\boxed{2}$.", 4, "last", 2),
    ("\\boxed{abc} \\boxed{2}", 4, "first", None),
    ("\\boxed{N/A} \\boxed{3}", 4, "first", NA),
]


@pytest.mark.parametrize("text,num_players,pick,expected", VOTE_TABLE)
def test_parse_vote_table(text, num_players, pick, expected):
  assert parse_vote(text, num_players, pick=pick) == expected


def test_vote_table_is_large():
  assert len(VOTE_TABLE) >= 30


def test_parse_vote_detail_says_why():
  assert mechanics.parse_vote_detail("", 4).status == "invalid: no complete \\boxed{}"
  assert mechanics.parse_vote_detail("\\boxed{7}", 4).status == "invalid: not a player in 1..4"
  assert mechanics.parse_vote_detail("\\boxed{x}", 4).box == "x"
  with pytest.raises(ValueError):
    parse_vote("\\boxed{1}", 4, pick="middle")


@pytest.mark.parametrize("text", [
    "\\boxed{" * 20000,
    "{" * 40000 + "\\boxed{1}",
    "}" * 40000,
    ("\\boxed{1" + "{" * 10) * 3000,
])
def test_parse_vote_is_linear_on_hostile_input(text):
  start = time.perf_counter()
  parse_vote(text, 5)
  assert time.perf_counter() - start < 1.0


def test_find_boxes_top_level_only():
  assert mechanics.find_boxes("a \\boxed{x{y}} b \\boxed{\\boxed{z}} \\boxed{open") == [
      "x{y}", "\\boxed{z}"]


def test_truncate_words_keeps_prefix_spacing():
  assert mechanics.truncate_words("a  b\nc d", 3) == "a  b\nc"
  assert mechanics.truncate_words("  a b  ", 5) == "  a b  "
  assert mechanics.truncate_words("", 3) == ""
  with pytest.raises(ValueError):
    mechanics.truncate_words("a", 0)


@pytest.mark.parametrize("num_chars,fraction,expected", [
    (100, 0.2, 20), (10, 0.4, 4), (3, 0.2, 1), (1, 0.2, 1), (0, 0.2, 0), (7, 0.5, 4),
    (5, 0.5, 2), (10, 1.0, 10), (10, 0.0, 1),  # half to even; never below 1
])
def test_span_length(num_chars, fraction, expected):
  assert mechanics.span_length(num_chars, fraction) == expected


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_mask_span_rule(text, fraction, seed):
  masked = mask_span(text, fraction, seed)
  assert masked.length == mechanics.span_length(len(text), fraction)
  assert 0 <= masked.start <= len(text) - masked.length
  assert len(masked.text) == len(text)
  assert masked.text[masked.start:masked.start + masked.length] == "*" * masked.length
  assert masked.text[:masked.start] == text[:masked.start]
  assert masked.text[masked.start + masked.length:] == text[masked.start + masked.length:]
  assert mask_span(text, fraction, seed) == masked  # seeded


def test_mask_span_start_is_uniform():
  starts = [mask_span("x" * 10, 0.2, seed).start for seed in range(2000)]
  counts = np.bincount(starts, minlength=9)
  assert len(counts) == 9  # starts 0..8
  assert counts.min() > 150  # 2000/9 ~ 222 each


def test_mask_span_advances_a_generator():
  rng = np.random.default_rng(0)
  starts = {mask_span("y" * 1000, 0.1, rng).start for _ in range(10)}
  assert len(starts) > 1


def test_performance_rewards_formula():
  votes = [2, 2, 2, 1, None, NA, 3, 2]
  rewards = performance_rewards(votes, spy=2, num_players=4)
  civ_mean = 2 / 3
  delta = 4 - civ_mean
  expected = [0.1 * delta / 3 - 0.1 * (1 - civ_mean), -0.1 * delta,
              0.1 * delta / 3 - 0.1 * (1 - civ_mean), 0.1 * delta / 3 - 0.1 * (0 - civ_mean)]
  np.testing.assert_allclose(rewards, expected, atol=1e-12)


def test_performance_rewards_beta_lambda():
  rewards = performance_rewards([1, 1, 3], spy=1, num_players=3, beta=0.5, lam=0.2)
  # counts [2, 0, 1], civ mean 0.5, delta 1.5
  np.testing.assert_allclose(rewards, [-0.75, 0.375 + 0.1, 0.375 - 0.1])


def test_performance_rewards_no_votes_and_ties():
  assert performance_rewards([], spy=1, num_players=4) == [0.0] * 4
  assert performance_rewards([None, NA, 9, 0], spy=3, num_players=4) == [0.0] * 4
  # Everyone equally voted: delta 0, no deviations.
  np.testing.assert_allclose(performance_rewards([1, 2, 3, 4], spy=2, num_players=4), [0.0] * 4)
  # Spy tied with one civilian.
  rewards = performance_rewards([1, 1, 2, 2], spy=2, num_players=4)
  civ_mean, delta = 2 / 3, 2 - 2 / 3
  np.testing.assert_allclose(rewards, [0.1 * delta / 3 - 0.1 * (2 - civ_mean), -0.1 * delta,
                                       0.1 * delta / 3 + 0.1 * civ_mean,
                                       0.1 * delta / 3 + 0.1 * civ_mean])


def test_performance_rewards_rejects_bad_spy():
  with pytest.raises(ValueError):
    performance_rewards([1], spy=0, num_players=4)
  with pytest.raises(ValueError):
    performance_rewards([1], spy=1, num_players=1)


_VOTES = st.one_of(st.integers(-2, 10), st.just(NA), st.none(), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(1, n), st.lists(_VOTES, max_size=20))),
       st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_performance_rewards_zero_sum(game, beta, lam):
  n, spy, votes = game
  rewards = performance_rewards(votes, spy, n, beta=beta, lam=lam)
  assert len(rewards) == n
  assert abs(sum(rewards)) < 1e-9
  counts = mechanics.vote_counts(votes, n)
  civ_mean = (sum(counts) - counts[spy - 1]) / (n - 1)
  # The spy loses exactly when it drew more votes than the average civilian.
  assert (rewards[spy - 1] < 0) == (beta > 0 and counts[spy - 1] > civ_mean)


def test_vote_counts_ignore_bools_and_out_of_range():
  assert mechanics.vote_counts([True, 1, 0, 4, 5, NA, None], 4) == [1, 0, 0, 1]


def test_most_voted_ties_to_lowest_id():
  assert mechanics.most_voted([3, 2, 3, 2], 4) == 2
  assert mechanics.most_voted([4, 4, 1], 4) == 4
  assert mechanics.most_voted([], 4) == 1
  assert mechanics.most_voted([None, NA], 3) == 1


@pytest.mark.parametrize("vote,spy,paper,released", [
    (2, 2, 1.0, 2.49),
    (NA, 2, 0.0, -0.3),
    (1, 2, 0.0, -0.9),
    (None, 2, 0.0, -1.5),
    (True, 1, 0.0, -0.9),
])
def test_detection_reward_modes(vote, spy, paper, released):
  assert detection_reward(vote, spy) == paper
  assert detection_reward(vote, spy, mode="paper") == paper
  assert detection_reward(vote, spy, mode="released") == pytest.approx(released)


def test_detection_reward_unknown_mode():
  with pytest.raises(ValueError):
    detection_reward(1, 1, mode="other")


@pytest.mark.parametrize("cycle,expected", [
    (1, "dcdcdcdc"),
    (2, "ddccddcc"),
    (3, "dddcccdd"),
])
def test_phase_at_interactive(cycle, expected):
  got = "".join(phase_at(step, "interactive", cycle)[0] for step in range(1, 9))
  assert got == expected


def test_phase_at_fixed_and_errors():
  assert all(phase_at(s, "clue", 3) == "clue" for s in range(1, 10))
  assert all(phase_at(s, "decision") == "decision" for s in range(1, 10))
  for args in [(0, "interactive", 1), (1, "interactive", 0), (1, "both", 1)]:
    with pytest.raises(ValueError):
      phase_at(*args)


def test_public_output_answer_line():
  text = "I think.\n  Answer: the gist\nmore lines\nAnswer: again"
  out = mechanics.public_output(text, "summarisation")
  assert out == mechanics.PublicOutput("the gist\nmore lines\nAnswer: again", True, "ok")
  assert mechanics.public_output("no marker here", "writing").ok is False
  assert mechanics.public_output("", "writing").text == ""
  # "Answer:" inside a line does not count.
  assert mechanics.public_output("My Answer: x", "writing").ok is False


def test_public_output_math_first_complete_box():
  assert mechanics.public_output("x \\boxed{a{b}} \\boxed{c}", "math").text == "a{b}"
  out = mechanics.public_output("\\boxed{cut off", "math")
  assert (out.text, out.ok) == ("", False)


def test_role_baselines():
  baselines = mechanics.RoleBaselines(0.9)
  got = baselines.update([1.0, 1.0, 0.0, 0.5], ["spy", "spy", "civilian", "detector"])
  assert got == pytest.approx({"spy": 0.1, "civilian": 0.0, "detector": 0.05})
  got = baselines.update([2.0, -1.0], ["spy", "civilian"])
  assert got == pytest.approx({"spy": 0.29, "civilian": -0.1, "detector": 0.05})
  restored = mechanics.RoleBaselines(0.9)
  restored.load_state_dict(baselines.state_dict())
  assert restored.values == baselines.values
  with pytest.raises(ValueError):
    mechanics.RoleBaselines(1.5)


def test_spy_caught_needs_strictly_the_most_valid_votes():
  assert mechanics.spy_caught([2, 2, 1, 3, 4], spy=2, num_players=4)  # plurality, no majority
  assert not mechanics.spy_caught([2, 2, 1, 1, 3], spy=2, num_players=4)  # a tie for the most
  assert not mechanics.spy_caught([1, 1, 2], spy=2, num_players=4)
  assert not mechanics.spy_caught([NA, None, 9], spy=1, num_players=4)  # no valid vote
  assert mechanics.spy_caught([4, NA, None, 7], spy=4, num_players=4)  # invalid votes count for none
