"""The GRPO update: `TrainState` and one jitted `train_step` (optimizer: `rlsvr.rl.optimizer`).

  state = init_train_state(model_config, GRPOConfig(...), params)
  state, metrics = train_step(state, batch)      # jitted once, state donated

The loss is verl's actor loss,
  policy_loss + kl_coef * aggregate(kl_penalty(logp, ref_logp)) - entropy_coef * aggregate(entropy),
every term aggregated with the same mode (`config.loss_agg_mode`: `agg_mode`, or
TRL's `loss_type` preset) over the completion tokens; the policy loss is the one
named by `config.policy_loss` in `rlsvr.rl.losses` (vanilla PPO, GSPO, CISPO, ...).

Precision: `state.params` are the master weights in `param_dtype` (float32 by
default) and the AdamW moments are float32 always; each forward/backward runs
on a `compute_dtype` copy (bfloat16 on accelerators), and `sampling_params`
makes the one copy per step that the sampler reads. (Stored in bf16, an update
of lr 1e-6 is below half an ulp of nearly every weight and rounds away.)

LoRA (`init_train_state(..., lora=LoraConfig(...))`): `state.params` are the adapters
alone (fp32 masters, with the AdamW moments), `state.base` the frozen weights in the
compute dtype, which the forward reads with the adapters attached (`forward_weights`)
and the KL term reads alone: the reference is the base model (no `ref_params`). The
sampler reads the base with the adapters merged in, made once per step. With LoRA dropout,
each micro-batch's gradient pass draws its masks from (step, update, micro-batch), so a
resumed run draws what an uninterrupted one would; the no-gradient passes (old and
reference log-probs) run without dropout, as a model in eval mode.

Old log-probabilities come from the trainer, as verl's recomputed
`old_log_prob`: with one update per batch (`updates_per_batch=1`, the papers'
setting) they are the stop-gradient of the update's own log-probs, so every
ratio starts at exactly 1; with K > 1 updates per batch (verl's mini-batches) a
no-gradient pass computes them before the first update, and the batch is split
into K mini-batches, one optimizer update each. The sampler's log-probs (of the
distribution it drew from, truncated by top-p/top-k, rounded by its own dtype)
only feed the `rollout_corr/*` mismatch metrics and, with `rollout_is`, the
truncated importance-sampling weights of the policy loss.

Batch (a dict of arrays; `rlsvr.rl.batch.build_batch` makes one from trajectories):
  tokens_BxT          int32  prompt left-padded, then completion right-padded
  attention_mask_BxT  int32  1 on every real token (prompt and completion)
  loss_mask_BxC       f32    1 on trained completion tokens (the last C columns), EOS included
  sampler_logp_BxC    f32    sampler logprobs at the positions of the tokens they
                             sampled (logp[t] = log p(tokens[t] | tokens[<t]))
  advantages_B        f32    one advantage per row, broadcast over its tokens
  temperature_B       f32    optional: the temperature each row was sampled at, which
                             its logits are divided by; default `GRPOConfig.temperature`
  allowed_BxCxK       i32    optional: per position, the tokens a constrained sampler
                             could draw (-1 pads; all -1: any), which its probability
                             is normalised over
  old_logp_BxC        f32    optional: logprobs of the policy that the ratios are taken
                             against (e.g. an older policy's); default: the trainer's
  ref_logp_BxC        f32    optional; without it and with kl_coef > 0 the step
                             computes it from `state.ref_params`
Rows whose loss mask is all zero (padding rows) change nothing. Instead of
tokens_BxT and attention_mask_BxT, a batch may give each distinct prompt once
(`build_batch(share_prompts=True)`: prompt_tokens_UxP, prompt_mask_UxP,
prompt_index_B, completion_tokens_BxC, completion_mask_BxC), or its rows packed end
to end without padding (`build_batch(pack_tokens=N)`: packed_tokens_NxL,
packed_positions_NxL, packed_segment_NxL, packed_branch_NxL, score_hidden_S,
score_token_S, score_row_S, score_col_S); the update is the same.

Micro-batching: each (mini-)batch is split into `rows / micro_batch_size`
micro-batches (row i goes to micro-batch i mod n, which keeps every micro-batch
spread over all data shards). The loss denominators (token or sequence counts)
are counted once over the whole (mini-)batch and each micro-batch contributes
its numerator's gradient, so every split yields the full-batch update.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

from rlsvr import parallel, runtime
from rlsvr.model import lora as lora_lib
from rlsvr.model.config import ModelConfig
from rlsvr.rl import core, losses
from rlsvr.rl.config import DTYPES, GRPOConfig  # noqa: F401  (public here: rlsvr.train uses DTYPES)
from rlsvr.rl.logprobs import packed_logprobs, shared_prompt_logprobs, token_logprobs
from rlsvr.rl.optimizer import lr_schedule, make_optimizer

Params = Any


@flax.struct.dataclass
class TrainState:
  """Everything a step reads and writes. The configs are static (part of the treedef).

  `params` are what the update trains: every weight, or with `lora` the adapters, and
  then `base` holds the frozen weights (compute dtype).
  """

  step: jax.Array
  params: Params
  opt_state: optax.OptState
  ref_params: Params | None
  base: Params | None
  model_config: ModelConfig = flax.struct.field(pytree_node=False)
  config: GRPOConfig = flax.struct.field(pytree_node=False)
  mesh: jax.sharding.Mesh | None = flax.struct.field(pytree_node=False, default=None)
  lora: lora_lib.LoraConfig | None = flax.struct.field(pytree_node=False, default=None)


def _cast(tree, dtype):
  return jax.tree.map(lambda x: x.astype(dtype), tree)


# Jitted so the result is always fresh buffers: the state is donated each step, and
# the caller's params (or the policy's, for the reference copy) must survive that.
_copy_cast = jax.jit(_cast, static_argnums=1)


def init_train_state(model_config: ModelConfig, config: GRPOConfig, params: Params,
                     lora: lora_lib.LoraConfig | None = None, seed: int = 0) -> TrainState:
  """A fresh state from initial `params` (copied; sharding kept, optimizer state alike).

  The reference weights are a frozen copy of `params` in the compute dtype when
  `config.kl_coef > 0`, else None. With `lora`, `params` become the frozen base (compute
  dtype; `params` themselves when they are in it) and fresh adapters, drawn from `seed`,
  are what trains.
  """
  base, ref = None, None
  if lora is None:
    stored = _copy_cast(params, jnp.dtype(config.param_dtype))
    ref = _copy_cast(params, config.dtype) if config.kl_coef > 0 else None
  else:
    lora.check(model_config)
    base = cast_params(params, config.dtype)  # Never donated: no copy needed.
    init = functools.partial(lora_lib.init_adapters, model_config, lora,
                             dtype=jnp.dtype(config.param_dtype))
    key = jax.random.key(seed)
    mesh = parallel.mesh_of(params)
    # Drawn in place on the mesh (a jit's out_shardings work across processes too).
    shardings = None if mesh is None else parallel.param_shardings_of(jax.eval_shape(init, key),
                                                                       mesh)
    stored = jax.jit(init, out_shardings=shardings)(key)
  # Adam moments in fp32 even for bf16 params; zeros_like keeps each param's sharding.
  opt_state = make_optimizer(config).init(_cast(stored, jnp.float32))
  # Fresh arrays (step, Adam's count, host-made params) are uncommitted; the step
  # returns them committed, which would compile it a second time. Commit all of them now:
  # arrays where they are, scalars and host arrays replicated next to the params.
  replicated = jax.tree.leaves(stored)[0].sharding
  if isinstance(replicated, jax.sharding.NamedSharding):
    replicated = jax.sharding.NamedSharding(replicated.mesh, jax.sharding.PartitionSpec())
  # (A jitted identity, not device_put: in a multi-process run device_put cannot move a
  # process-local array onto other processes' devices.)
  commit = lambda tree: jax.tree.map(
      lambda x: jax.device_put(x, x.sharding) if isinstance(x, jax.Array) and x.ndim else
      jax.jit(lambda y: y, out_shardings=replicated)(x), tree)
  return TrainState(step=commit(jnp.zeros((), jnp.int32)), params=commit(stored),
                    opt_state=commit(opt_state), ref_params=commit(ref), base=commit(base),
                    model_config=model_config, config=config, mesh=parallel.mesh_of(stored),
                    lora=lora)


def cast_params(params: Params, dtype) -> Params:
  """`params` in `dtype`: a fresh copy when any leaf differs, else `params` themselves."""
  if all(x.dtype == jnp.dtype(dtype) for x in jax.tree.leaves(params)):
    return params
  return _copy_cast(params, jnp.dtype(dtype))


def sampling_params(state: TrainState) -> Params:
  """The weights the sampler reads this step: the masters in the compute dtype.

  A copy made once per step when the dtypes differ; the masters themselves when
  they are equal (then valid only until `train_step` donates them). With LoRA: the
  base with the adapters merged in (`lora.merge`), a copy each step.
  """
  if state.lora is not None:
    return lora_lib.merge_jit(state.model_config, state.lora, state.base, state.params,
                              state.config.dtype)
  return cast_params(state.params, state.config.dtype)


def forward_weights(state: TrainState, trainable: Params, dropout_key=None) -> Params:
  """What the forward reads for `trainable` (`state.params` or a copy of them): those
  weights themselves, or with LoRA the frozen base with them attached (and, given a
  key, the adapters' dropout)."""
  if state.lora is None:
    return trainable
  return lora_lib.attach(state.model_config, state.lora, state.base, trainable, dropout_key)


def _dropout_key(state: TrainState, *indices):
  """The LoRA dropout key of (step, *indices), or None when the run has no dropout."""
  if state.lora is None or not state.lora.dropout:
    return None
  key = jax.random.fold_in(jax.random.key(0), state.step)
  for i in indices:
    key = jax.random.fold_in(key, i)
  return key


def reference_weights(state: TrainState) -> Params | None:
  """The KL reference: the frozen copy of the initial weights, or with LoRA the base."""
  return state.base if state.lora is not None else state.ref_params


# The keys of each batch layout that the forward reads (`rlsvr.rl.batch`).
_WHOLE_ROWS = ("tokens_BxT", "attention_mask_BxT")
_SHARED_PROMPTS = ("prompt_tokens_UxP", "prompt_mask_UxP", "prompt_index_B",
                   "completion_tokens_BxC", "completion_mask_BxC")
_PACKED = ("packed_tokens_NxL", "packed_positions_NxL", "packed_segment_NxL",
           "packed_branch_NxL", "score_hidden_S", "score_token_S", "score_row_S",
           "score_col_S")


def _logprobs(state: TrainState, weights, batch):
  """(logp_BxC, entropy_BxC) of the batch's completions under `weights` (all of them:
  `forward_weights`)."""
  cfg = state.config
  # Rows sampled at other temperatures than the run's (`Trajectory.temperature`, e.g. the
  # spy game's detectors) carry theirs; a batch built without them is scored at the run's.
  kw = dict(temperature=batch.get("temperature_B", cfg.temperature),
            allowed_BxCxK=batch.get("allowed_BxCxK"), chunk=cfg.logits_chunk or None,
            remat=cfg.remat)
  if "prompt_tokens_UxP" in batch:
    return shared_prompt_logprobs(state.model_config, weights,
                                  *(batch[k] for k in _SHARED_PROMPTS), **kw)
  if "packed_tokens_NxL" in batch:
    rows, cols = batch["loss_mask_BxC"].shape
    return packed_logprobs(state.model_config, weights, *(batch[k] for k in _PACKED),
                           rows=rows, cols=cols, **kw)
  return token_logprobs(state.model_config, weights, batch["tokens_BxT"],
                        batch["attention_mask_BxT"],
                        completion_len=batch["loss_mask_BxC"].shape[-1], **kw)


def _split_rows(batch: dict[str, jax.Array], parts: int, what: str):
  """[parts, n / parts, ...] arrays; row (or shared prompt) i goes to part i % parts, so
  a contiguous data shard feeds every part."""
  for k, v in batch.items():
    if v.shape[0] % parts:
      kind = "prompts" if "UxP" in k else "buffers" if "NxL" in k else "rows"
      raise ValueError(f"batch of {v.shape[0]} {kind} is not a multiple of {what}={parts}")
  return {k: v.reshape(v.shape[0] // parts, parts, *v.shape[1:]).swapaxes(0, 1)
          for k, v in batch.items()}


def _split_micro(batch: dict[str, jax.Array], micro_batch_size: int):
  b = batch["loss_mask_BxC"].shape[0]
  mb = micro_batch_size or b
  if b % mb:
    raise ValueError(f"batch of {b} rows is not a multiple of micro_batch_size={mb}")
  return _split_rows(batch, b // mb, "micro-batches")


def _no_grad_logprobs(state: TrainState, weights, batch) -> jax.Array:
  """logp_BxC of the whole batch under `weights` (micro-batched, no gradient)."""
  keys = ("loss_mask_BxC", "temperature_B", "allowed_BxCxK", *_SHARED_PROMPTS, *_PACKED,
          *_WHOLE_ROWS)
  batch = {k: batch[k] for k in keys if k in batch}
  # The parts the update splits the batch into (updates x micro-batches, row i to part
  # i % parts), not just micro-batches: a shared-prompt or packed batch indexes each row's
  # prompt or buffer within its part (rl/batch.py), so any other split reads other rows'.
  cfg = state.config
  rows_per_update = batch["loss_mask_BxC"].shape[0] // cfg.updates_per_batch
  micro_batches = rows_per_update // cfg.micro_batch_size if cfg.micro_batch_size else 1
  micro = _split_rows(batch, cfg.updates_per_batch * micro_batches,
                      "updates_per_batch x micro-batches per update")
  weights = jax.lax.stop_gradient(weights)
  logp_NxMxT = jax.lax.map(lambda mb: _logprobs(state, weights, mb)[0], micro)
  n, m, t = logp_NxMxT.shape
  return logp_NxMxT.swapaxes(0, 1).reshape(n * m, t)


@runtime.jit_full_sequence
def reference_logprobs(state: TrainState, batch: dict[str, jax.Array]) -> jax.Array:
  """ref_logp_BxC of the batch under the reference (micro-batched, no gradient)."""
  if reference_weights(state) is None:
    raise ValueError("this state has no reference weights (kl_coef == 0)")
  return _no_grad_logprobs(state, reference_weights(state), batch)


# Metrics that are token sums inside a micro-batch, divided by the token count at the end.
_TOKEN_SUMS = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
               "rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/ratio_mean",
               "rollout_corr/ratio_fraction_outside")
_MAXES = ("rollout_corr/ratio_max",)


def _micro_loss(params, state: TrainState, mb: dict[str, jax.Array], denominator,
                dropout_key=None):
  """This micro-batch's share of the (mini-)batch loss, and its metric numerators;
  `params` are the compute-dtype copy of the trained weights."""
  cfg = state.config
  logp_BxC, entropy_BxC = _logprobs(state, forward_weights(state, params, dropout_key), mb)
  mask_BxC = mb["loss_mask_BxC"]

  def share(values_BxC):
    numerator, _ = core.aggregate_terms(values_BxC, mask_BxC, cfg.loss_agg_mode,
                                        loss_scale_factor=cfg.loss_scale_factor or None)
    return numerator / denominator

  # One update per batch: the old policy is this one, so the ratio is exactly 1 and the
  # loss is the policy gradient (verl recomputes old_log_prob with the actor likewise).
  old_logp_BxC = mb.get("old_logp_BxC", jax.lax.stop_gradient(logp_BxC))
  terms = losses.policy_loss_fn(cfg.policy_loss)(logp_BxC, old_logp_BxC,
                                                 mb["advantages_B"][:, None], mask_BxC, cfg)
  pg_loss_BxC = terms["pg_loss"]
  if cfg.rollout_is != "none":
    pg_loss_BxC = pg_loss_BxC * core.rollout_is_weights(
        old_logp_BxC, mb["sampler_logp_BxC"], mask_BxC, cfg.rollout_is, cfg.rollout_is_threshold)
  pg_loss = share(pg_loss_BxC)
  entropy = share(entropy_BxC)
  loss = pg_loss - cfg.entropy_coef * entropy if cfg.entropy_coef else pg_loss
  aux = {"actor/pg_loss": pg_loss, "actor/entropy": entropy}
  if cfg.kl_coef:
    if "ref_logp_BxC" in mb:
      ref_logp_BxC = mb["ref_logp_BxC"]
    else:
      ref_logp_BxC = _logprobs(state, jax.lax.stop_gradient(reference_weights(state)), mb)[0]
    kl = share(core.kl_penalty(logp_BxC, ref_logp_BxC, cfg.kl_kind))
    loss = loss + cfg.kl_coef * kl
    aux["actor/kl"] = kl
  mask_f = mask_BxC.astype(jnp.float32)
  for name, key in (("actor/pg_clipfrac", "clipped"), ("actor/pg_clipfrac_lower", "clipped_lower"),
                    ("actor/ppo_kl", "neg_log_ratio")):
    aux[name] = (terms[key] * mask_f).sum()
  mismatch = core.rollout_mismatch_sums(jax.lax.stop_gradient(old_logp_BxC),
                                        mb["sampler_logp_BxC"], mask_f, cfg.rollout_is_threshold)
  return loss, {**aux, **mismatch["sum"], **mismatch["max"]}


def _update(state: TrainState, batch: dict[str, jax.Array], update_index=0):
  """One optimizer update on `batch` (one mini-batch): (state, metrics); token-sum
  metrics are returned as sums, with the token count in "tokens"."""
  cfg = state.config
  mask_BxC = batch["loss_mask_BxC"].astype(jnp.float32)
  # Counted over the whole batch, before any split: this is what makes micro-batching exact.
  _, denominator = core.aggregate_terms(mask_BxC, mask_BxC, cfg.loss_agg_mode)
  denominator = jnp.maximum(denominator, 1.0)

  grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)
  # One compute-dtype copy per update; gradients w.r.t. it are what a gradient w.r.t. the
  # masters through the cast would be (the cast's transpose is a cast), but in the compute
  # dtype: added into the fp32 accumulator, no fp32 micro-batch gradient is materialised.
  compute_params = _cast(state.params, cfg.dtype)

  def accumulate(grads, mb_and_index):
    mb, micro_index = mb_and_index
    (loss, aux), g = grad_fn(compute_params, state, mb, denominator,
                             _dropout_key(state, update_index, micro_index))
    grads = jax.tree.map(lambda acc, x: acc + x.astype(jnp.float32), grads, g)
    return grads, dict(aux, **{"actor/loss": loss})

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
  micro = _split_micro(batch, cfg.micro_batch_size)
  n_micro = micro["loss_mask_BxC"].shape[0]
  grads, aux = jax.lax.scan(accumulate, zeros, (micro, jnp.arange(n_micro)))
  metrics = {k: v.max() if k in _MAXES else v.sum() for k, v in aux.items()}

  grad_norm = optax.global_norm(grads)
  params_f32 = _cast(state.params, jnp.float32)
  updates, opt_state = make_optimizer(cfg).update(grads, state.opt_state, params_f32)
  params = _cast(optax.apply_updates(params_f32, updates), jnp.dtype(cfg.param_dtype))
  # As verl: a non-finite gradient skips the update rather than poisoning the weights.
  finite = jnp.isfinite(grad_norm)
  keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
  metrics.update({"actor/grad_norm": grad_norm, "tokens": mask_BxC.sum(),
                  "actor/update_skipped": 1.0 - finite.astype(jnp.float32)})
  params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
  return state.replace(params=params, opt_state=opt_state), metrics


def _train_step(state: TrainState, batch: dict[str, jax.Array]):
  """One GRPO step: `(state, batch) -> (new_state, metrics)`; jitted with the state donated.

  Metrics (means over the step's updates; token metrics over all its tokens):
  actor/loss, actor/pg_loss, actor/kl (kl_coef > 0), actor/entropy,
  actor/pg_clipfrac, actor/pg_clipfrac_lower, actor/ppo_kl, actor/grad_norm
  (before clipping), actor/lr, actor/update_skipped, and the sampler mismatch
  rollout_corr/{kl, k3_kl, ratio_mean, ratio_max, ratio_fraction_outside}
  (ratio = pi_trainer / pi_sampler; outside: beyond [1/threshold, threshold]).
  """
  cfg = state.config
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  if cfg.updates_per_batch > 1 and "old_logp_BxC" not in batch:
    # The policy before the first update; every later update's ratios are against it.
    batch["old_logp_BxC"] = _no_grad_logprobs(
        state, forward_weights(state, _cast(state.params, cfg.dtype)), batch)
  if cfg.updates_per_batch == 1:
    state_after, per_update = _update(state, batch)
    per_update = jax.tree.map(lambda x: x[None], per_update)
  else:
    state_after, per_update = jax.lax.scan(
        lambda s, xs: _update(s, *xs), state,
        (_split_rows(batch, cfg.updates_per_batch, "updates_per_batch"),
         jnp.arange(cfg.updates_per_batch)))
  if state.mesh is not None:
    params, opt_state = parallel.constrain_params((state_after.params, state_after.opt_state),
                                                  state.mesh)
    state_after = state_after.replace(params=params, opt_state=opt_state)
  tokens = jnp.maximum(per_update.pop("tokens").sum(), 1.0)
  metrics = {k: (v.max() if k in _MAXES else v.sum() / tokens if k in _TOKEN_SUMS else v.mean())
             for k, v in per_update.items()}
  metrics["actor/lr"] = lr_schedule(cfg)(state.step * cfg.updates_per_batch)
  return state_after.replace(step=state.step + 1), metrics


def _train_step_beside(state: TrainState, batch: dict[str, jax.Array], base: Params | None):
  state_after, metrics = _train_step(state.replace(base=base), batch)
  return state_after.replace(base=None), metrics


_donating_train_step = runtime.jit_full_sequence(_train_step_beside, donate_argnums=0)


def train_step(state: TrainState, batch: dict[str, jax.Array]):
  """`_train_step`, jitted once, `state` donated except for a LoRA run's frozen base: an
  environment may read the base (a fixed judge of the initial weights) between steps."""
  state_after, metrics = _donating_train_step(state.replace(base=None), batch, state.base)
  return state_after.replace(base=state.base), metrics


train_step._cache_size = _donating_train_step._cache_size  # noqa: SLF001 (tests count compiles)
