"""Jitted KV-cache generation: one compiled prefill, one compiled decode loop.

  prefill(params, tokens_UxP, pads_U, done_B)           -> DecodeState (cache inside)
  decode_weights(params)                                -> weights laid out for decode
  decode(params, weights, state, stop_at, max_new, ...) -> DecodeState   # state donated

When every distinct prompt of a call repeats R times (the samples of a GRPO
group, the detectors of a game), prefill runs once per distinct prompt (U of
them) and the R rows continuing it share its prefix cache (`decode.KVCache`):
one prefill, one copy of the prompt's keys and values, read once per step.

Prompts are left-padded to a bucketed length P and the distinct prompts to a
bucketed count U (B = U x R rows); the cache holds P prompt slots per prompt
and N generated slots per row, N the bucketed `max_new_tokens`, so a training
run compiles one (prefill, decode) pair per (U, R, P, N) bucket, not per call.
Temperature, top-p, top-k, `max_new_tokens`, the EOS ids and the PRNG key are
traced arguments: changing them never recompiles. `choices` restricts every row
of a call to one of a few token sequences (`choices.py`: a vote, a verdict).
Long calls run in slices (`max_rows`, `max_cache_tokens`; see `layout.py`).

The decode loop is a `lax.while_loop` that runs until every row is done (EOS or
`max_new_tokens`) or until `stop_at`; the host calls it once, or in chunks of
`chunk_size` steps when stop strings must be checked between chunks (see
`stop.py`). Each step samples from the logits carried from the previous step,
records the token and its logprob, and feeds the token back through the model.

PRNG: a `Sampler` splits its key on every call; step i of a call uses
`fold_in(call_key, i)`. Same seed, same calls -> same outputs.

Params may live on a device mesh (`rlsvr.parallel.shard_params`): the sampler
lays the batch over the mesh's data/fsdp axes and the cache's KV heads over
`tensor` where the sizes divide, and lets XLA propagate the rest. On CPU, a large
call on one-device weights splits its rows over the host devices (`split_on_host`).
"""
from __future__ import annotations

import dataclasses
import functools
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from rlsvr import parallel
from rlsvr.model import decode as decode_lib
from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig
from rlsvr.sampling import choices as choices_lib
from rlsvr.sampling import strategies
from rlsvr.sampling.completion import Completion
from rlsvr.sampling.layout import Buckets, layout, slice_rows
from rlsvr.sampling.stop import StopStrings

_MAX_EOS_IDS = 8  # EOS ids travel as a fixed-size traced array, padded with -1.
class DecodeState(NamedTuple):
  """Everything the decode loop carries; row b continues prompt b // R (R = B / U)."""

  cache: decode_lib.KVCache
  logits_VxB: jax.Array  # Next-token logits (from the last fed token), vocab first.
  tokens_BxN: jax.Array
  logprobs_BxN: jax.Array
  lengths_B: jax.Array  # Tokens generated per row (EOS included).
  done_B: jax.Array
  node_B: jax.Array  # Each row's node in the call's choice trie (`choices.FREE`: none).
  step: jax.Array  # Tokens generated so far by every not-done row.
  pads_U: jax.Array  # Left padding of each prompt.


def _batch_axes(mesh, batch: int):
  """The mesh axes the batch is laid over (`parallel.batch_spec`), or None."""
  spec = parallel.batch_spec(mesh, batch) if mesh is not None else ()
  return spec[0] if len(spec) else None


def _mesh(params):
  """The params' mesh, or None on one device (nothing to lay out)."""
  mesh = parallel.mesh_of(params)
  return mesh if mesh is not None and mesh.size > 1 else None


def _rows_per_device(mesh, rows: int) -> int:
  axes = _batch_axes(mesh, rows)
  axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
  return rows // int(np.prod([mesh.shape[a] for a in axes]))


