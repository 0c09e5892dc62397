"""bench/accelerator_check.py: its smoke form runs every part it computes in-process, a
failing part is reported and fails the check, and its memory estimates are the planner's.

The command line (each part in a process of its own) runs as a documented command
(tests/test_docs_commands.py) with the part left out here: the learning run through
`python -m rlsvr.train`.
"""
import json

import pytest

from bench import accelerator_check as check
from bench import accelerator_parts as parts


def test_the_smoke_check_runs_every_in_process_part(tmp_path):
  out = tmp_path / "a.json"
  results = check.main(["--smoke", "--in-process", "--parts=parity,decode,train",
                        "--json", str(out)])
  assert check.failures(results, smoke=True) == []
  assert json.loads(out.read_text())["failures"] == []
  parity = {r["dtype"]: r for r in results["parity"]["rows"]}
  # Both sides against transformers in float64: as accurate as transformers, in each dtype.
  assert parity["float32"]["ours_max_err"] < 1e-5 and parity["float32"]["ratio"] < 3
  assert parity["bfloat16"]["ours_max_err"] < 0.05 and parity["bfloat16"]["ratio"] < 3
  (decode,) = results["decode"]["rows"]
  assert decode["tokens_per_s"] > 0 and decode["transformers_tokens_per_s"] > 0
  assert 0 < decode["roofline_measured"]
  train, lora = results["train"]["rows"]
  assert train["tokens_per_s"] > 0 and train["layout"] == "groups of 2" and train["remat"]
  assert lora["tokens_per_s"] > 0 and lora["lora_rank"] == 2 and train["lora_rank"] == 0
  assert "LoRA r2" in check.table(results)


def test_a_failing_part_is_a_row_of_the_table_and_fails_the_check(monkeypatch):
  def broken(sizes):
    raise RuntimeError("out of memory while compiling")

  monkeypatch.setattr(parts, "part_decode", broken)
  results = {"decode": check.run_part("decode", smoke=True)}
  assert "out of memory" in results["decode"]["error"]
  assert "FAILED" in check.table(results)
  assert check.failures(results, smoke=True) == ["decode: RuntimeError: out of memory while "
                                                 "compiling"]


def test_a_reward_that_does_not_rise_fails_only_a_real_run():
  row = {"model": "smollm2", "steps": 10, "reward_first": -1.0, "reward_last": -1.2,
         "rose": False, "play_s": 1.0, "update_s": 1.0, "rewards": []}
  results = {"learn": {"rows": [row], "seconds": 1.0}}
  assert check.failures(results, smoke=True) == []
  assert "did not rise" in check.failures(results, smoke=False)[0]
  assert "DID NOT RISE" in check.table(results)


def test_memory_estimates_are_the_planners_for_the_parts_shapes():
  full = check.SIZES[False]
  gib = 2**30
  train = check.planned_bytes("train", full, {"model": "qwen3-0.6b", "compute": "bfloat16",
                                              "remat": True})
  # fp32 masters + AdamW's two moments alone are 12 bytes a parameter (0.6B: 6.7 GiB).
  assert 6.7 * gib < train < 40 * gib
  lora = check.planned_bytes("train", full, {"model": "qwen3-0.6b", "compute": "bfloat16",
                                             "remat": True, "lora_rank": 16})
  assert lora < train - 5 * gib  # No fp32 masters or moments of the 0.6B base weights.
  small = check.planned_bytes("decode", full, {"model": "qwen3-0.6b", "dtype": "bfloat16",
                                               "batch": 32, "prompt": 512, "new_tokens": 128})
  large = check.planned_bytes("decode", full, {"model": "qwen3-0.6b", "dtype": "bfloat16",
                                               "batch": 128, "prompt": 2048, "new_tokens": 128})
  assert 1.1 * gib < small < large  # bf16 weights alone are 1.1 GiB; the KV cache grows
  assert check.planned_bytes("train", check.SIZES[True], {"model": "smoke"}) is None


@pytest.mark.parametrize("smoke", [False, True])
def test_every_size_a_part_reads_is_set_in_both_modes(smoke):
  assert set(check.SIZES[smoke]) == set(check.SIZES[not smoke])
