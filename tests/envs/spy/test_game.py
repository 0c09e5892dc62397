"""Tests for rlsvr.envs.spy.game: scripted full games of every task and variant."""
import functools
import json
import math
import random
import re

import numpy as np
import pytest

from rlsvr.data import bundled_corpus
from rlsvr.envs.base import Completion
from rlsvr.envs.spy import SpyGame, SpyGameConfig, mechanics
from rlsvr.envs.spy.game import item_fields
from rlsvr.rl import core
from rlsvr.sampling import choices as choices_lib

from .fakes import EOS, ByteTokenizer, ScriptedPolicy, spy_finding_detector, spy_marker_player

TASKS = ("summarisation", "writing", "math")


def _play(config, items, policy=None, step=1, seed=0, tokenizer=None):
  tokenizer = tokenizer or ByteTokenizer()
  policy = policy or ScriptedPolicy(
      tokenizer, functools.partial(spy_marker_player, task=config.task), spy_finding_detector)
  env = SpyGame(config, tokenizer, record_prompts=True)
  batch = env.play_episodes(items, policy, np.random.default_rng(seed), step)
  return env, policy, batch


def _players(batch, game):
  return [r for r in batch.trajectories if r.group_id == 2 * game]


def _detectors(batch, game):
  return [r for r in batch.trajectories if r.group_id == 2 * game + 1]


@pytest.mark.parametrize("task", TASKS)
def test_parallel_game(task):
  config = SpyGameConfig.for_task(task, rollout_n=3, sampling={"temperature": 0.7})
  items = bundled_corpus(task)[:4]
  env, policy, batch = _play(config, items)
  n, games = config.num_players, len(items)

  # Two batched calls: all players of all games, then all detectors.
  assert [len(texts) for texts, _ in policy.calls] == [games * n, games * config.rollout_n]
  assert policy.calls[0][1] == {"max_new_tokens": config.player_max_new_tokens, "temperature": 0.7}
  assert policy.calls[1][1]["max_new_tokens"] == config.detector_max_new_tokens
  assert len(batch.records) == games and len(batch.trajectories) == games * (n + 3)

  spies = set()
  for g, record in enumerate(batch.records):
    spy, reference = record["spy"], record["reference"]
    spies.add(spy)
    assert reference == mechanics.truncate_words(items[g].text, config.truncate_words)
    mask = record["mask"]
    assert mask["length"] == mechanics.span_length(len(reference), config.mask_fraction)
    masked = (reference[:mask["start"]] + "*" * mask["length"]
              + reference[mask["start"] + mask["length"]:])
    for p in record["players"]:
      is_spy = p["player"] == spy
      # The spy, and only the spy, sees the masked copy and is told so.
      assert (masked in p["prompt"]) == is_spy
      assert (reference in p["prompt"]) != is_spy
      assert ("you are the spy" in p["prompt"]) == is_spy
      assert f"{config.mask_fraction:.0%}" in p["prompt"]
      assert p["role"] == ("spy" if is_spy else "civilian")
    # Every detector judges the same game, with every public output in it.
    detector_prompts = {tuple(r.prompt_ids) for r in _detectors(batch, g)}
    assert len(detector_prompts) == 1
    assert all(p["public"] in record["detection_prompt"] for p in record["players"])
    assert reference in record["detection_prompt"]
    assert [d["vote"] for d in record["detectors"]] == [spy] * 3
    assert record["vote_counts"][spy - 1] == 3
    assert [r.role for r in _players(batch, g)].count("spy") == 1
    assert {r.role for r in _detectors(batch, g)} == {"detector"}
  assert batch.metrics["spy/detect_acc"] == 1.0
  assert batch.metrics["spy/invalid_vote_rate"] == 0.0
  assert batch.metrics["spy/spy_most_voted"] == 1.0
  assert batch.metrics["spy/perf_reward_spy"] == pytest.approx(-0.1 * 3)


def test_spy_choice_is_seeded_and_uniform():
  config = SpyGameConfig.for_task("writing", rollout_n=1)
  items = bundled_corpus("writing")
  spies = lambda seed: [r["spy"] for r in _play(config, items, seed=seed)[2].records]
  assert spies(1) == spies(1)
  counts = np.bincount(spies(1) + spies(2) + spies(3) + spies(4), minlength=6)[1:]
  assert len(counts) == 5 and counts.min() >= 8  # 96 games over 5 players


