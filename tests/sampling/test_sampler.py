"""The sampler end to end: parity with transformers, logprobs, EOS/stop, PRNG, compiles, meshes.

Most tests share one shape bucket (batch 4, prompt 16, 64 new tokens) of one tiny
model, so the file compiles a handful of programs.
"""
import gc
import weakref

import jax
import numpy as np
import pytest
import torch
import transformers

from rlsvr import parallel
from rlsvr.model import assets, hf, qwen3
from rlsvr.sampling import Buckets, Sampler, compile_count, generate, strategies
from rlsvr.sampling import sampler as sampler_lib
from tests.model.hf_reference import make_hf_model

NEW = 64
apply = jax.jit(qwen3.apply, static_argnums=0)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
  """torch's OpenMP threads spin against other processes on a loaded 2-core machine
  (measured 10x slower generate with 2 threads than with 1)."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny():
  return make_hf_model("qwen3", seed=0, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def prompts(tiny):
  rng = np.random.default_rng(0)
  return [rng.integers(1, tiny[1].vocab_size, n).tolist() for n in (5, 16, 9)]


@pytest.fixture(scope="module")
def greedy(tiny, prompts):
  _, config, params = tiny
  return generate(config, params, prompts, max_new_tokens=NEW, temperature=0.0)


def hf_greedy(model, prompts, new_tokens, **kwargs):
  t = max(map(len, prompts))
  ids = torch.tensor([[0] * (t - len(p)) + list(p) for p in prompts])
  mask = torch.tensor([[0] * (t - len(p)) + [1] * len(p) for p in prompts])
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                         max_new_tokens=new_tokens, pad_token_id=0, **kwargs)
  return out[:, t:].tolist()


def test_greedy_equals_transformers_generate(tiny, prompts, greedy):
  ref = hf_greedy(tiny[0], prompts, NEW, min_new_tokens=NEW, eos_token_id=None)
  assert [list(c.ids) for c in greedy] == ref
  assert all(c.finish_reason == "length" and len(c.ids) == NEW for c in greedy)


def test_greedy_equals_transformers_on_smollm2():
  path = assets.smollm2_135m()  # fetched by scripts/setup.sh; a missing asset must fail
  tok = transformers.AutoTokenizer.from_pretrained(path)
  prompts = [tok.encode(t) for t in ("The three primary colours are",
                                     "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci")]
  model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  ref = hf_greedy(model, prompts, NEW)  # Stops at EOS like ours (and pads after it).
  config, params = hf.load_pretrained(path)
  ours = generate(config, params, prompts, max_new_tokens=NEW, temperature=0.0,
                  eos_ids=(tok.eos_token_id,))
  for c, r in zip(ours, ref):
    assert list(c.ids) == r[:len(c.ids)] and (len(c.ids) == NEW or c.finish_reason == "eos")
  assert sum(len(c.ids) for c in ours) >= NEW


def teacher_forced_logits(config, params, prompts, completions):
  """Logits that predict each completion token, from one plain forward over everything."""
  seqs = [list(p) + list(c.ids) for p, c in zip(prompts, completions)]
  t = max(map(len, seqs))
  tokens = np.array([[0] * (t - len(s)) + s for s in seqs])
  mask = np.array([[0] * (t - len(s)) + [1] * len(s) for s in seqs])
  logits = np.asarray(apply(config, params, tokens, mask))
  return [logits[b, t - len(c.ids) - 1:t - 1] for b, c in enumerate(completions)]


@pytest.mark.parametrize("temperature,top_p,top_k", [
    (1.0, 1.0, 0), (0.0, 1.0, 0), (0.7, 1.0, 0), (1.3, 1.0, 20), (1.0, 0.8, 0), (0.8, 0.9, 50)])
def test_logprobs_are_those_of_the_sampling_distribution(tiny, prompts, temperature, top_p,
                                                         top_k):
  _, config, params = tiny
  out = generate(config, params, prompts, max_new_tokens=NEW, temperature=temperature,
                 top_p=top_p, top_k=top_k, seed=1)
  sampling = strategies.SamplingParams.make(temperature, top_p, top_k)
  for c, logits_TxV in zip(out, teacher_forced_logits(config, params, prompts, out)):
    table = np.asarray(jax.jit(strategies.log_probs)(logits_TxV, sampling))
    expected = table[np.arange(len(c.ids)), list(c.ids)]
    np.testing.assert_allclose(c.logprobs, expected, atol=1e-4)
  if temperature == 1.0 and top_p == 1.0:  # Plain sampling: the model's own log-softmax.
    logits = teacher_forced_logits(config, params, prompts, out)[0]
    np.testing.assert_allclose(out[0].logprobs, jax.nn.log_softmax(logits)[
        np.arange(NEW), list(out[0].ids)], atol=1e-4)


def test_eos_ends_a_row_and_is_included(tiny, prompts, greedy):
  _, config, params = tiny
  eos = greedy[0].ids[5]
  out = generate(config, params, prompts, max_new_tokens=NEW, temperature=0.0, eos_ids=(eos, 9999))
  for full, c in zip(greedy, out):
    cut = full.ids.index(eos) + 1 if eos in full.ids else NEW
    assert c.ids == full.ids[:cut]
    np.testing.assert_allclose(c.logprobs, full.logprobs[:cut], atol=1e-5)
    assert c.finish_reason == ("eos" if eos in full.ids else "length")
  assert out[0].ids[-1] == eos and len(out[0].ids) <= 6


class LetterTokenizer:

  def decode(self, ids, skip_special_tokens=False):
    return "".join(chr(97 + i % 26) for i in ids)


def test_stop_string_across_a_chunk_boundary(tiny, prompts, greedy):
  _, config, params = tiny
  text = LetterTokenizer().decode(greedy[1].ids)
  stop = text[31:34]  # Spans tokens 31..33: the first chunk of 32 ends inside it.
  end = text.index(stop) + len(stop)
  sampler = Sampler(config, tokenizer=LetterTokenizer(), chunk_size=32)
  out = sampler(params, prompts, max_new_tokens=NEW, temperature=0.0, stop_strings=[stop])
  assert out[1].ids == greedy[1].ids[:end] and out[1].finish_reason == "stop"
  for full, c in zip(greedy, out):
    t = LetterTokenizer().decode(full.ids)
    assert c.finish_reason == ("stop" if stop in t else "length")
    assert len(c.ids) == (t.index(stop) + len(stop) if stop in t else NEW)


def test_same_seed_same_samples_and_calls_advance_the_key(tiny, prompts):
  _, config, params = tiny
  kw = dict(max_new_tokens=NEW, temperature=1.0)
  a, b = Sampler(config, seed=3), Sampler(config, seed=3)
  first_a, first_b = a(params, prompts, **kw), b(params, prompts, **kw)
  assert first_a == first_b
  assert a(params, prompts, **kw) != first_a
  assert generate(config, params, prompts, seed=5, **kw) == generate(config, params, prompts,
                                                                     seed=5, **kw)
  assert generate(config, params, prompts, seed=6, **kw) != generate(config, params, prompts,
                                                                     seed=5, **kw)


def test_varied_calls_compile_once_per_bucket(tiny):
  _, config, params = tiny
  sampler = Sampler(config, buckets=Buckets(batch=(2, 4), prompt=(16,), new_tokens=(64,)))
  for rows in (2, 4):  # One call per batch bucket (whatever other tests compiled before),
    # of distinct prompts (rows that repeat one share its cache: another shape).
    sampler(params, [[1, 2, k] for k in range(rows)], max_new_tokens=NEW, temperature=1.0)
  rng = np.random.default_rng(1)
  before = compile_count()
  for i in range(20):
    batch = int(rng.integers(1, 5))
    batch_prompts = [rng.integers(1, 500, int(rng.integers(1, 17))).tolist() for _ in range(batch)]
    out = sampler(params, batch_prompts, max_new_tokens=int(rng.integers(1, NEW + 1)),
                  temperature=[0.0, 0.5, 1.0, 1.5][i % 4], top_p=[1.0, 0.9][i % 2],
                  top_k=[0, 10, 0][i % 3])
    assert len(out) == batch
  assert compile_count() == before  # Lengths and sampling settings compile nothing new.


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 2, 0]], ids=["distinct", "shared"])
def test_sharded_params_give_the_same_greedy_output(tiny, prompts, greedy, order):
  _, config, params = tiny
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  sharded = parallel.shard_params(params, mesh)
  out = generate(config, sharded, [prompts[i] for i in order], max_new_tokens=NEW,
                 temperature=0.0)
  assert [c.ids for c in out] == [greedy[i].ids for i in order]
  np.testing.assert_allclose([c.logprobs for c in out], [greedy[i].logprobs for i in order],
                             atol=1e-4)


@pytest.fixture
def prefill_rows(monkeypatch):
  """The number of rows each call's prefill ran on."""
  rows, real = [], sampler_lib._prefill

  def spy(params, tokens_UxP, *args, **kwargs):
    rows.append(tokens_UxP.shape[0])
    return real(params, tokens_UxP, *args, **kwargs)

  monkeypatch.setattr(sampler_lib, "_prefill", spy)
  return rows


