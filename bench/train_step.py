"""Tokens/s of one GRPO update (forward + backward + AdamW), ours against PyTorch.

  python bench/train_step.py                          # tiny Qwen3 and SmolLM2-135M on CPU
  python bench/train_step.py --models tiny --seq-lens 128,512 --batch 4
  python bench/train_step.py --models smollm2-135m --seq-lens 80 --batch 16 --devices 2 \
      --profile /tmp/prof                            # also data=2; a jax.profiler trace
  python bench/train_step.py --models smollm2-135m --seq-lens 224 --completion-len 32 \
      --batch 16 --rows-per-prompt 8                 # GRPO groups: also the shared layout
  python bench/train_step.py --models qwen3-0.6b --dtype bfloat16 --seq-lens 2048 \
      --batch 4 --remat --no-torch                   # on a GPU: also prints MFU
  python bench/train_step.py --models smollm2-135m,qwen3-0.6b --seq-lens 128 --lora-rank 16
                                                     # also LoRA: ours vs torch + peft

For each model and sequence length both sides run the same computation on the
same weights: token logprobs of a (B, T) batch whose last --completion-len columns
(default: the second half) are the completion, the token-mean clipped policy loss
with the ratio against the policy itself (one update per batch, as ours and TRL's
`num_iterations=1` take it), backward, global-norm clipping and an AdamW step; the
printed pg_loss of the two sides must agree. PyTorch runs the
`transformers` model with a plain `loss.backward(); opt.step()`. Shared
machines are noisy: compare the ratio printed on one line, not absolute
numbers across runs; the load average is printed with the results.

With --rows-per-prompt R, rows come in groups of R with the same prompt part (the
prompt of a GRPO group); ours then also runs the batch laid out by
`build_batch(share_prompts=True)`, each prompt's forward once per group (layout
"shared"), against the same torch step on whole rows, which is what TRL runs. The
tokens/s count whole rows on every side, so the ratio is a ratio of times.

With --lora-rank R a "lora" row follows (and "lora shared" with --rows-per-prompt), both
sides training rank-R adapters on --lora-targets of the frozen model (ours `model.lora`;
torch a `peft.get_peft_model` model, AdamW over the adapters alone). "state MiB" is what the update keeps between
steps: ours the train state's arrays (masters or adapters, AdamW moments, frozen base,
reference), torch the module's parameters and AdamW's state.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
_ARGS.add_argument("--models", default="tiny,smollm2-135m")
_ARGS.add_argument("--seq-lens", default="128,512")
_ARGS.add_argument("--batch", type=int, default=4)
_ARGS.add_argument("--micro-batch", type=int, default=0)
_ARGS.add_argument("--steps", type=int, default=3)
_ARGS.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="compute dtype (ours: fp32 masters unless --param-dtype; torch: "
                        "the model's dtype)")
_ARGS.add_argument("--param-dtype", default="float32", choices=("float32", "bfloat16"))
_ARGS.add_argument("--remat", action="store_true")
_ARGS.add_argument("--no-torch", action="store_true")
_ARGS.add_argument("--devices", type=int, default=1,
                   help="CPU only: host devices; with N > 1 ours also runs with the batch "
                        "split over them (data=N). Measured slower for SmolLM2 at T=80, and "
                        "hung in an all-reduce at T=272, B=16 (20 GB resident)")
_ARGS.add_argument("--rows-per-prompt", type=int, default=1,
                   help="rows per shared prompt (groups); > 1 adds the shared-prompt layout")
_ARGS.add_argument("--completion-len", type=int, default=0,
                   help="completion columns of each row (default: its second half)")
_ARGS.add_argument("--lora-rank", type=int, default=0,
                   help="> 0: also a LoRA row (ours and torch + peft) with this rank")
_ARGS.add_argument("--lora-targets", default="q,k,v,o,gate,up,down")
_ARGS.add_argument("--profile", default="",
                   help="write a jax.profiler trace of our timed steps under this folder")
FLAGS = _ARGS.parse_args()

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rlsvr import runtime  # noqa: E402

runtime.exec_with_huge_pages()  # As `rlsvr.train` runs; both sides share this process.
runtime.set_host_devices(FLAGS.devices)  # Before JAX starts; only the CPU backend reads it.

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rlsvr import parallel  # noqa: E402
from rlsvr.model import hf, lora as lora_lib, qwen3  # noqa: E402
from rlsvr.model.config import ModelConfig, preset  # noqa: E402
from rlsvr.rl.batch import build_batch  # noqa: E402
from rlsvr.rl.logprobs import token_logprobs  # noqa: E402
from rlsvr.rl.rollout import Trajectory  # noqa: E402
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step  # noqa: E402

TINY_HF = dict(model_type="qwen3", vocab_size=4096, hidden_size=256, intermediate_size=768,
               num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
               max_position_embeddings=4096, tie_word_embeddings=True)
BF16_PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def make_models(name: str, dtype: str, with_torch: bool):
  """(our config, our params, torch model or None) with identical weights."""
  if name in ("tiny", "smollm2-135m"):
    import torch
    import transformers
    torch_dtype = getattr(torch, dtype)
    if name == "tiny":
      cfg = transformers.AutoConfig.for_model(**TINY_HF)
      model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
      config = ModelConfig.from_hf_dict(cfg.to_dict())
      tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
      params = hf.params_from_tensors(config, tensors, jnp.float32)
    else:
      from rlsvr.model import assets
      path = assets.smollm2_135m()
      config, params = hf.load_pretrained(path, jnp.float32)
      model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return config, params, model.to(torch_dtype) if with_torch else None
  config = preset(name)
  params = jax.jit(qwen3.init_params, static_argnums=(0, 2))(config, jax.random.key(0),
                                                             jnp.float32)
  return config, params, None


def make_batch(config: ModelConfig, params, batch: int, seq_len: int, rows_per_prompt: int = 1,
               completion_len: int = 0, seed: int = 0):
  start = seq_len - (completion_len or seq_len - seq_len // 2)  # The first completion column.
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, config.vocab_size, (batch, seq_len)).astype(np.int32)
  first = np.arange(batch) // rows_per_prompt * rows_per_prompt
  tokens[:, :start] = tokens[first, :start]  # Each group's rows share a prompt.
  attention = np.ones((batch, seq_len), np.int32)
  # The end of each row is the completion, as `build_batch` lays it out.
  loss_mask = np.ones((batch, seq_len - start), np.float32)
  # Sampler logprobs = the current policy's. Ours takes the old logprobs from its own
  # forward (ratio 1, as in training); torch gets them as a fixed input: ratio 1 too.
  logp, _ = jax.jit(token_logprobs, static_argnums=0)(config, params, tokens, attention)
  return {"tokens_BxT": tokens, "attention_mask_BxT": attention, "loss_mask_BxC": loss_mask,
          "sampler_logp_BxC": np.asarray(logp, np.float32)[:, start:] * loss_mask,
          "advantages_B": rng.normal(size=batch).astype(np.float32)}


def shared_prompt_batch(batch, grpo_config):
  """`batch` laid out by `build_batch(share_prompts=True)`: each distinct prompt once."""
  start = batch["tokens_BxT"].shape[1] - batch["loss_mask_BxC"].shape[1]
  rows = [Trajectory(prompt_ids=t[:start].tolist(), completion_ids=t[start:].tolist(),
                     logprobs=lp.tolist(), reward=0.0, group_id=0, role="policy")
          for t, lp in zip(batch["tokens_BxT"], batch["sampler_logp_BxC"])]
  shared = build_batch(rows, grpo_config, advantages=batch["advantages_B"], min_bucket=1,
                       share_prompts=True)
  if "prompt_tokens_UxP" not in shared:
    raise ValueError("too few rows share a prompt for the shared layout to pay")
  return shared


def layouts():
  """(name, mesh or None) to run ours in: one device, and on CPU the batch over all of them
  (weights replicated). Accelerators keep the one-device row only."""
  out = [("1 device", None)]
  n = jax.device_count()
  if n > 1 and jax.devices()[0].platform == "cpu":
    out.append((f"data={n}", parallel.make_mesh({"data": n})))
  return out


def nbytes(tree) -> int:
  return sum(x.nbytes for x in jax.tree.leaves(tree))


def time_ours(config, params, batch, grpo_config, steps, mesh=None, profile="", lora=None):
  """(seconds per step, first step's seconds, pg_loss, state bytes)."""
  if mesh is not None:
    params, batch = parallel.shard_params(params, mesh), parallel.put_batch(batch, mesh)
  state = init_train_state(config, grpo_config, params, lora=lora)
  state_bytes = nbytes((state.params, state.opt_state, state.ref_params, state.base))
  t0 = time.perf_counter()
  state, metrics = train_step(state, batch)
  jax.block_until_ready((state.params, metrics))
  compile_s = time.perf_counter() - t0
  if profile:
    jax.profiler.start_trace(profile)
  t0 = time.perf_counter()
  for _ in range(steps):
    state, metrics = train_step(state, batch)
  jax.block_until_ready((state.params, metrics))
  seconds = (time.perf_counter() - t0) / steps
  if profile:
    jax.profiler.stop_trace()
  return seconds, compile_s, float(metrics["actor/pg_loss"]), state_bytes


def time_torch(model, batch, grpo_config, steps, lora=None):
  """(seconds per step, pg_loss, bytes of the parameters and AdamW's state)."""
  import torch
  if lora is not None:
    import copy

    import peft
    model = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=0.0, bias="none",
        target_modules=[f"{t}_proj" for t in lora.targets])).get_base_model()
  model.train()
  trained = [p for p in model.parameters() if p.requires_grad]
  opt = torch.optim.AdamW(trained, lr=grpo_config.lr, betas=(grpo_config.b1,
                          grpo_config.b2), eps=grpo_config.adam_eps,
                          weight_decay=grpo_config.weight_decay)
  tokens = torch.tensor(batch["tokens_BxT"], dtype=torch.long)
  attention = torch.tensor(batch["attention_mask_BxT"])
  positions = (attention.cumsum(-1) - 1).clamp(min=0)
  mask = torch.tensor(batch["loss_mask_BxC"])
  start = tokens.shape[1] - mask.shape[1]  # first completion column
  adv = torch.tensor(batch["advantages_B"])[:, None]

  def step():
    # Like ours, only the completion's logits: hidden states, then the LM head on that window.
    hidden = model.model(input_ids=tokens, attention_mask=attention,
                         position_ids=positions).last_hidden_state
    logits = model.lm_head(hidden[:, start - 1:-1])
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    logp = logp_all.gather(-1, tokens[:, start:, None]).squeeze(-1)
    # One update per batch: the ratio is against the policy itself, as in ours and in TRL
    # (num_iterations=1: old = per_token_logps.detach()), not against the sampler.
    ratio = torch.exp(torch.clamp(logp - logp.detach(), -20.0, 20.0))
    losses = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - grpo_config.clip_low,
                                                            1 + grpo_config.clip_high))
    loss = (losses * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trained, grpo_config.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()

  step()  # warm-up: allocator and optimizer state
  state_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
      t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
      if torch.is_tensor(t))
  t0 = time.perf_counter()
  for _ in range(steps):
    loss = step()
  return (time.perf_counter() - t0) / steps, loss, state_bytes