def test_rewards_baselines_and_phases():
  config = SpyGameConfig.for_task("summarisation", rollout_n=2)
  env, _, batch = _play(config, bundled_corpus("summarisation")[:2], step=1)
  rows = batch.trajectories
  # Every detector found the spy: raw 1, spy raw -β·2, civilians β·2/3.
  raw = {"detector": 1.0, "spy": -0.2, "civilian": 0.2 / 3}
  baselines = {role: 0.1 * value for role, value in raw.items()}
  assert env.state_dict()["baselines"] == {}  # Folded in once per step, by finish_step.
  env.finish_step(rows)
  assert env.state_dict()["baselines"] == pytest.approx(baselines)
  for row in rows:  # Raw rewards; the first step's baselines are the EMAs before it: 0.
    assert row.reward == pytest.approx(raw[row.role]) and row.baseline == 0
  # Step 1 of interactive trains the decision phase, step 2 the clue phase.
  assert all(r.trained == (r.role == "detector") for r in rows)
  _, _, batch2 = _play(config, bundled_corpus("summarisation")[:2], step=2)
  assert all(r.trained == (r.role != "detector") for r in batch2.trajectories)
  joint = SpyGameConfig.for_task("summarisation", rollout_n=2, joint=True)
  assert all(r.trained for r in _play(joint, bundled_corpus("summarisation")[:2])[2].trajectories)

  # Baselines carry over steps and through state_dict.
  env2 = SpyGame(config, ByteTokenizer())
  env2.load_state_dict(json.loads(json.dumps(env.state_dict())))
  assert env2.state_dict() == env.state_dict()


def test_detection_reward_released_mode():
  config = SpyGameConfig.for_task("writing", rollout_n=2, detection_reward="released")
  _, _, batch = _play(config, bundled_corpus("writing")[:1])
  assert [d["reward_raw"] for d in batch.records[0]["detectors"]] == pytest.approx([2.49, 2.49])


@pytest.mark.parametrize("task", TASKS)
def test_sequential_game(task):
  config = SpyGameConfig.for_task(task, "sequential", rollout_n=2)
  assert config.num_players == 2
  items = bundled_corpus(task)[:3]
  _, policy, batch = _play(config, items)
  assert [len(texts) for texts, _ in policy.calls] == [3, 3, 6]  # one call per turn
  for record in batch.records:
    assert record["spy"] == 2  # the spy speaks last
    first, second = record["players"]
    assert "Outputs of the players so far" not in first["prompt"]
    assert f"Player 1: {first['public']}" in second["prompt"]
    if task == "summarisation":
      assert record["mask"]["length"] == mechanics.span_length(len(record["reference"]), 0.5)
      assert "50%" in second["prompt"]
    else:  # writing and math give the spy no input
      assert record["mask"] is None
      assert record["reference"] not in second["prompt"]
      assert "did not receive" in second["prompt"]
    assert [d["vote"] for d in record["detectors"]] == [2, 2]


def test_sequential_players_see_exactly_the_earlier_outputs():
  config = SpyGameConfig.for_task("writing", "sequential", num_players=4, rounds=2, rollout_n=1)
  _, policy, batch = _play(config, bundled_corpus("writing")[:2])
  assert len(policy.calls) == 4 * 2 + 1
  players = batch.records[0]["players"]
  assert [(p["round"], p["player"]) for p in players] == [
      (r, k) for r in (1, 2) for k in range(1, 5)]
  for i, p in enumerate(players):
    for j, other in enumerate(players):
      label = f"Player {other['player']} (round {other['round']}): {other['public']}"
      assert (label in p["prompt"]) == (j < i)


def test_parallel_rounds_see_previous_rounds_only():
  config = SpyGameConfig.for_task("math", rounds=2, rollout_n=1)
  _, policy, batch = _play(config, bundled_corpus("math")[:2])
  assert [len(texts) for texts, _ in policy.calls] == [10, 10, 2]
  players = batch.records[1]["players"]
  for p in players:
    for other in players:
      label = f"Player {other['player']} (round 1): {other['public']}"
      assert (label in p["prompt"]) == (p["round"] == 2)
  assert len(_players(batch, 1)) == 10