def test_rows_sharing_a_prompt_share_its_prefill(tiny, prompts, greedy, prefill_rows):
  _, config, params = tiny
  order = [2, 0, 2, 0]  # Two prompts, two rows each: a prefill of 2 rows.
  uneven = [2, 0, 2, 2]  # Not every prompt repeats equally: every row is prefilled.
  outputs = [Sampler(config, share_prompts=share)(
      params, [prompts[i] for i in rows], max_new_tokens=NEW, temperature=0.0)
             for share, rows in ((True, order), (False, order), (True, uneven))]
  assert prefill_rows == [2, 4, 4]
  for out, rows in zip(outputs, (order, order, uneven)):
    assert [c.ids for c in out] == [greedy[i].ids for i in rows]
    np.testing.assert_allclose([c.logprobs for c in out], [greedy[i].logprobs for i in rows],
                               atol=1e-5)
  # Stop strings are checked per row in the sampler's (grouped) order, reported in the caller's.
  batch = [prompts[i] for i in order]
  stop = LetterTokenizer().decode(greedy[0].ids)[10:12]
  stopped = [Sampler(config, tokenizer=LetterTokenizer(), share_prompts=share)(
      params, batch, max_new_tokens=NEW, temperature=0.0, stop_strings=[stop])
             for share in (True, False)]
  assert [(c.ids, c.finish_reason) for c in stopped[0]] == [
      (c.ids, c.finish_reason) for c in stopped[1]]
  assert stopped[0][1].finish_reason == "stop" and len(stopped[0][1].ids) <= 12
  # Sampling: each row draws its own tokens from the shared prompt's distribution.
  sampled = Sampler(config, seed=2)(params, batch, max_new_tokens=NEW, temperature=1.0)
  assert len({c.ids for c in sampled}) == len(sampled)
  for c, logits_TxV in zip(sampled, teacher_forced_logits(config, params, batch, sampled)):
    np.testing.assert_allclose(c.logprobs, jax.nn.log_softmax(logits_TxV)[
        np.arange(len(c.ids)), list(c.ids)], atol=1e-4)


