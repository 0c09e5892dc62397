"""bench/spy_ceiling.py and bench/learning_spy.py end to end on the smoke game (seconds);
bench/spy_probe.py's prompts and probes."""
import json
import re
import sys

import numpy as np
import pytest

from bench import learning_spy, spy_ceiling


def test_the_ceiling_bench_reports_every_scripted_detector(tmp_path, monkeypatch, capsys):
  out = tmp_path / "ceiling.json"
  monkeypatch.setattr(sys, "argv", ["spy_ceiling.py", "--config", "configs/spy_summ.py:smoke",
                                    "--games", "2", "--json", str(out)])
  spy_ceiling.main()
  got = json.loads(out.read_text())
  assert got["games"] == 2 and got["chance_detect_acc"] == 0.25
  for name in ("mask_chars", "least_recall", "most_unsupported", "missed_consensus",
               "best_per_game", "best_per_game_chance"):
    assert 0.0 <= got[f"ceiling/{name}"] <= 1.0
  assert 0.0 <= got["plain_recall"] <= 1.0
  printed = capsys.readouterr().out
  assert "scripted: missed_consensus" in printed and "model's detectors" in printed


def test_the_ceiling_bench_plays_the_config_its_sets_give(tmp_path, monkeypatch):
  out = tmp_path / "ceiling.json"
  monkeypatch.setattr(sys, "argv", ["spy_ceiling.py", "--config", "configs/spy_summ.py:smoke",
                                    "--games", "1", "--set", "spy.num_players=3",
                                    "--json", str(out)])
  spy_ceiling.main()
  got = json.loads(out.read_text())
  assert got["set"] == ["spy.num_players=3"] and got["chance_detect_acc"] == 1 / 3


def test_the_learning_bench_trains_each_seed_and_reads_its_outputs(tmp_path, monkeypatch,
                                                                    capsys):
  out = tmp_path / "learning.json"
  argv = ["learning_spy.py", "--config", "configs/spy_summ.py:smoke", "--seeds", "0",
          "--set", "steps=2", "--set", "heldout.size=2", "--set", "grpo.lr=1e-4",
          "--workdir", str(tmp_path / "runs"), "--json", str(out)]
  monkeypatch.setattr(sys, "argv", argv)
  learning_spy.main()
  seed = json.loads(out.read_text())["seeds"]["0"]
  assert (seed["before"]["step"], seed["after"]["step"]) == (0, 2)
  assert seed["steps"]["decision/steps"] == seed["steps"]["clue/steps"] == 1.0
  assert "ceiling/best_per_game" in seed["after"]
  # A finished seed is read back, not trained again.
  learning_spy.main()
  assert json.loads(out.read_text())["seeds"]["0"]["train_s"] == seed["train_s"]
  assert "mean over seeds [0]" in capsys.readouterr().out


def test_probe_line_ends_are_each_players_last_token():
  from bench import spy_probe
  from rlsvr.envs.spy import SpyGame, SpyGameConfig
  from rlsvr.model.tokenizer import qwen3_tokenizer

  tokenizer = qwen3_tokenizer()
  game = SpyGame(SpyGameConfig.for_task("facts", constrained_vote=True), tokenizer)
  sheets = ["Name: Ann Lee. Age: 30. Job: pilot.", "Name: Bo Kim. Age: 41. Pets: a cat."]
  boxed = tokenizer.encode("\\boxed{", add_special_tokens=False)
  for sheet, (ids, spy, ends) in zip(sheets, spy_probe.idealised_games(game, sheets, seed=3)):
    assert 1 <= spy <= 4 and ids[-len(boxed):] == boxed
    for player, end in enumerate(ends, 1):
      line = tokenizer.decode(ids[:end + 1]).rsplit(f"Player {player}: ", 1)[1].rstrip("\n")
      assert f"Player {player}: " + line not in tokenizer.decode(ids[:end])  # Its last token.
      if player == spy:  # Its masked copy: as long as the sheet, a span of it `*`.
        assert len(line) == len(sheet) and "*" in line and line != sheet
      else:
        assert line == sheet


