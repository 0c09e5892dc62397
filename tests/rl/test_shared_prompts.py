"""The shared-prompt batch layout: the same rows, the same logprobs, the same update."""
import dataclasses
import functools

import jax
import numpy as np
import pytest

from rlsvr import parallel
from rlsvr.rl.batch import build_batch
from rlsvr.rl.logprobs import shared_prompt_logprobs, token_logprobs
from rlsvr.rl.rollout import Trajectory
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step
from tests.rl.tiny import CONFIG, random_params

# kl, entropy and sampler-IS terms on: every input of the loss goes through the layout.
BASE = GRPOConfig(lr=1e-3, kl_coef=0.1, entropy_coef=0.01, adam_eps=1e-4, rollout_is="token")


def played_rows(seed=0, groups=4, group_size=8, singles=2):
  """GRPO-like rows: groups sharing a prompt (ragged lengths, an empty completion, a group
  whose rows are not next to each other) and some rows with a prompt of their own, drawn
  at different temperatures (None: the run's); group 1 and one single row were drawn
  from a few choices (`allowed_ids`)."""
  rng = np.random.default_rng(seed)
  rows = []
  for g in range(groups + singles):
    prompt = rng.integers(1, 97, int(rng.integers(2, 30))).tolist()
    for _ in range(group_size if g < groups else 1):
      n_c = int(rng.integers(0 if g == 0 else 1, 14))
      completion = rng.integers(1, 97, n_c).tolist()
      allowed = [(t, t % 96 + 1, (t + 40) % 96 + 1)[:1 + j % 3] for j, t in enumerate(completion)]
      rows.append(Trajectory(prompt_ids=prompt, completion_ids=completion,
                             logprobs=rng.normal(-2.0, 0.5, n_c).tolist(),
                             reward=float(rng.integers(0, 3)), group_id=g, role="policy",
                             temperature=(None, 0.6, 1.0, 1.5)[len(rows) % 4],
                             allowed_ids=allowed if g in (1, groups) else None))
  rows.insert(3, rows.pop(-1))  # A row inside group 0's run: groups need not be contiguous.
  return rows


def rows_of(batch, parts):
  """Each row of a batch of either layout as (part, prompt, completion, logp, advantage,
  temperature, allowed tokens),
  the part being the one `train_step` gives row i (i % parts), the prompt read the way the
  step reads it (from the row's part of the prompts, when shared)."""
  out = []
  for i, mask in enumerate(batch["loss_mask_BxC"]):
    n_c = int(mask.sum())
    if "prompt_tokens_UxP" in batch:
      u = batch["prompt_index_B"][i] * parts + i % parts
      prompt = batch["prompt_tokens_UxP"][u][batch["prompt_mask_UxP"][u] == 1]
      completion = batch["completion_tokens_BxC"][i]
      assert batch["completion_mask_BxC"][i].sum() == n_c
    else:
      c = mask.shape[0]
      prompt = batch["tokens_BxT"][i, :-c][batch["attention_mask_BxT"][i, :-c] == 1]
      completion = batch["tokens_BxT"][i, -c:]
    out.append((i % parts, tuple(prompt.tolist()), tuple(completion[:n_c].tolist()),
                tuple(np.round(batch["sampler_logp_BxC"][i, :n_c], 6)),
                float(batch["advantages_B"][i]), float(batch["temperature_B"][i]),
                batch["allowed_BxCxK"][i, :n_c].tobytes()))
  return out