def test_cache_budget_slices_whole_groups(tiny, prompts, greedy, prefill_rows):
  _, config, params = tiny
  order = [0, 0, 1, 1, 2, 2]
  # P=16, N=64: 2 shared prompts + 4 rows = 288 slots; 3 prompts (bucket 4) + 8 rows do not fit.
  sampler = Sampler(config, max_cache_tokens=2 * 16 + 4 * 64)
  out = sampler(params, [prompts[i] for i in order], max_new_tokens=NEW, temperature=0.0)
  assert prefill_rows == [2, 1]
  assert [c.ids for c in out] == [greedy[i].ids for i in order]
  with pytest.raises(ValueError, match="max_cache_tokens"):
    Sampler(config, max_cache_tokens=-1)


def test_prompts_too_few_to_split_over_the_mesh_are_not_shared(tiny, prefill_rows):
  """Sharing 4 prompts on data=8 would prefill all 4 on every device (one row each unshared)."""
  _, config, params = tiny
  sharded = parallel.shard_params(params, parallel.make_mesh({"data": 8}))
  rng = np.random.default_rng(3)
  few, many = ([rng.integers(1, 500, 6).tolist() for _ in range(k)] for k in (4, 8))
  sampler = Sampler(config)
  for distinct in (few, many):
    out = sampler(sharded, [x for x in distinct for _ in range(2)], max_new_tokens=8,
                  temperature=0.0)
    assert [c.ids for c in out[::2]] == [c.ids for c in out[1::2]]
  assert prefill_rows == [8, 8]  # 8 rows unshared; 8 prompts (one per device) shared.


@pytest.mark.parametrize("kwargs,match", [
    (dict(prompts=[[1], []]), "at least one token"),
    (dict(stop_strings=["x"]), "tokenizer"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=10**9), "largest bucket"),
])
def test_invalid_requests_are_refused(tiny, kwargs, match):
  import dataclasses

  _, config, params = tiny
  # A position range past every bucket, so the bucket check is the one that refuses.
  config = dataclasses.replace(config, max_position_embeddings=2 * 10**9)
  call = dict(prompts=[[1, 2]], max_new_tokens=4) | kwargs
  with pytest.raises(ValueError, match=match):
    generate(config, params, call.pop("prompts"), **call)


def test_max_rows_samples_in_slices_with_the_same_greedy_output(tiny, prompts, greedy):
  _, config, params = tiny
  sampler = Sampler(config, max_rows=2)  # Batch bucket 2: the multi-turn test's.
  out = sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)
  assert [c.ids for c in out] == [c.ids for c in greedy]
  sampled = [sampler(params, prompts, max_new_tokens=8, seed=3) for _ in range(2)]
  assert sampled[0] == sampled[1]  # a fixed seed fixes every slice's key
  assert sampler(params, prompts, max_new_tokens=8, seed=4) != sampled[0]
  with pytest.raises(ValueError, match="max_rows"):
    Sampler(config, max_rows=-1)


