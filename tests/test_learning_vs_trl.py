"""The pure helpers of bench/learning_vs_trl.py and its reward functions (no model, no TRL)."""
import json
import math

import pytest

from bench import learning_rewards as rewards
from bench import learning_vs_trl as lvt


def test_mean_se():
  m, se = lvt.mean_se([1.0, 2.0, 3.0, 4.0])
  assert m == pytest.approx(2.5)
  # Sample std sqrt(5/3), over sqrt(4).
  assert se == pytest.approx(math.sqrt(5 / 3) / 2)
  m, se = lvt.mean_se([7.0])
  assert m == 7.0 and math.isnan(se)
  assert all(math.isnan(v) for v in lvt.mean_se([]))


def test_curve_stats_and_last_k():
  curves = [[0.0, 1.0, 2.0], [2.0, 3.0, 6.0, 9.0]]  # The shorter run sets the length.
  mean, se = lvt.curve_stats(curves)
  assert mean == pytest.approx([1.0, 2.0, 4.0])
  assert se == pytest.approx([1.0, 1.0, 2.0])
  assert lvt.curve_stats([[1.0, 2.0]])[1] == [0.0, 0.0]  # One seed: no band.
  s = lvt.last_k([[0.0, 1.0, 2.0], [2.0, 3.0, 6.0]], 2)
  assert s["n"] == 4 and s["mean"] == pytest.approx(3.0)
  assert s["se"] == pytest.approx(lvt.mean_se([1.0, 2.0, 3.0, 6.0])[1])


def test_step_records_and_timing():
  ours = lvt.ours_steps([
      {"step": 2, "reward/mean": -0.5, "perf/step_s": 3.0, "perf/play_s": 1.0, "x": 1},
      {"step": 1, "reward/mean": -0.9, "perf/step_s": 30.0, "perf/play_s": 10.0}])
  assert [s["step"] for s in ours] == [1, 2]
  assert ours[1] == dict(step=2, reward=-0.5, sample_s=1.0, update_s=2.0, step_s=3.0)
  trl = lvt.trl_steps([{"step": 1, "reward": -1.0, "sample_s": 4.0, "step_s": 10.0,
                        "prompts": []},
                       {"step": 2, "reward": 0.0, "sample_s": 2.0, "step_s": 5.0}])
  assert trl[0]["update_s"] == pytest.approx(6.0) and trl[1]["reward"] == 0.0
  t = lvt.timing([ours, trl])  # Step 1 (compilation) left out.
  assert t["steps_counted"] == 2
  assert t["step_s"] == pytest.approx(4.0) and t["sample_s"] == pytest.approx(1.5)
  assert t["first_step_s"] == pytest.approx(20.0)
  assert lvt.timing([ours], skip_first=False)["step_s"] == pytest.approx(16.5)
  assert lvt.timing([ours[:1]])["step_s"] == pytest.approx(30.0)  # A one-step run counts.


def test_length_reward_sees_the_same_text_in_both_forms():
  text = "x" * rewards.TARGET_CHARS
  assert rewards.length_reward(None, [text, ""]) == [0.0, -1.0]
  chat = [[{"role": "assistant", "content": "y" * (2 * rewards.TARGET_CHARS)}]]
  assert rewards.length_reward(None, chat, completion_ids=[[1]]) == [-1.0]


def test_math_format_prepends_the_prefill():
  assert rewards.math_format(None, ["42}.", "no box"]) == [1.0, 0.0]
  assert set(rewards.TASKS) == {"length", "math"}


def test_draw_order_replays_passes_of_the_stream():
  rows = [{"prompt": str(k)} for k in range(4)]
  order = lvt.draw_order(rows, 2, 4, seed=3)
  assert len(order) == 8
  assert sorted(r["prompt"] for r in order[:4]) == sorted(r["prompt"] for r in order[4:]) == \
      [r["prompt"] for r in rows]
  assert order == lvt.draw_order(rows, 2, 4, seed=3)


def test_a_stored_seed_is_reused_only_side_by_side_with_the_same_settings(tmp_path):
  specs = {"ours": {"seed": 1, "lr": 2e-5, "funcs": ["length"]}, "trl": {"seed": 1}}
  assert lvt.stored_result(str(tmp_path), specs) == (None, set())  # Nothing there.
  for side, spec in specs.items():
    (tmp_path / f"{side}_spec.json").write_text(json.dumps(spec))
  # Specs but no result: a crashed run.
  assert lvt.stored_result(str(tmp_path), specs) == (None, set())
  (tmp_path / lvt.RESULT).write_text('{"seed": 1, "ours": [], "trl": []}')
  result, same = lvt.stored_result(str(tmp_path), specs)
  assert result["seed"] == 1 and same == {"ours", "trl"}
  other = {**specs, "ours": {**specs["ours"], "lr": 1e-5}}
  assert lvt.stored_result(str(tmp_path), other)[1] == {"trl"}  # Ours reruns, TRL's stands.
  (tmp_path / lvt.RESULT).write_text('{"seed": 1, "ours"')  # Torn write.
  assert lvt.stored_result(str(tmp_path), specs) == (None, set())


def test_prompts_match_in_both_forms():
  chat = [[{"role": "user", "content": "Say hello."}], [{"role": "user", "content": "Hi?"}]]
  assert lvt.same_prompts(["Say hello.", "Hi?"], chat)
  assert lvt.same_prompts(["Say hello.", "Hi?"], ["Say hello.", "Hi?"])
  assert not lvt.same_prompts(["Hi?", "Say hello."], chat)