def test_an_idealised_spy_that_drops_its_masked_span_shows_no_mask():
  from bench import spy_probe
  from rlsvr.envs.spy import SpyGameConfig

  config = SpyGameConfig.for_task("facts", mask_fraction=0.4)
  sheet = "Name: Ann Lee. Age: 30. Job: pilot. Pets: a cat. Home: Leeds."
  for seed in range(5):
    masked = spy_probe.idealised_players(config, sheet, np.random.default_rng(seed))
    dropped = spy_probe.idealised_players(config, sheet, np.random.default_rng(seed),
                                          spy_line="dropped")
    reference, spy, texts = dropped
    assert (reference, spy) == masked[:2] and "*" in masked[2][spy]
    assert "*" not in texts[spy] and len(texts[spy]) < len(sheet) - 0.3 * len(sheet)
    kept = masked[2][spy].split("*")  # What is left of the sheet around the span.
    assert all(" ".join(part.split()) in texts[spy] for part in kept)
    assert all(texts[p] == sheet for p in texts if p != spy)


def test_probes_find_a_linearly_coded_spy_and_not_a_random_one():
  from bench import spy_probe

  rng = np.random.default_rng(0)
  games, players, width = 200, 4, 6
  spies = rng.integers(1, players + 1, size=games)
  noise = lambda *shape: rng.normal(size=shape)
  vote_x = noise(games, width)
  vote_x[np.arange(games), spies - 1] += 3.0  # The spy's number, one-hot in the features.
  line_x = noise(games, players, width)
  line_x[np.arange(games), spies - 1, 5] += 4.0  # One feature marks the spy's line.
  vote, line = spy_probe.probe(vote_x, line_x, spies, num_train=150, num_test_from=150)
  assert vote[0] >= 0.9 and line[0] >= 0.9
  shuffled = rng.permutation(spies)
  vote, line = spy_probe.probe(vote_x, line_x, shuffled, num_train=150, num_test_from=150)
  assert vote[0] <= 0.5 and line[0] <= 0.5


def test_step_diagnostics_count_groups_without_spread_with_and_without_filtering(tmp_path):
  rows = [{"spy/phase_decision": 1.0, "spy/detect_acc": 0.5, "frac_reward_zero_std": 0.25,
           "actor/grad_norm": 1.0, "perf/step_s": 2.0},
          {"spy/phase_decision": 1.0, "spy/detect_acc": 0.0, "frac_reward_zero_std": 1.0,
           "actor/grad_norm": 0.0, "perf/step_s": 4.0}]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  got = learning_spy.step_diagnostics(str(tmp_path))
  assert got["decision/no_spread_share"] == 0.625 and got["decision/steps"] == 2.0
  assert got["step_s"] == 3.0 and "clue/steps" not in got
  rows[0].update({"filter/groups_kept": 3.0, "filter/groups_dropped": 1.0})
  rows[1].update({"filter/groups_kept": 0.0, "filter/groups_dropped": 4.0})
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert learning_spy.step_diagnostics(str(tmp_path))["decision/no_spread_share"] == 0.625


def _smoke_game():
  from configs.spy_summ import get_config
  from rlsvr.envs.spy import SpyGame
  from rlsvr.envs.spy.experiment import game_config
  from rlsvr.model import sources

  c = get_config("smoke")
  c.spy.constrained_vote = True
  return SpyGame(game_config(c), sources.tokenizer_for(c.model.source, c.model.tokenizer))


def test_readout_games_show_each_game_in_every_order_with_the_spy_where_it_says():
  from bench import spy_readout
  from rlsvr.data.bundled import fact_sheets

  game = _smoke_game()
  games = spy_readout.shown_games(game, fact_sheets(3, seed=5), np.random.default_rng(0), 4)
  for orders in games:
    assert sorted(spy for _, spy in orders) == [1, 2, 3, 4]  # every shown number once
    for ids, spy in orders:
      text = game.tokenizer.decode(ids)
      starred = [line for line in text.split("\n") if line.startswith("Player ") and "*" in line]
      assert len(starred) == 1 and starred[0].startswith(f"Player {spy}:")
  (one,) = spy_readout.shown_games(game, fact_sheets(1, seed=5), np.random.default_rng(0), 1)
  assert len(one) == 1


