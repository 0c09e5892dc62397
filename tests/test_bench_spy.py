"""bench/spy_ceiling.py and bench/learning_spy.py end to end on the smoke game (seconds);
bench/spy_probe.py's prompts and probes."""
import json
import sys

import numpy as np

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