def test_no_spy_variant():
  config = SpyGameConfig.for_task("writing", "no_spy", rollout_n=3)
  tokenizer = ByteTokenizer()
  votes = iter([3, 3, 1, 2, 4, 2])  # game 0: player 3; game 1: tie 2 vs 4 -> 2
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="writing"),
                          lambda prompt: f"\\boxed{{{next(votes)}}}")
  _, _, batch = _play(config, bundled_corpus("writing")[:2], policy=policy, tokenizer=tokenizer)
  assert [r["spy"] for r in batch.records] == [3, 2]
  for record in batch.records:
    assert record["mask"] is None
    for p in record["players"]:
      assert "you are the spy" not in p["prompt"] and record["reference"] in p["prompt"]
  assert [r.role for r in _players(batch, 0)] == ["civilian", "civilian", "spy", "civilian",
                                                   "civilian"]
  assert all(r.trained == (r.role != "detector") for r in batch.trajectories)
  # r_P with player 3 as the spy: counts [1, 0, 2, 0, 0].
  np.testing.assert_allclose(batch.records[0]["perf_rewards"],
                             mechanics.performance_rewards([3, 3, 1], 3, 5))
  with pytest.raises(ValueError):
    SpyGameConfig.for_task("writing", "no_spy", training_phase="interactive")


def _hostile_player(prompt):
  rng = random.Random(len(prompt))
  player = int(re.search(r"You are Player (\d+)", prompt).group(1))
  if player == 1:
    return Completion((), (), "length")  # empty completion
  if player == 2:
    ids = tuple(rng.randrange(259) for _ in range(300))  # invalid UTF-8, stray specials
    return Completion(ids, (-1.0,) * len(ids), "length")
  return "Answer: fine \\boxed{"


def _hostile_detector(prompt):
  # The four detectors of a game answer in turn: hashing the prompt would
  # give all four the same answer, so cycle on a counter kept on the function.
  _hostile_detector.calls += 1
  kind = _hostile_detector.calls % 4
  if kind == 0:
    text = ("\\boxed{" + "{" * 7 + "2") * 1500  # ~10k tokens, never closed
    return Completion(tuple(text.encode()), (-0.1,) * len(text), "length")
  if kind == 1:
    return "I choose \\boxed{3"  # cut off
  if kind == 2:
    return Completion((EOS,), (-0.1,), "eos")  # only EOS
  return "\\boxed{\\boxed{1}} \\boxed{N/A}"


_hostile_detector.calls = 0


@pytest.mark.parametrize("task", TASKS)
def test_hostile_outputs_never_crash(task):
  _hostile_detector.calls = 0
  config = SpyGameConfig.for_task(task, rollout_n=4, detection_reward="released")
  tokenizer = ByteTokenizer(as_mapping=True)
  policy = ScriptedPolicy(tokenizer, _hostile_player, _hostile_detector)
  _, _, batch = _play(config, bundled_corpus(task)[:2], policy=policy, tokenizer=tokenizer)
  assert all(math.isfinite(r.reward) for r in batch.trajectories)
  assert all(math.isfinite(v) for v in batch.metrics.values())
  record = batch.records[0]
  statuses = sorted(d["status"] for d in record["detectors"])
  assert statuses == ["abstain", "invalid: no complete \\boxed{}",
                      "invalid: no complete \\boxed{}", "invalid: no complete \\boxed{}"]
  rewards = sorted(d["reward_raw"] for d in record["detectors"])
  assert rewards == pytest.approx([-1.5, -1.5, -1.5, -0.3])
  first = record["players"][0]
  assert (first["output"], first["public"], first["finish_reason"]) == ("", "", "length")
  assert not first["public_status"] == "ok"
  assert "(no answer)" in record["detection_prompt"]
  # No valid vote: nobody gains or loses performance reward.
  assert record["perf_rewards"] == [0.0] * config.num_players
  assert batch.metrics["spy/invalid_vote_rate"] == 0.75
  assert batch.metrics["spy/clip_ratio/civilian"] > 0
  assert "invalid: no complete \\boxed{}" in batch.record_text
  json.dumps(batch.records)