def test_readout_played_games_show_what_the_players_wrote_with_the_spy_where_it_says():
  import functools

  from bench import spy_readout
  from rlsvr.envs.spy import SpyGame, SpyGameConfig
  from tests.envs.spy.fakes import ByteTokenizer, ScriptedPolicy, spy_marker_player

  tokenizer = ByteTokenizer()
  game = SpyGame(SpyGameConfig.for_task("summarisation", mask_fraction=0.3), tokenizer)
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="summarisation"),
                          detector=None)
  documents = [f"Sheet {i}: the fox is {i} years old and lives in Oslo." for i in range(5)]
  games, ceiling = spy_readout.played_games(game, documents, np.random.default_rng(0), 4,
                                            policy, per_call=2)
  assert [len(texts) for texts, _ in policy.calls] == [8, 8, 4]  # 4 players a game
  assert len(games) == len(ceiling) == 5
  for document, orders in zip(documents, games):
    assert sorted(spy for _, spy in orders) == [1, 2, 3, 4]
    for ids, spy in orders:
      text = tokenizer.decode(ids)
      assert document in text  # The detectors read the reference, as in the game.
      lines = [line for line in text.split("\n") if re.match(r"Player \d+", line)]
      assert len(lines) == 4 and all("P" in line and "text" in line for line in lines)
      (spy_line,) = [line for line in lines if "-SPY" in line]
      assert spy_line.startswith(f"Player {spy}:")
  assert all(set(c) >= {"least_recall", "best_per_game"} for c in ceiling)
  (one,), _ = spy_readout.played_games(game, documents[:1], np.random.default_rng(0), 1, policy)
  assert len(one) == 1


def test_readout_rows_reward_the_spy_and_form_one_group_per_game():
  from bench import spy_readout

  choices = [[1], [2], [3], [4], [5, 6]]
  games = [[([7, 8], 2), ([7, 9], 3)], [([7, 10], 4)]]
  probs = np.array([[0.1, 0.6, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 1.0, 0.0],
                    [0.2, 0.2, 0.2, 0.2, 0.2]])
  rng = np.random.default_rng(0)
  label = spy_readout.step_rows(games, probs, choices, "label", 0, rng, step=1,
                                temperature=1.0)
  assert len(label) == 3 * 5
  assert [r.completion_ids for r in label if r.reward == 1.0] == [[2], [3], [4]]
  assert len({r.group_id for r in label[:10]}) == 1 and label[10].group_id != label[0].group_id
  votes = spy_readout.step_rows(games, probs, choices, "reward", 6, rng, step=1,
                                temperature=0.7)
  assert len(votes) == 3 * 6
  assert all(r.completion_ids == [4] and r.reward == 0.0 for r in votes[6:12])  # p = 1 on "4"
  assert votes[0].logprobs == [float(np.log(probs[0][votes[0].completion_ids[0] - 1]))]
  # Scored by the update as drawn: over the answers' first tokens, at the temperature.
  assert label[4].allowed_ids == ((1, 2, 3, 4, 5), (6,))
  assert label[0].allowed_ids == ((1, 2, 3, 4, 5),)
  assert {r.temperature for r in votes} == {0.7}


def test_the_learning_bench_merges_earlier_runs_seeds_into_the_mean(tmp_path, monkeypatch,
                                                                   capsys):
  def run(seed, acc):
    return {"train_s": 60.0 * (seed + 1), "steps": {"step_s": 1.0},
            "before": {"step": 0, "detect_acc": 0.25},
            "after": {"step": 4, "detect_acc": acc, "detect_acc/se": 0.01}}

  earlier = tmp_path / "earlier.json"
  earlier.write_text(json.dumps({"config": "configs/spy_summ.py:cpu", "set": ["steps=4"],
                                 "seeds": {"0": run(0, 0.4), "1": run(1, 0.6)}}))
  out = tmp_path / "all.json"
  monkeypatch.setattr(sys, "argv", ["learning_spy.py", "--seeds", "", "--merge", str(earlier),
                                    "--json", str(out)])
  learning_spy.main()
  printed = capsys.readouterr().out
  assert "mean over seeds [0, 1]" in printed
  assert "0.500 ± 0.100" in printed  # mean and standard error of 0.4 and 0.6
  got = json.loads(out.read_text())
  assert sorted(got["seeds"]) == ["0", "1"]
  assert got["merged"] == [{"from": "earlier.json", "config": "configs/spy_summ.py:cpu",
                            "set": ["steps=4"], "seeds": [0, 1]}]
  # A seed both merged and asked for is refused, not counted twice.
  monkeypatch.setattr(sys, "argv", ["learning_spy.py", "--seeds", "1", "--merge", str(earlier)])
  with pytest.raises(SystemExit, match="seed 1"):
    learning_spy.main()
