"""Trajectories -> padded train batch, and rollout metrics."""
import numpy as np
import pytest

from rlsvr.rl.rollout import Trajectory
from rlsvr.rl.batch import advantages_of, build_batch, rollout_metrics
from rlsvr.rl.config import GRPOConfig


def traj(prompt, completion, reward, group, trained=True, finish="eos"):
  return Trajectory(prompt_ids=list(prompt), completion_ids=list(completion),
                    logprobs=[-0.5 - 0.1 * i for i in range(len(completion))], reward=reward,
                    group_id=group, role="policy", trained=trained, finish_reason=finish)


ROWS = [
    traj([1, 2, 3], [4, 5, 9], 1.0, group=0),
    traj([6], [7], 0.0, group=0),
    traj([8, 8], [9, 9, 9, 9], 3.0, group=1, trained=False),  # in the group, not in the batch
    traj([2, 2, 2, 2, 2], [3] * 20, 5.0, group=1, finish="length"),
]


def test_layout_of_rows():
  b = build_batch(ROWS, pad_id=0, min_bucket=4)
  # Prompt bucket 8 (longest 5), completion bucket 32 (longest 20); untrained row dropped.
  assert b["tokens_BxT"].shape == (3, 40)
  np.testing.assert_array_equal(b["tokens_BxT"][0, :11], [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 9])
  np.testing.assert_array_equal(b["attention_mask_BxT"][0, :12], [0] * 5 + [1] * 6 + [0])
  # The loss arrays cover the completion columns [8, 40) only.
  assert b["loss_mask_BxC"].shape == b["sampler_logp_BxC"].shape == (3, 32)
  np.testing.assert_array_equal(b["loss_mask_BxC"][0, :4], [1] * 3 + [0])
  np.testing.assert_allclose(b["sampler_logp_BxC"][0, :3], [-0.5, -0.6, -0.7])
  assert b["sampler_logp_BxC"][0, 3:].sum() == 0
  # Every completion starts at the prompt bucket's end.
  assert np.all(b["loss_mask_BxC"][:, 0] == 1)
  assert b["loss_mask_BxC"][2].sum() == 20 and b["attention_mask_BxT"][1].sum() == 2
  assert b["tokens_BxT"].dtype == np.int32 and b["sampler_logp_BxC"].dtype == np.float32


def test_advantages_use_untrained_rows_of_the_group():
  adv = advantages_of(ROWS)
  # Group 0: rewards 1, 0 (unbiased std sqrt(1/2)); group 1: 3, 5 (std sqrt(2)).
  h = np.sqrt(0.5)
  np.testing.assert_allclose(adv, [0.5 / h, -0.5 / h, -1 / np.sqrt(2), 1 / np.sqrt(2)],
                             rtol=1e-5)
  b = build_batch(ROWS)
  np.testing.assert_allclose(b["advantages_B"], adv[[0, 1, 3]], rtol=1e-6)
  raw = build_batch(ROWS, GRPOConfig(norm_adv_by_std=False))["advantages_B"]
  np.testing.assert_allclose(raw, [0.5, -0.5, 1.0], rtol=1e-6)
  given = build_batch(ROWS, advantages=[1.0, 2.0, 3.0, 4.0])["advantages_B"]
  np.testing.assert_array_equal(given, [1.0, 2.0, 4.0])


def test_padding_rows_are_fully_masked():
  b = build_batch(ROWS, batch_multiple=4)
  assert b["tokens_BxT"].shape[0] == 4
  assert b["loss_mask_BxC"][3].sum() == 0 and b["attention_mask_BxT"][3].sum() == 0
  assert b["advantages_B"][3] == 0


def test_errors():
  with pytest.raises(ValueError, match="no trained"):
    build_batch([traj([1], [2], 0.0, 0, trained=False)])
  with pytest.raises(ValueError, match="advantages"):
    build_batch(ROWS, advantages=[1.0])
  bad = Trajectory([1], [2, 3], [0.1], 0.0, 0, "policy")
  with pytest.raises(ValueError, match="logprobs"):
    build_batch([bad])


def test_rollout_metrics():
  m = rollout_metrics(ROWS)
  np.testing.assert_allclose(m["reward/mean"], 2.0)
  np.testing.assert_allclose(m["reward/std"], np.std([1.0, 0.0, 5.0]))
  # Trained rows: group 0 has rewards 1, 0; group 1 only the 5 (a single reward: std 0).
  assert m["frac_reward_zero_std"] == 0.5
  np.testing.assert_allclose(m["response_length/mean"], 8.0)
  assert m["response_length/max"] == 20 and m["response_length/clip_ratio"] == pytest.approx(1 / 3)
  same = rollout_metrics([traj([1], [2], 1.0, 0), traj([1], [3], 1.0, 0), traj([1], [2], 0.0, 1),
                          traj([1], [2], 1.0, 1)])
  assert same["frac_reward_zero_std"] == 0.5
  assert rollout_metrics([]) == {}