def _put(x, mesh, rows: int):
  """A host array whose leading axis is the batch, laid over the mesh as the batch is."""
  axes = _batch_axes(mesh, rows)
  return jax.device_put(x, NamedSharding(mesh, P(axes) if axes is not None else P()))


def _constrain(x, mesh, spec):
  return x if mesh is None else jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


@functools.partial(jax.jit, static_argnames=("config", "new_len", "cache_dtype", "mesh"))
def _prefill(params, tokens_UxP, pads_U, done_B, node_B, *, config: ModelConfig, new_len: int,
             cache_dtype, mesh=None) -> DecodeState:
  """Prefills U prompts; the B rows of the batch continue them, R = B / U rows each."""
  u, p = tokens_UxP.shape
  b = done_B.shape[0]
  heads = None
  if mesh is not None and config.num_kv_heads % mesh.shape["tensor"] == 0:
    heads = "tensor"
  prompt_axes, row_axes = _batch_axes(mesh, u), _batch_axes(mesh, b)
  cache = qwen3.init_cache(config, u, p, cache_dtype)
  cache = qwen3.KVCache(*(_constrain(x, mesh, P(None, prompt_axes, heads)) for x in cache))
  kv_mask_UxP = jnp.arange(p)[None, :] >= pads_U[:, None]
  positions_UxP = jnp.maximum(jnp.arange(p)[None, :] - pads_U[:, None], 0)
  hidden_UxPxD, cache = qwen3.forward(config, params, tokens_UxP, positions_UxP, kv_mask_UxP,
                                      cache, 0)
  # The decode loop keeps one array per layer (see `decode`): split once here.
  cache = decode_lib.from_stacked(cache, new_len, b)
  prefix_spec, rows_spec = P(prompt_axes, heads), P(row_axes, heads)
  cache = decode_lib.KVCache(*(jax.tree.map(lambda x, spec=spec: _constrain(x, mesh, spec), part)
                               for part, spec in zip(cache, (prefix_spec, prefix_spec,
                                                             rows_spec, rows_spec))))
  # Left padding puts every prompt's last token in the last column.
  logits_UxV = qwen3.unembed(config, params, hidden_UxPxD[:, -1:])[:, 0]
  return DecodeState(
      cache=cache,
      logits_VxB=jnp.repeat(logits_UxV, b // u, axis=0).T,
      tokens_BxN=jnp.zeros((b, new_len), jnp.int32),
      logprobs_BxN=jnp.zeros((b, new_len), jnp.float32),
      lengths_B=jnp.zeros((b,), jnp.int32),
      done_B=done_B,
      node_B=node_B,
      step=jnp.int32(0),
      pads_U=pads_U,
  )


# The decode step's copy of the weights (`decode.decode_weights`), once per sampler
# call: inside `_decode` it would be redone for every chunk of a call with stop strings
# and for every slice, a cost bench/sampler.py shows at small batches.
_decode_weights = jax.jit(decode_lib.decode_weights, static_argnums=0)


@functools.partial(jax.jit, static_argnames=("config",), donate_argnames=("state",))
def _decode(params, weights: decode_lib.DecodeWeights, state: DecodeState, stop_at, max_new,
            sampling: strategies.SamplingParams, eos_E, choice: choices_lib.ChoiceTable, key, *,
            config: ModelConfig) -> DecodeState:
  p = state.cache.prefix_k_UxKxDhxP[0].shape[-1]
  b, u = state.done_B.shape[0], state.pads_U.shape[0]
  prefix_mask_UxP = jnp.arange(p)[None, :] >= state.pads_U[:, None]
  prompt_len_B = jnp.repeat(p - state.pads_U, b // u)
  next_VxS = choice.next_SxV.T  # Once per call: the loop masks vocab-first logits.

  def cond(st: DecodeState):
    return (st.step < stop_at) & ~jnp.all(st.done_B)

  def body(st: DecodeState) -> DecodeState:
    i = st.step
    active_B = ~st.done_B
    # Done rows stay unmasked: a completed choice's node allows no token at all.
    constrained_B = (st.node_B != choices_lib.FREE) & active_B
    at_B = jnp.maximum(st.node_B, 0)
    # Skipped when no row is in a choice (most calls): the [V, B] gather is not free.
    logits_VxB = jax.lax.cond(
        jnp.any(constrained_B),
        lambda x: jnp.where(constrained_B & (next_VxS[:, at_B] == choices_lib.FREE), -jnp.inf, x),
        lambda x: x, st.logits_VxB)
    tok_B, lp_B = strategies.sample_vocab_first(jax.random.fold_in(key, i), logits_VxB, sampling)
    node_B = jnp.where(constrained_B, choice.next_SxV[at_B, tok_B], choices_lib.FREE)
    chosen_B = constrained_B & choice.final_S[jnp.maximum(node_B, 0)]
    done_B = (st.done_B | jnp.any(tok_B[:, None] == eos_E[None, :], axis=-1) | chosen_B
              | (i + 1 >= max_new))
    logits_VxB, cache = decode_lib.decode_step(config, params, tok_B[:, None],
                                               (prompt_len_B + i)[:, None], prefix_mask_UxP,
                                               st.cache, i, weights)
    return DecodeState(
        cache=cache,
        logits_VxB=logits_VxB,
        tokens_BxN=jax.lax.dynamic_update_slice(st.tokens_BxN, tok_B[:, None], (0, i)),
        logprobs_BxN=jax.lax.dynamic_update_slice(st.logprobs_BxN, lp_B[:, None], (0, i)),
        lengths_B=jnp.where(active_B, i + 1, st.lengths_B),
        done_B=done_B,
        node_B=jnp.where(chosen_B, choices_lib.FREE, node_B),
        step=i + 1,
        pads_U=st.pads_U,
    )

  return jax.lax.while_loop(cond, body, state)


class _LaidOut:
  """The weights of the params last sampled from, as the decode loop reads them, kept
  while those params live: every sampler call of a training step passes the same
  arrays (a game's rounds, a held-out evaluation), and laying the weights out is a
  sizeable share of a short sampler call.

  Keyed by the identity of the params' jax arrays (immutable, so same arrays, same
  weights), through weak references: once the params die the copy is dropped with
  them. One entry per placement (the params' own devices, or a host-split mesh).
  """

  def __init__(self):
    self._refs: tuple = ()
    self._by_placement: dict[Any, tuple] = {}

  def get(self, params, placement, lay_out: Callable[[], tuple]) -> tuple:
    leaves = jax.tree.leaves(params)
    if not all(isinstance(leaf, jax.Array) for leaf in leaves):
      return lay_out()  # Host arrays can change in place: nothing to key a reuse on.
    if not (len(self._refs) == len(leaves)
            and all(ref() is leaf for ref, leaf in zip(self._refs, leaves))):
      self.clear()
      self._refs = refs = tuple(weakref.ref(leaf) for leaf in leaves)
      for leaf in leaves:  # Any leaf: a laid-out copy may hold another (a tied embedding).
        weakref.finalize(leaf, self._clear_if, refs)
    if placement not in self._by_placement:
      self._by_placement[placement] = lay_out()
    return self._by_placement[placement]

  def _clear_if(self, refs):
    if self._refs is refs:
      self.clear()

  def clear(self):
    self._refs, self._by_placement = (), {}


def compile_count() -> int:
  """Compiled (prefill, weight layout, decode) variants in this process, all samplers."""
  return _prefill._cache_size() + _decode_weights._cache_size() + _decode._cache_size()


class Sampler:
  """Reusable generation for a model config: compiled functions and a PRNG stream.

  Usage in a training loop:

    sampler = Sampler(config, eos_ids=(tok.eos_token_id,), seed=0)
    completions = sampler(params, prompts, max_new_tokens=512, temperature=1.0)

  Calls with the same params arrays reuse one copy of the weights laid out for the
  decode loop, held until those params die or `release_weights()`.
  """

  def __init__(self, config: ModelConfig, *, eos_ids: Sequence[int] = (),
               stop_strings: Sequence[str] = (), tokenizer=None, seed: int = 0,
               buckets: Buckets = Buckets(), chunk_size: int = 32, cache_dtype=None,
               max_rows: int = 0, max_cache_tokens: int = 0, share_prompts: bool = True,
               split_on_host: bool = True):
    """`max_rows` > 0 samples longer prompt lists in consecutive slices of at most that
    many rows, and `max_cache_tokens` > 0 in slices whose KV cache holds at most that
    many token slots (`slice_rows`): the cache of one slice, not of the whole list,
    must fit (`python -m rlsvr.plan`).

    `share_prompts`: when every distinct prompt of a call repeats equally often
    (GRPO groups, a game's detectors), prefill each once and let its rows share
    its prompt cache; off, every row is prefilled and cached on its own (same
    outputs up to float rounding).

    `split_on_host`: a call of at least `parallel.HOST_SPLIT_MIN_ROWS` rows on weights
    on one CPU device runs over one host device per core, when the process has them
    (`rlsvr.runtime.set_host_devices`), with the weights copied to each for the call
    (`parallel.host_split_mesh`; same outputs up to float rounding).
    """
    if max_rows < 0 or max_cache_tokens < 0:
      raise ValueError(f"max_rows and max_cache_tokens must be >= 0, got {max_rows}, "
                       f"{max_cache_tokens}")
    self.max_rows = max_rows
    self.max_cache_tokens = max_cache_tokens
    self.share_prompts = share_prompts
    self.split_on_host = split_on_host
    self.config = config
    self.eos_ids = tuple(eos_ids)
    self.stop_strings = tuple(stop_strings)
    self.tokenizer = tokenizer
    self.buckets = buckets
    self.chunk_size = chunk_size
    self.cache_dtype = cache_dtype
    self._key = jax.random.key(seed)
    self._laid_out = _LaidOut()

  def release_weights(self):
    """Drops the copy of the last params laid out for decoding (kept for the next call
    with the same params; see `_LaidOut`), e.g. before an update needs the memory."""
    self._laid_out.clear()

  def __call__(self, params, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
               temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
               eos_ids: Sequence[int] | None = None, stop_strings: Sequence[str] | None = None,
               seed: int | None = None, choices: Sequence[Sequence[int]] | None = None
               ) -> list[Completion]:
    """One completion per prompt (lists of token ids), in prompt order.

    `eos_ids` / `stop_strings` override the sampler's for this call; `seed`
    gives this call a fixed key instead of the next one of the sampler's stream.
    `choices` (token-id sequences): every completion is one of them, drawn from
    the model's distribution restricted to them (`choices.py`), finish reason "stop",
    with the tokens allowed at each position in `Completion.allowed`.
    """
    if seed is None:
      self._key, key = jax.random.split(self._key)
    else:
      key = jax.random.split(jax.random.key(seed))[1]
    eos_ids = self.eos_ids if eos_ids is None else tuple(eos_ids)
    stops = StopStrings(self.stop_strings if stop_strings is None else stop_strings,
                        self.tokenizer)
    choice = (choices_lib.unconstrained(self.config.vocab_size) if choices is None
              else choices_lib.table(choices, self.config.vocab_size))
    args = (max_new_tokens, strategies.SamplingParams.make(temperature, top_p, top_k), eos_ids,
            stops, choice)
    if not prompts:
      return []
    if any(len(p) == 0 for p in prompts):
      raise ValueError("every prompt needs at least one token")
    if max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if choices is not None and max_new_tokens < choices_lib.longest(choices):
      raise ValueError(f"max_new_tokens={max_new_tokens} cannot hold the longest choice "
                       f"({choices_lib.longest(choices)} tokens)")
    if len(eos_ids) > _MAX_EOS_IDS:
      raise ValueError(f"at most {_MAX_EOS_IDS} eos ids, got {len(eos_ids)}")
    longest = max(map(len, prompts))
    if longest + max_new_tokens > self.config.max_position_embeddings:
      # Positions past the model's range are extrapolated RoPE: garbage, not an error, so
      # fail before sampling and say which knobs decide the length.
      raise ValueError(
          f"a prompt of {longest} tokens + max_new_tokens={max_new_tokens} exceeds the model's "
          f"max_position_embeddings={self.config.max_position_embeddings} (config.json); "
          "shorten the prompts (e.g. spy.truncate_words) or lower the call's max_new_tokens "
          "(spy.player_max_new_tokens / spy.detector_max_new_tokens, rlsr.policy_max_new_tokens / "
          "rlsr.judge_max_new_tokens)")
    host_mesh = self.split_on_host and parallel.host_split_mesh(
        params, min(len(prompts), self.max_rows or len(prompts)))

    def lay_out():
      # The host-split copy is kept only when it is one: the cache must not hold `params`.
      placed = parallel.replicate(params, host_mesh) if host_mesh else None
      return placed, _decode_weights(self.config, params if placed is None else placed)

    placed, weights = self._laid_out.get(params, host_mesh or None, lay_out)
    params = params if placed is None else placed
    rows = self._slice_rows(params, prompts, max_new_tokens)
    if len(prompts) <= rows:
      out = self._generate(params, weights, prompts, key, *args)
    else:
      out = [c for i, start in enumerate(range(0, len(prompts), rows))
             for c in self._generate(params, weights, prompts[start:start + rows],
                                     jax.random.fold_in(key, i), *args)]
    if choices is None:
      return out
    return [dataclasses.replace(c, allowed=choices_lib.allowed_at(choices, c.ids)) for c in out]

  def _slice_rows(self, params, prompts, max_new_tokens: int) -> int:
    per_prompt = 1
    if self.max_cache_tokens and self.share_prompts:  # Runs of equal prompts, as in a GRPO call.
      first = next((i for i, x in enumerate(prompts) if x != prompts[0]), len(prompts))
      if len(prompts) % first == 0 and all(
          prompts[i] == prompts[i - i % first] for i in range(len(prompts))):
        per_prompt = first
    return slice_rows(len(prompts), per_prompt, max(map(len, prompts)), max_new_tokens,
                      max_rows=self.max_rows, max_cache_tokens=self.max_cache_tokens,
                      share=self.share_prompts, buckets=self.buckets,
                      rows_per_device=functools.partial(_rows_per_device, _mesh(params)))

  def _generate(self, params, weights, prompts, key, max_new_tokens, sampling, eos_ids,
                stops: StopStrings, choice: choices_lib.ChoiceTable):
    n = len(prompts)
    p = Buckets.pick(max(len(x) for x in prompts), self.buckets.prompt, "prompt length")
    new_len = Buckets.pick(max_new_tokens, self.buckets.new_tokens, "max_new_tokens")
    mesh = _mesh(params)
    # When every distinct prompt repeats R > 1 times (GRPO groups, a game's detectors),
    # each is prefilled once and its R rows, made consecutive, share its prefix cache.
    distinct: dict[tuple[int, ...], int] = {}
    groups = np.array([distinct.setdefault(tuple(x), len(distinct)) for x in prompts])
    counts = set(np.bincount(groups).tolist())
    r, u, b = layout(n, counts.pop() if len(counts) == 1 else 1, self.share_prompts,
                     functools.partial(_rows_per_device, mesh), self.buckets)
    order = np.argsort(groups, kind="stable") if r > 1 else np.arange(n)
    prefilled = list(distinct) if r > 1 else prompts
    tokens_UxP = np.zeros((u, p), np.int32)
    pads_U = np.full((u,), p - 1, np.int32)  # Batch-padding rows: a 1-token prompt.
    for row, prompt in enumerate(prefilled):
      tokens_UxP[row, p - len(prompt):] = prompt
      pads_U[row] = p - len(prompt)
    done_B = np.arange(b) >= n  # Batch-padding rows never hold the loop open.
    constrained = bool(choice.final_S.any())
    node_B = np.full((b,), 0 if constrained else choices_lib.FREE, np.int32)
    if mesh is not None:
      tokens_UxP, pads_U = (_put(x, mesh, u) for x in (tokens_UxP, pads_U))
      done_B, node_B = _put(done_B, mesh, b), _put(node_B, mesh, b)
    state = _prefill(params, tokens_UxP, pads_U, done_B, node_B, config=self.config,
                     new_len=new_len, mesh=mesh,
                     cache_dtype=self.cache_dtype or jax.tree.leaves(params)[0].dtype)
    eos_E = jnp.asarray(list(eos_ids) + [-1] * (_MAX_EOS_IDS - len(eos_ids)), jnp.int32)
    chunk = self.chunk_size if stops else max_new_tokens
    stopped = {}  # row -> kept length, for rows cut at a stop string
    checked = np.zeros(n, np.int64)
    while True:
      state = _decode(params, weights, state, jnp.minimum(state.step + chunk, max_new_tokens),
                      jnp.int32(max_new_tokens), sampling, eos_E, choice, key,
                      config=self.config)
      step, done_B = int(state.step), np.array(parallel.to_host(state.done_B))
      if stops:
        tokens_BxN, lengths_B = parallel.to_host((state.tokens_BxN, state.lengths_B))
        for row in range(n):
          if row in stopped or lengths_B[row] <= checked[row]:
            continue
          end = stops.find_end(tokens_BxN[row, :lengths_B[row]].tolist(), int(checked[row]))
          checked[row] = lengths_B[row]
          if end is not None:
            stopped[row] = end
            done_B[row] = True
        state = state._replace(done_B=jnp.asarray(done_B))
      if done_B[:n].all() or step >= max_new_tokens:
        break
    completions = self._completions(state, n, eos_ids, stopped, constrained)
    out = [None] * n
    for row, completion in zip(order, completions):
      out[row] = completion
    return out

  @staticmethod
  def _completions(state: DecodeState, n: int, eos_ids, stopped, constrained: bool
                   ) -> list[Completion]:
    # Every process fetches all rows: the host-side game logic runs on each of them.
    tokens_BxN, logprobs_BxN, lengths_B = parallel.to_host(
        (state.tokens_BxN, state.logprobs_BxN, state.lengths_B))
    out = []
    for row in range(n):
      length = stopped.get(row, int(lengths_B[row]))
      ids = tuple(int(t) for t in tokens_BxN[row, :length])
      if row in stopped:
        reason = "stop"
      elif ids and ids[-1] in eos_ids:
        reason = "eos"
      elif constrained:  # max_new_tokens holds every choice: the row completed one.
        reason = "stop"
      else:
        reason = "length"
      out.append(Completion(ids, tuple(float(x) for x in logprobs_BxN[row, :length]), reason))
    return out


def generate(config: ModelConfig, params, prompts: Sequence[Sequence[int]], *,
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
             eos_ids: Sequence[int] = (), stop_strings: Sequence[str] = (), tokenizer=None,
             seed: int = 0, choices: Sequence[Sequence[int]] | None = None) -> list[Completion]:
  """Samples one completion per prompt (see the module doc); `temperature=0` is greedy.

  The compiled functions are module-level and shared by every `Sampler`, so
  repeated calls with bucketed shapes do not recompile.
  """
  sampler = Sampler(config, tokenizer=tokenizer)
  return sampler(params, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                 top_p=top_p, top_k=top_k, eos_ids=eos_ids, stop_strings=stop_strings, seed=seed,
                 choices=choices)