def test_game_with_the_qwen3_tokenizer():
  tokenizer_module = pytest.importorskip("rlsvr.model.tokenizer")
  tokenizer = tokenizer_module.qwen3_tokenizer()
  eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
  config = SpyGameConfig.for_task("math", rollout_n=2)
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="math"),
                          spy_finding_detector, eos_id=eos_id)
  _, _, batch = _play(config, bundled_corpus("math")[:2], policy=policy, tokenizer=tokenizer)
  assert batch.metrics["spy/detect_acc"] == 1.0
  row = batch.trajectories[0]
  assert row.prompt_ids[:3] == [151644, 872, 198]  # <|im_start|>user\n
  assert row.completion_ids[-1] == eos_id
  assert batch.records[0]["players"][0]["output"].endswith("\\boxed{hidden}")


def test_empty_batch_and_sample_mismatch():
  config = SpyGameConfig.for_task("writing", rollout_n=1)
  _, _, batch = _play(config, [])
  assert batch.trajectories == [] and batch.records == [] and batch.record_text == ""
  env = SpyGame(config, ByteTokenizer())
  with pytest.raises(ValueError, match="completions"):
    env.play_episodes(["a story prompt"], lambda prompts, **kw: [], np.random.default_rng(0), 1)


def test_item_fields():
  assert item_fields("text", 3) == ("3", "text")
  assert item_fields({"id": "a", "text": "t"}, 0) == ("a", "t")
  assert item_fields(bundled_corpus("math")[0], 0) == ("math-0", bundled_corpus("math")[0].text)


@pytest.mark.parametrize("task", TASKS)
def test_answer_prefill_starts_every_reply_with_its_format_marker(task):
  """Replies that only continue the forced marker are parsed as if the model wrote it."""
  config = SpyGameConfig.for_task(task, rollout_n=2, answer_prefill=True)
  marker = "\\boxed{Problem:" if task == "math" else "Answer:"

  def player(prompt):
    assert prompt.endswith(marker)
    tag = spy_marker_player(prompt, task).split("\\boxed{" if task == "math" else "Answer:")[1]
    return tag if task != "math" else tag.split("}")[0] + "}"

  def detector(prompt):
    assert prompt.endswith("\\boxed{")
    return re.search(r"P(\d+)-SPY", prompt).group(1) + "}"  # the vote's rest, e.g. "3}"

  tokenizer = ByteTokenizer()
  env, policy, batch = _play(config, bundled_corpus(task)[:2],
                             ScriptedPolicy(tokenizer, player, detector), tokenizer=tokenizer)
  for record in batch.records:
    assert [p["public_status"] for p in record["players"]] == ["ok"] * config.num_players
    assert [d["vote"] for d in record["detectors"]] == [record["spy"]] * 2
  # The marker belongs to the prompt: trained tokens are only what the model wrote.
  for row in batch.trajectories:
    assert tokenizer.decode(row.prompt_ids).endswith(("Answer:", "\\boxed{Problem:", "\\boxed{"))


def _choosing_policy(tokenizer, pick):
  """A SampleFn: players as `spy_marker_player`; detectors must get `choices` and return one,
  `pick(prompt, answers)` says which (answers decoded, e.g. "3}")."""
  calls = []

  def sample(prompts, **kwargs):
    calls.append(kwargs)
    out = []
    for ids in prompts:
      text = tokenizer.decode(ids)
      if "You are the judge of" not in text:  # A player, or the plain task (no role).
        reply = (spy_marker_player(text, "summarisation").split("Answer:")[1]
                 if "You are Player" in text else " a plain summary")
        ids = tuple(tokenizer.encode(reply)) + (EOS,)
        out.append(Completion(ids, (-0.5,) * len(ids), "eos"))
        continue
      answers = [tokenizer.decode(c) for c in kwargs["choices"]]
      chosen = tuple(kwargs["choices"][answers.index(pick(text, answers))])
      out.append(Completion(chosen, (-0.1,) * len(chosen), "stop",
                            allowed=choices_lib.allowed_at(kwargs["choices"], chosen)))
    return out

  return sample, calls


def _vote_for_the_marked_spy(text, answers):
  del answers
  return re.search(r"Player (\d+): P\d+-SPY", text).group(1) + "}"


