"""Tests for rlsvr.envs.spy.records: rollouts.txt text and the JSONL per step."""
import functools
import json
import os

import numpy as np
import pytest

from rlsvr.data import bundled_corpus
from rlsvr.envs.spy import SpyGame, SpyGameConfig
from rlsvr.metrics import RolloutWriter
from rlsvr.envs.spy import records

from .fakes import ByteTokenizer, ScriptedPolicy, spy_marker_player

# Game 0's two detectors, then game 1's.
RESPONSES = ["I pick \\boxed{1}", "\\boxed{N/A}", "garbage", "\\boxed{2}"]


def _batch(record_prompts, step=3):
  config = SpyGameConfig.for_task("writing", rollout_n=2)
  tokenizer = ByteTokenizer()
  responses = iter(RESPONSES)
  policy = ScriptedPolicy(tokenizer, functools.partial(spy_marker_player, task="writing"),
                          lambda prompt: next(responses))
  env = SpyGame(config, tokenizer, record_prompts=record_prompts)
  return env.play_episodes(bundled_corpus("writing")[:2], policy, np.random.default_rng(0), step)


def test_record_text_has_the_whole_game():
  batch = _batch(record_prompts=False)
  text, record = batch.record_text, _batch(record_prompts=True).records[0]
  spy = record["spy"]
  assert "step 3 | phase decision | game 0 (item writing-0)" in text
  assert f"spy: Player {spy} | chars [{record['mask']['start']}," in text
  for p in record["players"]:
    assert p["prompt"] in text and p["output"] in text
    assert f"Player {p['player']} (round 1, {p['role']}) prompt:" in text
  assert record["detection_prompt"] in text
  assert "I pick \\boxed{1}" in text
  assert f">>> vote 1 [vote] | correct {spy == 1} | reward {float(spy == 1):.4f}" in text
  assert ">>> vote N/A [abstain] | correct False | reward 0.0000" in text
  for k, reward in enumerate(record["perf_rewards"], start=1):
    role = "spy" if k == spy else "civilian"
    assert f"Player {k} ({role}): performance reward {reward:+.4f}" in text


def test_records_are_json_and_complete():
  full, slim = _batch(record_prompts=True).records, _batch(record_prompts=False).records
  assert len(full) == 2
  assert json.loads(json.dumps(full)) == full
  game1 = full[1]
  assert [d["status"] for d in game1["detectors"]] == [
      "invalid: no complete \\boxed{}", "vote"]
  assert [d["vote"] for d in game1["detectors"]] == [None, 2]
  assert game1["vote_counts"] == [0, 1, 0, 0, 0]
  assert game1["detectors"][1]["correct"] == (game1["spy"] == 2)
  assert sum(game1["perf_rewards"]) == pytest.approx(0.0)
  # Without record_prompts the same facts, minus the prompts.
  assert "detection_prompt" not in slim[0] and "prompt" not in slim[0]["players"][0]
  assert slim[1] == records.without_prompts(full[1])


def test_rollout_writer(tmp_path):
  writer = RolloutWriter(str(tmp_path))
  for step in (1, 2):
    writer.write(step, _batch(record_prompts=False, step=step))
  text = (tmp_path / "rollouts.txt").read_text()
  assert text.count("step 1 | phase") == 1 and text.count("step 2 | phase") == 1
  lines = (tmp_path / "rollouts" / "step_00000002.jsonl").read_text().splitlines()
  assert [json.loads(line)["game"] for line in lines] == [0, 1]
  assert all(json.loads(line)["step"] == 2 for line in lines)
  assert sorted(os.listdir(tmp_path / "rollouts")) == ["index.jsonl", "step_00000001.jsonl",
                                                       "step_00000002.jsonl"]
  # The index says where each step's text starts: rewinding to step 1 cuts step 2 off.
  offsets = [json.loads(line) for line in (tmp_path / "rollouts" / "index.jsonl").open()]
  assert [o["step"] for o in offsets] == [1, 2] and offsets[0]["offset"] == 0
  writer.rewind(1)
  assert (tmp_path / "rollouts.txt").read_bytes() == text.encode()[:offsets[1]["offset"]]
  assert "step 1 | phase" in (tmp_path / "rollouts.txt").read_text()
  assert sorted(os.listdir(tmp_path / "rollouts")) == ["index.jsonl", "step_00000001.jsonl"]