def peak_tflops() -> float | None:
  device = jax.devices()[0]
  if device.platform != "gpu":
    return None
  return next((v for k, v in BF16_PEAK_TFLOPS.items() if k in device.device_kind), None)


def main():
  args = FLAGS
  print(f"jax {jax.__version__} on {jax.device_count()} x {jax.devices()[0].device_kind}; "
        f"load: {os.getloadavg()}")
  grpo_config = GRPOConfig(lr=1e-6, micro_batch_size=args.micro_batch, remat=args.remat,
                           param_dtype=args.param_dtype, compute_dtype=args.dtype)
  lora = (lora_lib.LoraConfig(rank=args.lora_rank, alpha=2.0 * args.lora_rank,
                              targets=tuple(args.lora_targets.split(",")))
          if args.lora_rank else None)
  header = (f"{'model':<14}{'T':>6}{'B':>4} {'layout':<10}{'ours tok/s':>11} "
            f"{'torch tok/s':>12} {'ratio':>7}")
  print(header + f" {'compile s':>10} {'pg_loss ours/torch':>20} {'state MiB ours/torch':>21}")
  for name in args.models.split(","):
    config, params, model = make_models(name, args.dtype, not args.no_torch)
    n_params = config.num_params()
    for seq_len in (int(t) for t in args.seq_lens.split(",")):
      batch = make_batch(config, params, args.batch, seq_len, args.rows_per_prompt,
                         args.completion_len)
      tokens = args.batch * seq_len
      runs = [(layout, mesh, batch, None) for layout, mesh in layouts()]
      if args.rows_per_prompt > 1:
        runs.append(("shared", None, shared_prompt_batch(batch, grpo_config), None))
      if lora is not None:
        runs.append((f"lora r{lora.rank}", None, batch, lora))
        if args.rows_per_prompt > 1:
          runs.append(("lora shared", None, shared_prompt_batch(batch, grpo_config), lora))
      torch_runs = {}  # Full weights, and LoRA: the torch step each of our rows compares with.
      for layout, mesh, batch, row_lora in runs:
        if model is not None and row_lora not in torch_runs:
          torch_runs[row_lora] = time_torch(model, batch, grpo_config, args.steps, row_lora)
        torch_s, torch_loss, torch_bytes = torch_runs.get(row_lora, (None, None, None))
        profile = os.path.join(args.profile, f"{name}_T{seq_len}_{layout.replace(' ', '')}")
        ours_s, compile_s, ours_loss, ours_bytes = time_ours(
            config, params, batch, grpo_config, args.steps, mesh,
            profile if args.profile else "", row_lora)
        line = f"{name:<14}{seq_len:>6}{args.batch:>4} {layout:<10}{tokens / ours_s:>11.0f}"
        mib = lambda b: f"{b / 2**20:.0f}" if b is not None else "-"
        if torch_s is not None:
          line += f" {tokens / torch_s:>12.0f} {torch_s / ours_s:>7.2f}"
          line += f" {compile_s:>10.1f} {ours_loss:>9.4f}/{torch_loss:.4f}"
        else:
          line += f" {'-':>12} {'-':>7} {compile_s:>10.1f} {'-':>20}"
        line += f" {mib(ours_bytes) + '/' + mib(torch_bytes):>21}"
        peak = peak_tflops()
        if peak:
          mfu = 6 * n_params * tokens / ours_s / (peak * 1e12)
          line += f"  MFU {100 * mfu:.1f}% (6 x {n_params / 1e6:.0f}M params, {peak} TFLOP/s)"
        print(line, flush=True)
  print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
  main()