def test_long_prompts_are_padded_to_4096_steps_not_powers_of_two():
  pick = lambda n: Buckets.pick(n, Buckets().prompt, "prompt length")
  assert [pick(n) for n in (5, 100, 8192, 8193, 12289, 39296)] == [16, 128, 8192, 12288, 16384,
                                                                     40960]


def test_prompt_plus_budget_beyond_the_position_range_fails_before_sampling(tiny):
  import dataclasses

  _, config, params = tiny
  short = dataclasses.replace(config, max_position_embeddings=24)
  before = compile_count()
  with pytest.raises(ValueError, match=r"16 tokens \+ max_new_tokens=9 exceeds .*"
                                       r"max_position_embeddings=24.*truncate_words"):
    Sampler(short)(params, [[1] * 16, [2] * 3], max_new_tokens=9)
  assert compile_count() == before  # nothing was compiled or run
  Sampler(short)(params, [[1] * 16], max_new_tokens=8)  # exactly at the limit: fine


def test_a_large_call_on_one_cpu_device_splits_over_the_host_devices(tiny, monkeypatch):
  """32 rows on one-device weights run over one host device per core, with the same
  completions as on that one device; 31 rows stay on it."""
  from rlsvr import runtime

  _, config, params = tiny
  monkeypatch.setattr(runtime, "cpu_cores", lambda: 2)
  copies = []
  replicate = parallel.replicate
  monkeypatch.setattr(parallel, "replicate",
                      lambda tree, mesh: copies.append(mesh.size) or replicate(tree, mesh))
  rng = np.random.default_rng(5)
  prompts = [rng.integers(1, config.vocab_size, int(rng.integers(2, 12))).tolist()
             for _ in range(parallel.HOST_SPLIT_MIN_ROWS)]
  one = Sampler(config, split_on_host=False)(params, prompts, max_new_tokens=8, temperature=0.0)
  assert copies == []
  split = Sampler(config)(params, prompts, max_new_tokens=8, temperature=0.0)
  assert copies == [2]
  assert [c.ids for c in split] == [c.ids for c in one]
  np.testing.assert_allclose([c.logprobs for c in split], [c.logprobs for c in one], atol=1e-4)
  Sampler(config)(params, prompts[1:], max_new_tokens=8, temperature=0.0)
  assert copies == [2]


def test_calls_with_the_same_params_lay_the_weights_out_once(tiny, prompts, greedy, monkeypatch):
  """A training step's calls share one decode layout of its params (one per placement:
  the params' device, a host split); new params get their own; the copy goes with
  `release_weights` or with its params."""
  from rlsvr import runtime

  _, config, params = tiny
  monkeypatch.setattr(runtime, "cpu_cores", lambda: 2)
  laid_out = []  # A weak reference to one array of each layout made.
  lay_out = sampler_lib._decode_weights

  def recording(config, params):
    weights = lay_out(config, params)
    laid_out.append(weakref.ref(weights.layers[0]["mlp"]["up_proj"]))
    return weights

  monkeypatch.setattr(sampler_lib, "_decode_weights", recording)
  params = jax.tree.map(lambda x: x + 0, params)  # Arrays that only this test holds.
  sampler = Sampler(config)
  for _ in range(2):
    out = sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)
    assert [c.ids for c in out] == [c.ids for c in greedy]
  assert len(laid_out) == 1
  many = prompts * 11  # 33 rows: split over the host devices, a second placement.
  assert parallel.HOST_SPLIT_MIN_ROWS <= len(many)
  for _ in range(2):
    out = sampler(params, many, max_new_tokens=NEW, temperature=0.0)
    assert [c.ids for c in out] == [c.ids for c in greedy] * 11
  assert len(laid_out) == 2
  sampler.release_weights()
  gc.collect()
  assert [ref() for ref in laid_out] == [None, None]
  sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)
  sampler(jax.tree.map(lambda x: x + 0, params), prompts, max_new_tokens=NEW, temperature=0.0)
  assert len(laid_out) == 4  # After a release, and for other arrays: laid out afresh.
  sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)
  assert len(laid_out) == 5 and laid_out[4]() is not None
  del params
  gc.collect()
  assert laid_out[4]() is None  # Dropped with its params.


def test_host_array_params_are_laid_out_afresh_every_call(tiny, prompts, greedy, monkeypatch):
  """numpy params can change in place between calls: each call lays them out again."""
  _, config, params = tiny
  params = jax.tree.map(np.array, params)
  sampler = Sampler(config)
  before = [c.ids for c in sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)]
  assert before == [c.ids for c in greedy]
  params["layers"]["mlp"]["up_proj"] *= -1  # In place: the same arrays, other weights.
  after = [c.ids for c in sampler(params, prompts, max_new_tokens=NEW, temperature=0.0)]
  assert after != before
  assert after == [c.ids for c in Sampler(config)(params, prompts, max_new_tokens=NEW,
                                                   temperature=0.0)]