def test_constrained_votes_are_one_of_the_valid_answers():
  config = SpyGameConfig.for_task("summarisation", rollout_n=3, constrained_vote=True,
                                  answer_prefill=True, detector_max_new_tokens=64)
  tokenizer = ByteTokenizer()
  sample, calls = _choosing_policy(tokenizer, _vote_for_the_marked_spy)
  env = SpyGame(config, tokenizer, record_prompts=True)
  batch = env.play_episodes(bundled_corpus("summarisation")[:2], sample, np.random.default_rng(0), 1)
  detector_call = calls[-1]
  assert [tokenizer.decode(c) for c in detector_call["choices"]] == ["1}", "2}", "3}", "4}",
                                                                     "N/A}"]
  assert detector_call["max_new_tokens"] == 4  # the longest answer, not the free budget
  prompt = batch.records[0]["detection_prompt"]
  assert "`\\boxed{1}`, `\\boxed{2}`, `\\boxed{3}`, `\\boxed{4}`, `\\boxed{N/A}`" in prompt
  assert "Reason briefly" not in prompt
  for record in batch.records:
    assert [d["vote"] for d in record["detectors"]] == [record["spy"]] * 3
  assert batch.metrics["spy/invalid_vote_rate"] == 0.0
  detectors = [r for r in batch.trajectories if r.role == "detector"]
  assert all(tokenizer.decode(r.prompt_ids).endswith("\\boxed{") for r in detectors)
  assert all(r.max_new_tokens == 4 for r in detectors)


def test_a_vote_without_abstention_offers_and_draws_the_numbers_only():
  tokenizer = ByteTokenizer()
  for task, listed in (("summarisation", "`\\boxed{3}`, `\\boxed{4}`. A number"),
                       ("facts", "`\\boxed{3}` or `\\boxed{4}`.")):
    config = SpyGameConfig.for_task(task, rollout_n=2, constrained_vote=True, answer_prefill=True,
                                    vote_abstain=False)
    sample, calls = _choosing_policy(tokenizer, _vote_for_the_marked_spy)
    batch = SpyGame(config, tokenizer, record_prompts=True).play_episodes(
        bundled_corpus(task)[:1], sample, np.random.default_rng(0), 1)
    assert [tokenizer.decode(c) for c in calls[-1]["choices"]] == ["1}", "2}", "3}", "4}"]
    prompt = batch.records[0]["detection_prompt"]
    assert listed in prompt and "N/A" not in prompt
  with pytest.raises(ValueError, match="vote_abstain=False needs constrained_vote"):
    SpyGameConfig.for_task("facts", vote_abstain=False)


def test_detectors_sample_at_their_own_temperature_and_their_rows_say_so():
  """...and which tokens their constrained vote could take, for the update to score it so."""
  tokenizer = ByteTokenizer()
  for detector_temperature, expected in ((None, 0.7), (1.0, 1.0)):
    config = SpyGameConfig.for_task("summarisation", rollout_n=2, constrained_vote=True,
                                    answer_prefill=True, sampling={"temperature": 0.7},
                                    detector_temperature=detector_temperature)
    sample, calls = _choosing_policy(tokenizer, _vote_for_the_marked_spy)
    batch = SpyGame(config, tokenizer).play_episodes(bundled_corpus("summarisation")[:2],
                                                     sample, np.random.default_rng(0), 1)
    assert [c["temperature"] for c in calls] == [0.7, expected]  # Players, then detectors.
    temperature_of = {(t.role, t.temperature) for t in batch.trajectories}
    assert temperature_of == {("spy", 0.7), ("civilian", 0.7), ("detector", expected)}
    for t in batch.trajectories:
      assert (t.allowed_ids is None) == (t.role != "detector")
      if t.allowed_ids is not None:
        assert t.completion_ids[0] in t.allowed_ids[0] and len(t.allowed_ids[0]) >= 4
  with pytest.raises(ValueError, match="detector_temperature must be >= 0"):
    SpyGameConfig.for_task("facts", detector_temperature=-1.0)


