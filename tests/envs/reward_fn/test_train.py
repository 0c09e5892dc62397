"""configs/rlvr_math.py:smoke trains through `rlsvr.train.train` (tiny random model)."""
import json
import os

from configs.rlvr_math import get_config
from rlsvr import train
from rlsvr.metrics import read_jsonl


def test_smoke_config_trains_two_steps(tmp_path):
  """With DAPO's overlong shaping, which needs each row's length limit."""
  data = tmp_path / "problems.jsonl"  # Local rows: the test needs no shared data folder.
  data.write_text("".join(json.dumps({"question": f"What is {k} + {k}?", "answer": str(2 * k)})
                          + "\n" for k in range(8)))
  c = get_config("smoke")
  c.data.source = str(data)
  c.grpo.overlong_buffer = c.reward_fn.max_new_tokens // 2
  workdir = str(tmp_path / "run")
  last = train.train(c, workdir)

  records = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  for key in ("reward/mean", "rewards/accuracy/mean", "rewards/format/mean", "rewards/timeouts",
              "actor/pg_loss"):
    assert key in last, key
  rollouts = open(os.path.join(workdir, "rollouts.txt"), encoding="utf-8").read()
  assert "What is" in rollouts and "completion 2:" in rollouts
  step_records = read_jsonl(os.path.join(workdir, "rollouts", "step_00000002.jsonl"))
  assert len(step_records) == c.reward_fn.prompts_per_step
  assert len(step_records[0]["completions"]) == c.reward_fn.group_size
