"""The packed batch layout: the same rows, the same logprobs, the same update, few shapes."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlsvr import parallel
from rlsvr.model import attention
from rlsvr.rl.batch import build_batch, forward_slots
from rlsvr.rl.logprobs import packed_logprobs, token_logprobs
from rlsvr.rl.rollout import Trajectory
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step
from tests.rl.test_shared_prompts import BASE, assert_same_update, played_rows, rows_of
from tests.rl.tiny import CONFIG, random_params

PACKED = ("packed_tokens_NxL", "packed_positions_NxL", "packed_segment_NxL",
          "packed_branch_NxL", "score_hidden_S", "score_token_S", "score_row_S", "score_col_S")


def packed_rows_of(batch, parts):
  """`rows_of` for a packed batch, reading each row as the step does: its scored entries
  (entry s of part m is entry s * parts + m) index its part's buffers (buffer j of part m
  is buffer j * parts + m) at the hidden states that predict its tokens."""
  n, length = batch["packed_tokens_NxL"].shape
  tokens = batch["packed_tokens_NxL"]
  out = []
  for i, mask in enumerate(batch["loss_mask_BxC"]):
    part, n_c = i % parts, int(mask.sum())
    flat = lambda f: (f // length * parts + part, f % length)  # noqa: B023
    entries = [k for k in range(part, len(batch["score_row_S"]), parts)
               if batch["score_row_S"][k] == i // parts]
    entries.sort(key=lambda k: batch["score_col_S"][k])
    assert [batch["score_col_S"][k] for k in entries] == list(range(n_c))
    hidden = [flat(batch["score_hidden_S"][k]) for k in entries]
    completion = [batch["score_token_S"][k] for k in entries]
    if n_c:
      buffer, last = hidden[0]
      n_p = batch["packed_positions_NxL"][buffer, last] + 1
      prompt = tokens[buffer, last - n_p + 1:last + 1]
      assert (batch["packed_branch_NxL"][buffer, last - n_p + 1:last + 1] == 0).all()
      # Each later token is scored from the one before it, which sits just before it.
      assert [tokens[b, l] for b, l in hidden[1:]] == completion[:-1]
      assert [tokens[b, l + 1] for b, l in hidden[1:]] == completion[1:]
    else:
      prompt = np.zeros(0, np.int32)
    out.append((part, tuple(prompt.tolist()), tuple(int(t) for t in completion),
                tuple(np.round(batch["sampler_logp_BxC"][i, :n_c], 6)),
                float(batch["advantages_B"][i]), float(batch["temperature_B"][i]),
                batch["allowed_BxCxK"][i, :n_c].tobytes()))
  return out


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("updates,micro", [(1, 0), (1, 4), (2, 8), (3, 0)])
def test_packed_batches_hold_the_same_rows_in_the_same_updates(updates, micro, share):
  cfg = dataclasses.replace(BASE, updates_per_batch=updates, micro_batch_size=micro)
  rows = played_rows()
  multiple = updates * (micro or 1)
  plain = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple)
  packed = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple, share_prompts=share,
                       pack_tokens=128)
  b = len(plain["advantages_B"])
  parts = updates * (b // updates // micro if micro else 1)
  assert packed["packed_tokens_NxL"].shape[0] % parts == 0
  assert packed["loss_mask_BxC"].shape == plain["loss_mask_BxC"].shape
  update_rows = lambda rows: sorted((r[0] % updates, *r[1:]) for r in rows if r[2])
  assert update_rows(packed_rows_of(packed, parts)) == update_rows(rows_of(plain, parts))
  # Each buffer's segments number 1, 2, ... and padding is 0; a completion's positions
  # continue its prompt's.
  segments = packed["packed_segment_NxL"]
  assert (np.diff(segments, axis=1)[segments[:, 1:] != 0] >= 0).all()
  # Fewer slots; micro-batches of a few rows each pack less (each packs its own rows).
  fraction = 1.0 if parts > updates else 0.5 if share else 0.8
  assert forward_slots(packed) <= fraction * forward_slots(plain)


@pytest.fixture(scope="module")
def params():
  return random_params()


@pytest.mark.parametrize("share", [False, True])
def test_packed_logprobs_match_whole_rows(params, share):
  rows = played_rows()
  plain = build_batch(rows, min_bucket=8)
  packed = build_batch(rows, min_bucket=8, share_prompts=share, pack_tokens=256)
  c = plain["loss_mask_BxC"].shape[1]
  logp, entropy = jax.jit(functools.partial(token_logprobs, CONFIG, completion_len=c))(
      params, plain["tokens_BxT"], plain["attention_mask_BxT"],
      temperature=plain["temperature_B"], allowed_BxCxK=plain["allowed_BxCxK"])
  logp_p, entropy_p = jax.jit(functools.partial(packed_logprobs, CONFIG,
                                    rows=packed["loss_mask_BxC"].shape[0], cols=c))(
      params, *(packed[k] for k in PACKED), temperature=packed["temperature_B"],
      allowed_BxCxK=packed["allowed_BxCxK"])
  by_row = {r[1:4]: i for i, r in enumerate(rows_of(plain, 1)) if r[2]}
  checked = 0
  for j, row in enumerate(packed_rows_of(packed, 1)):
    if not row[2]:
      continue
    i, n_c = by_row[row[1:4]], len(row[2])
    # Real values, not zeros (over a few allowed tokens, logp is nearer 0).
    floor = 0.1 if plain["allowed_BxCxK"][i].max() >= 0 else 0.5
    assert abs(float(logp[i, :n_c].mean())) > floor
    np.testing.assert_allclose(logp_p[j, :n_c], logp[i, :n_c], atol=2e-5, rtol=0)
    np.testing.assert_allclose(entropy_p[j, :n_c], entropy[i, :n_c], atol=2e-5, rtol=0)
    checked += 1
  assert checked == len(by_row)


def test_rows_of_unequal_lengths_score_their_own_tokens_only(params):
  """32 two-token votes beside one 40-token clue (a joint spy step): the packed batch
  unembeds 128 positions for the 104 tokens, where the whole-row layout scores all 33
  rows over the clue's 64 columns; the logprobs are still the whole rows'."""
  rng = np.random.default_rng(0)
  prompt = rng.integers(1, 97, 20).tolist()
  rows = [Trajectory(prompt_ids=prompt, completion_ids=[5 + k % 4, 2], logprobs=[-1.0, -1.0],
                     reward=float(k % 2), group_id=0, role="detector",
                     allowed_ids=[[5, 6, 7, 8], [2]]) for k in range(32)]
  rows.append(Trajectory(prompt_ids=prompt[:7], completion_ids=rng.integers(1, 97, 40).tolist(),
                         logprobs=[-2.0] * 40, reward=1.0, group_id=1, role="player"))
  advantages = [1.0] * len(rows)
  plain = build_batch(rows, advantages=advantages, min_bucket=8)
  packed = build_batch(rows, advantages=advantages, min_bucket=8, share_prompts=True,
                       pack_tokens=128)
  b, c = packed["loss_mask_BxC"].shape
  assert (b, c) == plain["loss_mask_BxC"].shape and b * c >= 33 * 64
  assert packed["score_row_S"].size == 128
  logp, entropy = jax.jit(functools.partial(token_logprobs, CONFIG, completion_len=c))(
      params, plain["tokens_BxT"], plain["attention_mask_BxT"],
      allowed_BxCxK=plain["allowed_BxCxK"])
  logp_p, entropy_p = jax.jit(functools.partial(packed_logprobs, CONFIG, rows=b, cols=c))(
      params, *(packed[k] for k in PACKED), allowed_BxCxK=packed["allowed_BxCxK"])
  mask = plain["loss_mask_BxC"] > 0
  order = [sorted(range(b), key=lambda i: read[i][1:3])
           for read in (rows_of(plain, 1), packed_rows_of(packed, 1))]
  for got, want in ((logp_p, logp), (entropy_p, entropy)):
    got, want = np.asarray(got)[order[1]], np.asarray(want)[order[0]]
    np.testing.assert_allclose(got[mask[order[0]]], want[mask[order[0]]], atol=2e-5, rtol=0)
    assert not got[~mask[order[0]]].any()


def test_segments_see_only_themselves_blocked_or_not():
  """Two rows packed in one buffer attend as each alone does, in query blocks too; a
  second continuation of a prompt sees the prompt and not the first continuation."""
  rng = np.random.default_rng(0)
  t, h, k, dh = 24, 4, 2, 8
  q = jnp.asarray(rng.normal(size=(1, t, h, dh)), jnp.float32)
  keys = jnp.asarray(rng.normal(size=(1, k, dh, t)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(1, k, t, dh)), jnp.float32)
  # Segment 1: prompt 0..5, continuation 6..9, continuation 10..14; segment 2: 15..21.
  segment = jnp.asarray([[1] * 15 + [2] * 7 + [0] * 2])
  branch = jnp.asarray([[0] * 6 + [1] * 4 + [2] * 5 + [0] * 3 + [1] * 4 + [0] * 2])
  # Jitted: op by op, the blocked path compiles each of its small ops apart (17 s cold).
  attend = jax.jit(attention.attend, static_argnames="block")
  packed = {block: attend(q, keys, values, segment != 0, jnp.arange(t), block=block,
                          segments=attention.Segments(segment, branch))
            for block in (None, 5)}
  np.testing.assert_allclose(packed[5], packed[None], atol=1e-6)

  def alone(idx):  # The row's own tokens, attended without packing.
    idx = np.asarray(idx)
    return attend(q[:, idx], keys[..., idx], values[:, :, idx], jnp.ones((1, len(idx)), bool),
                  jnp.arange(len(idx)), block=None)

  second = [*range(6), *range(10, 15)]
  np.testing.assert_allclose(packed[None][:, 10:15], alone(second)[:, 6:], atol=1e-6)
  np.testing.assert_allclose(packed[None][:, 15:22], alone(range(15, 22)), atol=1e-6)


# As tests/rl/test_shared_prompts.py: every split of the batch, and a mesh, where the
# gather of the scored positions reads every data shard and the update is still exact.
@pytest.mark.parametrize("updates,micro,share,mesh_shape", [
    (1, 0, True, None), (1, 4, True, None), (2, 0, False, None), (2, 4, True, None),
    (1, 0, True, {"data": 2, "fsdp": 2})])
def test_the_update_is_the_same_packed(params, updates, micro, share, mesh_shape):
  cfg = dataclasses.replace(BASE, updates_per_batch=updates, micro_batch_size=micro)
  mesh = parallel.make_mesh(mesh_shape, jax.devices()[:4]) if mesh_shape else None
  multiple = int(np.lcm(updates * (micro or 1), 4 if mesh else 1))
  rows = played_rows()
  plain = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple)
  packed = build_batch(rows, cfg, min_bucket=8, batch_multiple=multiple, share_prompts=share,
                       pack_tokens=128)
  assert_same_update(cfg, params, plain, packed, mesh)


def test_packed_shapes_come_from_few_buckets_and_compile_once_each(params):
  """Twelve steps of ragged GRPO rows: a handful of shapes, one compile per shape. (N, L)
  take 4 values here, the scored-token count S splits two of them."""
  cfg = dataclasses.replace(BASE, kl_coef=0.0, micro_batch_size=8)
  batches = [build_batch(played_rows(seed=s, groups=3 + s % 2), cfg, min_bucket=8,
                         batch_multiple=8, share_prompts=True, pack_tokens=128)
             for s in range(12)]
  shapes = [tuple(sorted((k, v.shape) for k, v in b.items())) for b in batches]
  assert len(set(shapes)) <= 6, sorted(set(shapes))
  state = init_train_state(CONFIG, cfg, params)
  before = train_step._cache_size()
  first = {}
  for shape, batch in zip(shapes, batches):
    first.setdefault(shape, batch)
  for batch in [*first.values(), *first.values()]:  # Each shape twice: the second is a hit.
    state, _ = train_step(state, batch)
  assert train_step._cache_size() - before == len(first)


def test_packing_refuses_what_it_cannot_lay_out():
  with pytest.raises(ValueError, match="pack_tokens must be >= 0"):
    GRPOConfig(pack_tokens=-1)
  empty_prompt = [Trajectory(prompt_ids=[], completion_ids=[3, 4], logprobs=[-1.0, -1.0],
                             reward=1.0, group_id=0, role="policy")]
  with pytest.raises(ValueError, match="needs every row's prompt"):
    build_batch(empty_prompt, advantages=[1.0], pack_tokens=64)
  cfg = dataclasses.replace(BASE, micro_batch_size=5)  # 34 rows, padded to 48
  with pytest.raises(ValueError, match="does not split"):
    build_batch(played_rows(), cfg, pack_tokens=64)
