"""Constrained choice: the trie table, parity with transformers' `prefix_allowed_tokens_fn`,
the restricted distribution's logprobs and frequencies."""
import jax
import numpy as np
import pytest

from rlsvr.sampling import Sampler, choices as choices_lib, generate, strategies
from tests.sampling.test_sampler import (  # noqa: F401  (fixtures: tiny, prompts, one_torch_thread)
    apply, hf_greedy, one_torch_thread, prompts, teacher_forced_logits, tiny)

# Shared prefixes, different lengths, a one-token choice: every trie shape.
CHOICES = ((7, 3), (7, 5, 9), (11,), (12, 3, 3, 4))


def test_table_is_the_trie_of_the_choices():
  t = choices_lib.table(CHOICES, 16)
  assert t.next_SxV.shape == (16, 16) and t.final_S.shape == (16,)  # 10 nodes -> 16
  node, seen = 0, []
  for token in (7, 5, 9):
    seen.append(sorted(np.flatnonzero(t.next_SxV[node] >= 0).tolist()))
    node = t.next_SxV[node, token]
  assert seen == [[7, 11, 12], [3, 5], [9]] and t.final_S[node]
  assert t.final_S.sum() == len(CHOICES) and (t.next_SxV[t.final_S] == -1).all()


@pytest.mark.parametrize("choices,match", [
    ((), "at least one"), (((1,), ()), "at least one token"), (((1, 99),), "token ids"),
    (((1,), (1, 2)), "prefix"), (((1, 2), (1,)), "prefix")])
def test_bad_choice_sets_are_refused(choices, match):
  with pytest.raises(ValueError, match=match):
    choices_lib.table(choices, 16)


def test_greedy_choice_equals_transformers_prefix_allowed_tokens(tiny, prompts):
  model, config, params = tiny
  t = max(map(len, prompts))

  def allowed(_, input_ids):
    done = input_ids[t:].tolist()
    options = {c[len(done)] for c in CHOICES if len(c) > len(done) and list(c[:len(done)]) == done}
    return sorted(options) or list(range(config.vocab_size))

  ref = hf_greedy(model, prompts, 4, prefix_allowed_tokens_fn=allowed, eos_token_id=None)
  ours = generate(config, params, prompts, max_new_tokens=8, temperature=0.0, choices=CHOICES)
  for c, r in zip(ours, ref):
    assert c.ids in CHOICES and list(c.ids) == r[:len(c.ids)] and c.finish_reason == "stop"
  # A free call would not have picked these: the mask did the work.
  free = generate(config, params, prompts, max_new_tokens=4, temperature=0.0)
  assert all(f.ids[:len(c.ids)] != c.ids for f, c in zip(free, ours))


@pytest.mark.parametrize("temperature,top_k", [(1.0, 0), (0.7, 2), (0.0, 0)])
def test_logprobs_are_those_of_the_restricted_distribution(tiny, prompts, temperature, top_k):
  _, config, params = tiny
  out = generate(config, params, prompts * 4, max_new_tokens=8, temperature=temperature,
                 top_k=top_k, seed=3, choices=CHOICES)
  sampling = strategies.SamplingParams.make(temperature, 1.0, top_k)
  for c, logits_TxV in zip(out, teacher_forced_logits(config, params, prompts * 4, out)):
    assert c.ids in CHOICES and c.finish_reason == "stop"
    node, expected = 0, []
    table = choices_lib.table(CHOICES, config.vocab_size)
    for i, token in enumerate(c.ids):
      masked = np.where(table.next_SxV[node] >= 0, logits_TxV[i], -np.inf)
      expected.append(float(jax.jit(strategies.log_probs)(masked[None], sampling)[0, token]))
      # The completion says what could be drawn there: what the trainer normalises over.
      assert c.allowed[i] == tuple(np.flatnonzero(table.next_SxV[node] >= 0).tolist())
      node = table.next_SxV[node, token]
    np.testing.assert_allclose(c.logprobs, expected, atol=1e-4)


def test_allowed_sets_follow_the_trie_and_refuse_other_sequences():
  assert choices_lib.allowed_at(CHOICES, (7, 5, 9)) == ((7, 11, 12), (3, 5), (9,))
  assert choices_lib.allowed_at(CHOICES, (11,)) == ((7, 11, 12),)
  for other in ((7, 4), (7, 5, 9, 1), (13,)):
    with pytest.raises(ValueError, match="not one of the choices"):
      choices_lib.allowed_at(CHOICES, other)


def test_choice_frequencies_follow_the_restricted_softmax(tiny):
  _, config, params = tiny
  prompt = [5, 9, 2, 7]
  options = (3, 17, 40, 41)
  logits = np.asarray(apply(config, params, np.array([prompt]), np.ones((1, 4), np.int32))[0, -1],
                      np.float64)
  probs = np.exp(logits[list(options)] - logits[list(options)].max())
  probs /= probs.sum()
  out = Sampler(config, seed=0)(params, [prompt] * 2048, max_new_tokens=1,
                                choices=[(t,) for t in options])
  counts = np.array([sum(c.ids == (t,) for c in out) for t in options])
  # Binomial standard error of each frequency; 4.5 sigma keeps the test stable.
  se = np.sqrt(probs * (1 - probs) / len(out))
  assert counts.sum() == len(out)
  np.testing.assert_array_less(np.abs(counts / len(out) - probs), 4.5 * se + 1e-9)


def test_a_budget_too_short_for_a_choice_is_refused(tiny):
  _, config, params = tiny
  with pytest.raises(ValueError, match="longest choice"):
    generate(config, params, [[1, 2]], max_new_tokens=3, choices=CHOICES)