def test_player_stop_strings_end_the_players_and_plain_outputs_not_the_votes():
  from configs.spy_summ import get_config
  from rlsvr.envs.spy.experiment import game_config

  tokenizer = ByteTokenizer()
  config = SpyGameConfig.for_task("summarisation", rollout_n=2, sampling={"temperature": 0.7},
                                  player_stop_strings=["\n"])
  assert config.player_stop_strings == ("\n",)
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="summarisation"),
                          spy_finding_detector)
  SpyGame(config, tokenizer).evaluate(bundled_corpus("summarisation")[:2], policy,
                                      np.random.default_rng(0))
  players, detectors, plain = (sampling for _, sampling in policy.calls)
  assert players["stop_strings"] == plain["stop_strings"] == ("\n",)
  assert "stop_strings" not in detectors and players["temperature"] == 0.7
  c = get_config("cpu")
  assert game_config(c).player_stop_strings == ()
  c.spy.player_stop_strings = ("\n",)
  assert game_config(c).sampling_of("player")["stop_strings"] == ("\n",)
  for bad in ("\n", ("",), (1,)):
    with pytest.raises(ValueError, match="player_stop_strings must be a tuple"):
      SpyGameConfig.for_task("facts", player_stop_strings=bad)


def test_evaluate_scores_games_without_touching_the_training_state():
  config = SpyGameConfig.for_task("summarisation", rollout_n=2, constrained_vote=True,
                                  answer_prefill=True)
  tokenizer = ByteTokenizer()
  env = SpyGame(config, tokenizer)
  env.baselines.load_state_dict({"spy": 0.5, "civilian": -0.1})
  before = env.state_dict()
  games = bundled_corpus("summarisation")[:6]
  evaluate = lambda pick: env.evaluate(games, _choosing_policy(tokenizer, pick)[0],
                                       np.random.default_rng(0))

  finder = evaluate(_vote_for_the_marked_spy)
  assert env.state_dict() == before and evaluate(_vote_for_the_marked_spy) == finder
  assert (finder["detect_acc"], finder["detect_acc/se"]) == (1.0, 0.0)
  assert (finder["vote_share_spy"], finder["vote_share_civilian"]) == (1.0, 0.0)
  assert finder["caught"] == 1.0
  assert finder["invalid_vote_rate"] == 0.0 and finder["chance_detect_acc"] == 0.25

  abstainer = evaluate(lambda text, answers: "N/A}")
  assert abstainer["abstain_rate"] == 1.0 and abstainer["detect_acc"] == 0.0
  assert np.isnan(abstainer["vote_share_spy"])  # no valid vote: no share to report
  assert abstainer["caught"] == 0.0  # nobody has the most votes

  # Everyone votes Player 1: the accuracy is the share of games whose spy is Player 1.
  ones = evaluate(lambda text, answers: "1}")
  rng = np.random.default_rng(0)
  hits = [float(env._new_game(i, g, rng).spy == 1) for i, g in enumerate(games)]
  assert ones["detect_acc"] == pytest.approx(np.mean(hits))
  assert ones["detect_acc/se"] == pytest.approx(np.std(hits, ddof=1) / np.sqrt(len(hits)))
  assert ones["vote_share_spy"] == pytest.approx(np.mean(hits))
  assert ones["caught"] == pytest.approx(np.mean(hits))  # the verdict is unanimous


def _copying_policy(tokenizer):
  """Players (and plain prompts) answer with their copy of the sheet; detectors vote 1."""
  def sample(prompts, **kwargs):
    out = []
    for ids in prompts:
      text = tokenizer.decode(ids)
      if "\nPlayer 1: " in text:  # A detector's prompt lists every player's output.
        reply = "1}"
      else:
        reply = " " + re.search(r"<fact sheet>\n(.*)\n</fact sheet>", text).group(1)
      ids = tuple(tokenizer.encode(reply)) + (EOS,)
      out.append(Completion(ids, (-0.5,) * len(ids), "eos"))
    return out
  return sample