@pytest.mark.parametrize("updates,micro", [(1, 0), (1, 4), (2, 0), (2, 8), (3, 0)])
def test_the_layout_holds_the_same_rows_in_the_same_updates(updates, micro):
  cfg = dataclasses.replace(BASE, updates_per_batch=updates, micro_batch_size=micro)
  rows = played_rows()
  plain = build_batch(rows, cfg, min_bucket=8, batch_multiple=updates * (micro or 1))
  shared = build_batch(rows, cfg, min_bucket=8, batch_multiple=updates * (micro or 1),
                       share_prompts=True)
  assert "prompt_tokens_UxP" in shared and "tokens_BxT" not in shared
  b = len(plain["advantages_B"])
  parts = updates * (b // updates // micro if micro else 1)
  assert shared["prompt_tokens_UxP"].shape[0] % parts == 0
  # Every update gets the same rows (what a mini-batch holds shapes the update)... Rows with
  # no completion tokens (padding rows, and group 0's empty completion) change nothing.
  update_rows = lambda batch: sorted((r[0] % updates, *r[1:]) for r in rows_of(batch, parts)
                                     if r[2])
  assert update_rows(shared) == update_rows(plain)
  # ...and far fewer prompt tokens run.
  assert shared["prompt_mask_UxP"].sum() < 0.5 * plain["attention_mask_BxT"].sum()


def test_rows_with_their_own_prompts_keep_the_whole_row_layout():
  rows = played_rows(groups=0, singles=6)
  assert "tokens_BxT" in build_batch(rows, BASE, share_prompts=True)
  assert "tokens_BxT" in build_batch(played_rows(), BASE)  # Off unless asked for.


@pytest.fixture(scope="module")
def params():
  return random_params()


def test_shared_prompt_logprobs_match_whole_rows(params):
  rows = played_rows()
  plain = build_batch(rows, min_bucket=8)
  shared = build_batch(rows, min_bucket=8, share_prompts=True)
  c = plain["loss_mask_BxC"].shape[1]
  logp, entropy = jax.jit(functools.partial(token_logprobs, CONFIG, completion_len=c))(
      params, plain["tokens_BxT"], plain["attention_mask_BxT"],
      temperature=plain["temperature_B"], allowed_BxCxK=plain["allowed_BxCxK"])
  keys = ("prompt_tokens_UxP", "prompt_mask_UxP", "prompt_index_B", "completion_tokens_BxC",
          "completion_mask_BxC")
  logp_s, entropy_s = jax.jit(functools.partial(shared_prompt_logprobs, CONFIG))(
      params, *(shared[k] for k in keys), temperature=shared["temperature_B"],
      allowed_BxCxK=shared["allowed_BxCxK"])
  by_row = {r[1:3]: i for i, r in enumerate(rows_of(plain, 1))}
  for j, row in enumerate(rows_of(shared, 1)):
    if row[1:3] not in by_row and not row[2]:
      continue  # A padding row up to the row bucket: it reads its part's first prompt.
    i, n_c = by_row[row[1:3]], len(row[2])
    # Real values, not zeros (over a few allowed tokens, logp is nearer 0).
    floor = 0.1 if plain["allowed_BxCxK"][i].max() >= 0 else 0.5
    assert n_c == 0 or abs(float(logp[i, :n_c].mean())) > floor
    np.testing.assert_allclose(logp_s[j, :n_c], logp[i, :n_c], atol=2e-5, rtol=0)
    np.testing.assert_allclose(entropy_s[j, :n_c], entropy[i, :n_c], atol=2e-5, rtol=0)


def one_step(cfg, params, batch, mesh=None):
  if mesh is not None:
    params, batch = parallel.shard_params(params, mesh), parallel.put_batch(batch, mesh)
  state = init_train_state(CONFIG, cfg, params)
  state, metrics = train_step(state, batch)
  return jax.tree.map(np.asarray, (state.params, metrics))


# Every combination of one or more updates per batch with and without micro-batches: the
# no-gradient pass that scores the old policy (updates > 1) must split the batch as the
# updates do. On a mesh the layout is exact too (XLA all-gathers the prompts' keys and values).
@pytest.mark.parametrize("updates,micro,mesh_shape", [
    (1, 0, None), (1, 4, None), (2, 0, None), (2, 4, None), (1, 0, {"data": 2, "fsdp": 2})])
def test_the_update_is_the_same_in_both_layouts(params, updates, micro, mesh_shape):
  cfg = dataclasses.replace(BASE, updates_per_batch=updates, micro_batch_size=micro)
  mesh = parallel.make_mesh(mesh_shape, jax.devices()[:4]) if mesh_shape else None
  multiple = int(np.lcm(updates * (micro or 1), 4 if mesh else 1))
  rows = played_rows()
  plain = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple)
  shared = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple, share_prompts=True)
  assert_same_update(cfg, params, plain, shared, mesh)


def assert_same_update(cfg, params, plain, other, mesh=None):
  """One step on batch `other` moves the weights and the metrics as on `plain`."""
  params_plain, metrics_plain = one_step(cfg, params, plain, mesh)
  params_other, metrics_other = one_step(cfg, params, other, mesh)
  moved = max(float(np.abs(np.asarray(a) - b).max())
              for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params_plain)))
  assert moved > 1e-4  # The update is visible at the tolerance below.
  for a, b in zip(jax.tree.leaves(params_other), jax.tree.leaves(params_plain)):
    np.testing.assert_allclose(a, b, atol=2e-6, rtol=0)
  for k, v in metrics_plain.items():
    np.testing.assert_allclose(metrics_other[k], v, rtol=1e-4, atol=1e-6, err_msg=k)
