"""Defaults shared by every experiment; experiment files override what differs.

Not a runnable config by itself: `spy_*.py` and `rlsr_*.py` build on it.
"""
import ml_collections
from ml_collections.config_dict import placeholder


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # Seeds the model init (random sources), the data order, games and sampling.
  c.steps = 200  # Training steps; each step plays whole games and makes one update.
  c.workdir = ""  # Output folder; --workdir wins; empty: runs/<config name>.
  # Refuse to start when the memory plan (`python -m rlsvr.plan`) does not fit the devices.
  # Its activation terms are estimates, not XLA's own buffer sizes: False overrides it.
  c.check_memory = True
  # A rerun in a workdir with checkpoints resumes it, and refuses when a key that changes
  # results (model, data, optimizer, game, judge, ...) differs from the checkpoint's run;
  # True continues anyway (the differing keys are printed).
  c.resume_with_changes = False
  # Comma-separated modules imported first: plug-ins that register an environment, an RLSR
  # task, a policy loss or an advantage estimator (see the README's "Extending").
  c.plugins = ""

  c.model = ml_collections.ConfigDict()
  # "smollm2" (bundled SmolLM2-135M-Instruct), "hub:<org/name>" (HF hub, needs network),
  # "random:<preset>" (random weights of a rlsvr.model.config preset, or "random:tiny"),
  # or a local HF directory.
  c.model.source = "hub:Qwen/Qwen3-4B-Instruct-2507"
  # Master weights (and the checkpoints) in param_dtype; forward/backward and the sampler's
  # copy in compute_dtype. bf16 masters would round away nearly every update at lr 1e-6.
  c.model.param_dtype = "float32"
  c.model.compute_dtype = "bfloat16"
  # "" (the model directory's tokenizer) or "qwen3" (the offline-built Qwen3 tokenizer).
  c.model.tokenizer = ""
  # Qwen3's hybrid thinking (the chat template's `enable_thinking`): unset keeps the
  # template's default (Qwen3: thinking on); False / True switch it for every prompt.
  c.model.enable_thinking = placeholder(bool)
  # LoRA (rlsvr.model.lora): rank > 0 trains adapters on the frozen base model, which is
  # also the KL reference. The update is scaled by alpha / rank. targets: comma-separated
  # projections (q,k,v,o,gate,up,down) or "all"; layers: comma-separated indices, "" = all.
  c.model.lora = ml_collections.ConfigDict()
  c.model.lora.rank = 0
  c.model.lora.alpha = 32.0
  c.model.lora.targets = "q,v"
  c.model.lora.layers = ""
  c.model.lora.dropout = 0.0  # PEFT's lora_dropout on the adapters' input, in training.

  c.data = ml_collections.ConfigDict()
  c.data.source = "hub"  # "hub" (the task's dataset), "bundled", a hub name, or a local file.
  c.data.field = ""  # Text field of local / hub rows; empty: the task's default field.
  c.data.config = ""  # Hub dataset config name; empty: the task's default.
  c.data.split = "train"  # Hub split.
  c.data.limit = 0  # Read at most this many documents (0: the task's default cap).

  c.sampling = ml_collections.ConfigDict()
  c.sampling.temperature = 1.0  # 0 is greedy. Traced: changing it does not recompile.
  c.sampling.top_p = 1.0  # Nucleus sampling mass.
  c.sampling.top_k = 0  # 0 disables top-k.
  # Rows per compiled sampler call (0: all of a call at once); longer lists run in slices.
  c.sampling.max_rows = 0
  # KV-cache token slots per sampler slice (0: no limit): P per distinct prompt (rows that
  # repeat a prompt share it) + N per row. Slices are cut to fit it: at long prompts the
  # cache decides whether sampling fits (`python -m rlsvr.plan`).
  c.sampling.max_cache_tokens = 0

  c.grpo = ml_collections.ConfigDict()
  c.grpo.lr = 1e-6  # AdamW learning rate (paper).
  c.grpo.warmup_steps = 0  # Linear warmup updates.
  c.grpo.lr_schedule = "constant"  # After the warmup: constant (verl's default) | linear | cosine.
  c.grpo.min_lr_ratio = 0.0  # linear/cosine end at lr * min_lr_ratio...
  c.grpo.decay_steps = 0  # ...at this update; 0: the run's last (steps * updates_per_batch).
  c.grpo.weight_decay = 0.01  # AdamW weight decay.
  c.grpo.max_grad_norm = 1.0  # Global-norm gradient clipping.
  c.grpo.clip_low = 0.2  # PPO ratio clip below 1.
  c.grpo.clip_high = 0.2  # PPO ratio clip above 1 (clip-higher when > clip_low).
  c.grpo.clip_c = 3.0  # Dual-clip bound for negative advantages.
  c.grpo.kl_coef = 0.001  # KL loss coefficient (paper: low_var_kl 0.001); 0: no reference.
  c.grpo.kl_kind = "low_var_kl"  # k1 | abs | k2/mse | k3/low_var_kl.
  c.grpo.entropy_coef = 0.0  # Entropy bonus (paper: 0).
  # Policy loss by name (rlsvr.rl.losses): vanilla (PPO clip + dual clip) | gspo (sequence
  # ratio; paper clips clip_low=3e-4, clip_high=4e-4) | cispo (clipped IS weight * logp).
  c.grpo.policy_loss = "vanilla"
  c.grpo.agg_mode = "token-mean"  # verl loss_agg_mode.
  # TRL's loss_type, replacing agg_mode when set: grpo (seq-mean-token-mean) | dapo, bnpo
  # (token-mean) | dr_grpo (seq-mean-token-sum-norm / loss_scale_factor, which it needs).
  c.grpo.loss_type = ""
  # seq-mean-token-sum-norm divisor: the max completion length; 0: the environment's limit.
  c.grpo.loss_scale_factor = 0.0
  # Advantage estimator (rlsvr.rl.advantages): grpo | rloo | reinforce_plus_plus_baseline.
  c.grpo.advantage = "grpo"
  c.grpo.norm_adv_by_std = True  # GRPO: divide group-centred rewards by the group std.
  # DAPO overlong shaping: completions beyond max length - overlong_buffer tokens lose up to
  # overlong_penalty_factor of reward (linearly, all of it at the limit); 0: off.
  c.grpo.overlong_buffer = 0
  c.grpo.overlong_penalty_factor = 1.0
  # Rows per forward/backward over all devices (0: the whole batch at once). 8 is one row
  # per device of an 8-GPU node: at the paper's lengths a micro-batch's activations, not
  # the weights, are what decide whether a step fits (`python -m rlsvr.plan`).
  c.grpo.micro_batch_size = 8
  c.grpo.remat = True  # Recompute layers in the backward pass (memory for compute).
  # Rows that continue one prompt (a group's samples, a game's detectors) run its forward
  # once, not once per row (`rlsvr.rl.batch`); the update is the same, minus the repeats.
  c.grpo.share_prompts = True
  # > 0: rows packed end to end into buffers of up to this many tokens, without padding
  # (`rlsvr.rl.packing`; the same update; one data shard). 0: rows padded to buckets.
  # Faster than the padded layouts where rows share prompts or differ in length, never
  # slower beyond noise (bench/packing.py; docs/benchmarks.md, "Packed update batches").
  c.grpo.pack_tokens = 1024
  # Optimizer updates per batch, each on 1/K of the rows (verl's mini-batches; paper: 1).
  # With 1 the ratios start at exactly 1; with K > 1 a no-gradient pass scores the batch
  # under the pre-update policy first.
  c.grpo.updates_per_batch = 1
  # Truncated importance sampling against the sampler's own log-probs (verl
  # rollout_correction): none | token | sequence, weights capped at the threshold.
  c.grpo.rollout_is = "none"
  c.grpo.rollout_is_threshold = 2.0
  # DAPO dynamic sampling: drop groups whose raw rewards are all equal and play more
  # until the batch holds a full step's groups or max_num_gen_batches rounds were played.
  c.grpo.filter_groups = False
  c.grpo.max_num_gen_batches = 4

  c.mesh = ml_collections.ConfigDict()
  c.mesh.shape = {"data": 1, "fsdp": -1, "tensor": 1}  # -1: all remaining devices.

  # Multi-host runs (one process per host, `jax.distributed`); see launch/.
  c.distributed = ml_collections.ConfigDict()
  # auto: start when SLURM/Open MPI/a TPU slice/JAX_COORDINATOR_ADDRESS says there are
  # several processes; on: always; off: never.
  c.distributed.mode = "auto"
  c.distributed.coordinator_address = ""  # host:port of process 0; empty: detected.
  c.distributed.num_processes = 0  # 0: detected from the cluster environment.
  c.distributed.process_id = -1  # -1: detected from the cluster environment.

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every = 50  # Save every this many steps (and at the end).
  c.checkpoint.keep = 3  # Keep the newest this many checkpoints.

  # Held-out evaluation on the initial weights and after the last step (`rlsvr.heldout`),
  # for environments that implement `evaluate`: heldout.jsonl and a before/after table.
  c.heldout = ml_collections.ConfigDict()
  c.heldout.size = 0  # Held-out episodes (spy: games; RLSR: problems); 0: off.
  # Episodes per sampler call; 0: a training step's count (its compiled shapes). Larger
  # calls cost a compile and save the many small calls' per-token overhead; the memory
  # plan (`rlsvr.plan`) counts a step's calls, not these.
  c.heldout.per_call = 0

  c.log = ml_collections.ConfigDict()
  c.log.tensorboard = True  # Write TensorBoard event files under workdir/tb.
  c.log.wandb_project = ""  # Also log to Weights & Biases when set (needs `wandb`).
  return c


def parse_variants(arg: str | None, known: tuple[str, ...]) -> list[str]:
  """The comma-separated variants of `configs/x.py:a,b`; ValueError naming unknown ones."""
  variants = [v for v in (arg or "").split(",") if v]
  unknown = [v for v in variants if v not in known]
  if unknown:
    raise ValueError(f"unknown variant(s) {unknown}; known: {known}")
  return variants


def run_locally(c: ml_collections.ConfigDict, source: str, tokenizer: str = "") -> None:
  """Settings every CPU-sized variant (`cpu`, `smoke`) shares: one device, float32."""
  c.model.source = source
  c.model.tokenizer = tokenizer
  c.model.compute_dtype = "float32"  # XLA:CPU runs fp32 faster than bf16.
  c.mesh.shape = {"data": 1, "fsdp": 1, "tensor": 1}
  c.sampling.max_rows = 0  # Small games: every row of a call at once.
  c.sampling.max_cache_tokens = 0
  c.grpo.lr = 1e-5  # A visible change within a few steps of a small model.
  # Bounds activation memory (the attention scores of long prompts) on a 24 GB host.
  c.grpo.micro_batch_size = 4