def test_evaluate_reports_the_ceiling_the_recall_and_the_plain_task():
  """Players who copy their copy: the spy's output shows the mask, so the scripted
  detectors find every spy while voting 1 finds a quarter; civilians recall the whole
  sheet, the spy less; with the plain prompt everyone recalls all of it."""
  config = SpyGameConfig.for_task("facts", rollout_n=2, constrained_vote=True,
                                  answer_prefill=True)
  tokenizer = ByteTokenizer()
  env = SpyGame(config, tokenizer)
  calls = []
  policy = _copying_policy(tokenizer)
  sample = lambda prompts, **kw: calls.append(len(prompts)) or policy(prompts, **kw)
  got = env.evaluate(bundled_corpus("facts")[:8], sample, np.random.default_rng(0),
                     games_per_call=4)
  assert got["ceiling/mask_chars"] == 1.0 and got["ceiling/best_per_game"] == 1.0
  assert got["ceiling/least_recall"] == 1.0
  assert 0.0 < got["detect_acc"] < 0.6  # Voting 1 hits the games whose spy is player 1.
  assert got["recall/civilian"] == 1.0 and 0.5 < got["recall/spy"] < 1.0
  assert got["recall/spy/se"] > 0.0
  assert (got["plain_recall"], got["plain_recall/se"]) == (1.0, 0.0)
  # Players, detectors, players, detectors, then the plain prompts at the players' row count.
  assert calls == [16, 8, 16, 8, 16, 16]


def test_the_no_spy_variant_reports_no_ceiling_and_no_verdict():
  config = SpyGameConfig.for_task("facts", "no_spy", rollout_n=2, constrained_vote=True,
                                  answer_prefill=True)
  tokenizer = ByteTokenizer()
  got = SpyGame(config, tokenizer).evaluate(bundled_corpus("facts")[:2],
                                            _copying_policy(tokenizer), np.random.default_rng(0))
  assert not any(k.startswith("ceiling/") for k in got) and got["plain_recall"] == 1.0
  assert "caught" not in got  # its spy is the most-voted player by rule


def test_rotated_detectors_read_every_order_and_their_votes_map_back():
  config = SpyGameConfig.for_task("summarisation", rollout_n=8, detector_orders="rotated")
  n, items = config.num_players, bundled_corpus("summarisation")[:2]
  env, policy, batch = _play(config, items)
  detector_texts = policy.calls[1][0]
  for g, record in enumerate(batch.records):
    spy = record["spy"]
    orders = [tuple(d["order"]) for d in record["detectors"]]
    assert orders == [tuple((k + r) % n + 1 for k in range(n)) for r in range(8)]
    for r, order in enumerate(orders):
      # "Player k" shows the output of player order[k - 1] (each output names its writer).
      shown = re.findall(r"Player (\d+): P(\d+)-", detector_texts[g * 8 + r])
      assert [(int(k), int(p)) for k, p in shown] == list(enumerate(order, start=1))
      # The detector wrote the spy's shown number; the game counts the player.
      assert record["detectors"][r]["box"] == str(order.index(spy) + 1)
      assert record["detectors"][r]["vote"] == spy
    assert record["vote_counts"][spy - 1] == 8
    assert len({tuple(t.prompt_ids) for t in _detectors(batch, g)}) == n
  assert batch.metrics["spy/detect_acc"] == 1.0
  assert batch.metrics["spy/top_position_share"] == 0.25  # the spy's shown number varies
  assert "reads players [2, 3, 4, 1] as 1..4" in batch.record_text


@pytest.mark.parametrize("orders, hits", [("same", None), ("rotated", 2)])
def test_rotated_detectors_make_a_fixed_position_earn_chance_in_every_group(orders, hits):
  # A detector that always names the first position: under one order it is right in all
  # of a game's 8 votes or none; rotated, in exactly 8 / 4 of them, whoever the spy is.
  config = SpyGameConfig.for_task("summarisation", rollout_n=8, detector_orders=orders)
  tokenizer = ByteTokenizer()
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task=config.task),
                          lambda prompt: "\\boxed{1}")
  _, _, batch = _play(config, bundled_corpus("summarisation")[:4], policy=policy, seed=3)
  for g, record in enumerate(batch.records):
    rewards = [t.reward for t in _detectors(batch, g)]
    assert sum(rewards) == (hits if hits is not None else 8 * (record["spy"] == 1))
  assert batch.metrics["spy/top_position_share"] == 1.0


@pytest.mark.parametrize("orders", ["same", "rotated"])
def test_prompt_groups_hold_the_detectors_that_read_one_prompt(orders):
  config = SpyGameConfig.for_task("summarisation", rollout_n=8, detector_orders=orders,
                                  detector_groups="prompt")
  _, _, batch = _play(config, bundled_corpus("summarisation")[:3])
  detectors = [t for t in batch.trajectories if t.role == "detector"]
  groups: dict[int, set] = {}
  for t in detectors:
    groups.setdefault(t.group_id, set()).add(tuple(t.prompt_ids))
  assert all(len(prompts) == 1 for prompts in groups.values())  # one prompt a group
  assert len(groups) == 3 * (config.num_players if orders == "rotated" else 1)
  players = {t.group_id for t in batch.trajectories if t.role != "detector"}
  assert players == {0, 2, 4} and not players & set(groups)


def test_prompt_groups_give_a_fixed_position_no_advantage():
  # A vote for the first position under rotated orders: per game its rewards vary over
  # the orders (2 of 8 right), so one group per game rewards the orders where the spy
  # happens to sit first; per prompt every group is all right or all wrong, no signal.
  tokenizer = ByteTokenizer()
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="summarisation"),
                          lambda prompt: "\\boxed{1}")
  advantages = {}
  for groups in ("game", "prompt"):
    config = SpyGameConfig.for_task("summarisation", rollout_n=8, detector_orders="rotated",
                                    detector_groups=groups)
    _, _, batch = _play(config, bundled_corpus("summarisation")[:2], policy=policy)
    rows = [t for t in batch.trajectories if t.role == "detector"]
    advantages[groups] = np.asarray(core.group_advantages(
        np.array([t.reward for t in rows]), np.array([t.group_id for t in rows])))
  assert np.abs(advantages["game"]).max() > 1.0
  np.testing.assert_array_equal(advantages["prompt"], 0.0)


@pytest.mark.parametrize("count", range(0, 14))
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_stratified_seats_put_the_spy_at_every_seat_equally_often(count, n):
  seats = mechanics.stratified_seats(count, n, np.random.default_rng(count * 7 + n))
  assert len(seats) == count and set(seats) <= set(range(1, n + 1))
  counts = np.bincount(seats, minlength=n + 1)[1:]
  assert counts.max() - counts.min() <= 1  # whole rounds, then distinct seats
  assert counts.min() == count // n


def test_stratified_seats_are_uniform_for_each_game():
  # Each game's seat alone is uniform (nothing in one game tells where its spy sits),
  # including the games of an incomplete round.
  rng = np.random.default_rng(0)
  draws = np.array([mechanics.stratified_seats(6, 4, rng) for _ in range(4000)])
  for game in range(6):
    shares = np.bincount(draws[:, game], minlength=5)[1:] / len(draws)
    np.testing.assert_allclose(shares, 0.25, atol=0.03)


def test_a_fixed_position_earns_chance_over_a_stratified_step():
  # One prompt per game, read in the paper's order: a vote for the first position wins
  # every vote of one game in four, so the step's games cancel that preference.
  config = SpyGameConfig.for_task("summarisation", rollout_n=8, spy_seats="stratified")
  tokenizer = ByteTokenizer()
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task=config.task),
                          lambda prompt: "\\boxed{1}")
  for seed in range(3):
    _, _, batch = _play(config, bundled_corpus("summarisation")[:8], policy=policy, seed=seed)
    assert sorted(r["spy"] for r in batch.records) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert sum(t.reward for t in batch.trajectories if t.role == "detector") == 16
    assert all(len({tuple(t.prompt_ids) for t in _detectors(batch, g)}) == 1 for g in range(8))


def test_independent_seats_are_the_default_and_draw_as_before():
  config = SpyGameConfig.for_task("summarisation", rollout_n=2)
  assert config.spy_seats == "independent"
  _, _, batch = _play(config, bundled_corpus("summarisation")[:8], seed=5)
  rng = np.random.default_rng(5)
  expected = []
  for item in bundled_corpus("summarisation")[:8]:  # a seat, then a mask, per game
    expected.append(int(rng.integers(1, 5)))
    mechanics.mask_span(mechanics.truncate_words(item_fields(item, 0)[1], 16000),
                        config.mask_fraction, rng)
  assert [r["spy"] for r in batch.records] == expected
