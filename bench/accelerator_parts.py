"""The parts of bench/accelerator_check.py (its docstring says what each measures): each
`part_<name>(sizes)` returns one dict per table row."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Sizes per part: full (an accelerator) and smoke (the suite, on a CPU).
SIZES = {
    False: dict(parity_models=("qwen3-0.6b", "smollm2-135m"), parity_rows=4, parity_len=256,
                decode_model="qwen3-0.6b", decode_batches=(32, 128, 512),
                decode_prompts=(512, 2048), new_tokens=128, hf_generate_max_batch=128,
                train_models=("qwen3-0.6b", "qwen3-1.7b"), train_rows=32, train_prompt=512,
                train_completion=512, group=8, train_remat=(False, True),
                train_layouts=(False, True), train_lora_rank=16,
                learn_config="configs/rlvr_math.py",
                learn_model="smollm2", learn_sizes=dict(steps=10, prompts_per_step=8,
                                                        group_size=8, max_new_tokens=16)),
    # The tiniest shapes that run every line: compiles are most of a smoke run's time.
    True: dict(parity_models=("smoke",), parity_rows=2, parity_len=8, decode_model="smoke",
               decode_batches=(2,), decode_prompts=(8,), new_tokens=16,
               hf_generate_max_batch=2, train_models=("smoke",), train_rows=4, train_prompt=8,
               train_completion=8, group=2, train_remat=(True,), train_layouts=(True,),
               train_lora_rank=2, learn_config="configs/rlvr_math.py:smoke", learn_model="",
               learn_sizes={}),
}
SMOKE_MODEL = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                   tie_word_embeddings=True, max_position_embeddings=512)


def _model(name: str, dtype):
  """(ModelConfig, params) of a preset, "smoke" (SMOKE_MODEL) or SmolLM2."""
  import jax  # noqa: PLC0415

  from rlsvr.model import assets, hf, qwen3  # noqa: PLC0415
  from rlsvr.model.config import ModelConfig, preset  # noqa: PLC0415

  if name == "smollm2-135m":
    return hf.load_pretrained(assets.smollm2_135m(), dtype=dtype)
  config = (ModelConfig.from_hf_dict({"model_type": "qwen3", **SMOKE_MODEL}) if name == "smoke"
            else preset(name))
  return config, jax.jit(qwen3.init_params, static_argnums=(0, 2))(config, jax.random.key(0),
                                                                    dtype)


def _torch_device() -> str:
  import torch  # noqa: PLC0415

  return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_model(config, params, dtype: str, device: str | None = None):
  """transformers' model of `config` holding `params`, in `dtype`, on `device` (default
  `_torch_device()`)."""
  import numpy as np  # noqa: PLC0415
  import torch  # noqa: PLC0415
  import transformers  # noqa: PLC0415

  from rlsvr.model import hf  # noqa: PLC0415

  model = transformers.AutoModelForCausalLM.from_config(
      transformers.AutoConfig.for_model(**config.to_hf_dict("float32")), dtype=torch.float32)
  state = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in hf.hf_tensors(config, params)}
  missing, _ = model.load_state_dict(state, strict=False)
  assert set(missing) <= {"lm_head.weight"}, missing  # Tied: the head is the embedding.
  return model.to(getattr(torch, dtype)).to(device or _torch_device()).eval()


# --------------------------------------------------------------------------- the parts


def part_parity(s: dict) -> list[dict]:
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415
  import torch  # noqa: PLC0415

  from rlsvr.model import qwen3  # noqa: PLC0415

  rows = []
  for name in s["parity_models"]:
    config, params = _model(name, jnp.float32)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size,
                                               (s["parity_rows"], s["parity_len"]))
    ref_model = _torch_model(config, params, "float64", "cpu")  # The exact answer, nearly.
    with torch.inference_mode():
      ref = ref_model(torch.tensor(tokens)).logits.numpy()
    del ref_model
    for dtype in ("float32", "bfloat16"):
      cast = jax.tree.map(lambda x: x.astype(dtype), params)

      @jax.jit
      def logits(p, t):
        mask = jnp.ones(t.shape, bool)
        hidden, _ = qwen3.forward(config, p, t, qwen3.positions_from_mask(mask), mask)
        return qwen3.unembed(config, p, hidden).astype(jnp.float32)

      ours = np.asarray(logits(cast, jnp.asarray(tokens, jnp.int32)))
      theirs_model = _torch_model(config, params, dtype)
      with torch.inference_mode():
        theirs = theirs_model(torch.tensor(tokens, device=_torch_device())).logits.float()
      theirs = theirs.cpu().numpy()
      ours_err, theirs_err = np.abs(ours - ref).max(), np.abs(theirs - ref).max()
      rows.append({"model": name, "dtype": dtype, "ours_max_err": float(ours_err),
                   "transformers_max_err": float(theirs_err),
                   "ratio": float(ours_err / max(theirs_err, 1e-30)),
                   "reference_device": _torch_device()})
  return rows


def part_decode(s: dict) -> list[dict]:
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from bench.decode_roofline import NOMINAL_GBS, best_seconds, measured_gbs, step_bytes, \
      torch_generate  # noqa: PLC0415
  from rlsvr.sampling import Buckets, Sampler  # noqa: PLC0415

  dtype, new = "float32" if s["decode_model"] == "smoke" else "bfloat16", s["new_tokens"]
  config, params = _model(s["decode_model"], jnp.dtype(dtype))
  device = jax.local_devices()[0]
  limit = (device.memory_stats() or {}).get("bytes_limit")
  nominal = next((gbs for name, gbs in NOMINAL_GBS if name in device.device_kind), None)
  measured = measured_gbs(device)
  sampler = Sampler(config, buckets=Buckets(new_tokens=(new,)))
  rows = []
  for prompt_len in s["decode_prompts"]:
    for batch in s["decode_batches"]:
      weights, kv = step_bytes(config, params, batch, prompt_len, new, jnp.dtype(dtype).itemsize)
      row = {"model": s["decode_model"], "dtype": dtype, "batch": batch, "prompt": prompt_len,
             "new_tokens": new}
      full_kv = kv * (prompt_len + new) / (prompt_len + (new + 1) / 2)
      if limit and weights + full_kv > 0.6 * limit:  # The KV cache alone would not fit.
        rows.append({**row, "skipped": f"KV cache {full_kv / 2**30:.0f} GiB"})
        continue
      prompts = np.random.default_rng(0).integers(1, config.vocab_size,
                                                  (batch, prompt_len)).tolist()
      call = lambda n, p=prompts: sampler(params, p, max_new_tokens=n, temperature=0.0)
      call(new)
      full_s = best_seconds(lambda: call(new), 2)
      step_s = (full_s - best_seconds(lambda: call(1), 2)) / (new - 1)
      row.update(tokens_per_s=batch * new / full_s, decode_step_ms=1e3 * step_s,
                 roofline_measured=(weights + kv) / (measured * 1e9) / step_s,
                 measured_gbs=measured)
      if nominal:
        row["roofline_nominal"] = (weights + kv) / (nominal * 1e9) / step_s
      if batch <= s["hf_generate_max_batch"] and (
          device.platform == "cpu" or _torch_device() == "cuda"):
        theirs = torch_generate(config, params, prompts, new, dtype, 2)
        if theirs is not None:
          row["transformers_tokens_per_s"] = batch * new / theirs[0]
      rows.append(row)
  return rows


def part_train(s: dict) -> list[dict]:
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr.rl.batch import build_batch  # noqa: PLC0415
  from rlsvr.rl.rollout import Trajectory  # noqa: PLC0415
  from rlsvr.model import lora as lora_lib  # noqa: PLC0415
  from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step  # noqa: PLC0415

  device = jax.local_devices()[0]
  peak = next((v for k, v in BF16_PEAK_TFLOPS.items() if k in device.device_kind), None)
  compute = "float32" if device.platform == "cpu" else "bfloat16"
  p_len, c_len, n = s["train_prompt"], s["train_completion"], s["train_rows"]
  rng = np.random.default_rng(0)
  rows = []
  for name in s["train_models"]:
    config, params = _model(name, jnp.float32)
    prompts = rng.integers(1, config.vocab_size, (n // s["group"], p_len))
    played = [Trajectory(prompt_ids=prompts[k // s["group"]].tolist(),
                         completion_ids=rng.integers(1, config.vocab_size, c_len).tolist(),
                         logprobs=[-1.0] * c_len, reward=float(rng.normal()),
                         group_id=k // s["group"], role="policy") for k in range(n)]
    # Full weights at every setting, then LoRA (every projection) with remat on, grouped.
    lora = lora_lib.LoraConfig(rank=s["train_lora_rank"], alpha=2.0 * s["train_lora_rank"],
                               targets=tuple(lora_lib.TARGETS))
    settings = [(remat, share, None) for remat in s["train_remat"]
                for share in s["train_layouts"]] + [(True, True, lora)]
    for remat, share, row_lora in settings:
      grpo = GRPOConfig(lr=1e-6, remat=remat, param_dtype="float32", compute_dtype=compute)
      layout = f"groups of {s['group']}" if share else "whole rows"
      batch = build_batch(played, grpo, share_prompts=share)
      state = init_train_state(config, grpo, params, lora=row_lora)
      t0 = time.perf_counter()
      state, metrics = train_step(state, batch)
      jax.block_until_ready(metrics)
      compile_s = time.perf_counter() - t0
      t0 = time.perf_counter()
      for _ in range(3):
        state, metrics = train_step(state, batch)
      jax.block_until_ready(metrics)
      step_s = (time.perf_counter() - t0) / 3
      tokens = n * (p_len + c_len)  # Whole rows on both layouts: a ratio of times.
      row = {"model": name, "compute": compute, "remat": remat, "layout": layout, "rows": n,
             "T": p_len + c_len, "tokens_per_s": tokens / step_s, "compile_s": compile_s,
             "lora_rank": row_lora.rank if row_lora else 0}
      if peak:  # LoRA: no weight gradients of the base, so 4N FLOPs a token, not 6N.
        flops = (4 if row_lora else 6) * config.num_params() * tokens
        row["mfu"] = flops / step_s / (peak * 1e12)
      rows.append(row)
      del state
  return rows


BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # Dense, spec sheets.


def learn_flags(s: dict, data_path: str, workdir: str) -> list[str]:
  """`python -m rlsvr.train` flags of the learning part: the length task of
  bench/learning_vs_trl.py on configs/rlvr_math.py, set as that script sets its side."""
  flags = [f"--config={REPO}/{s['learn_config']}", f"--workdir={workdir}",
           f"--config.data.source={data_path}", "--config.data.limit=0",
           "--config.reward_fn.prompt_field=prompt", "--config.reward_fn.instruction=",
           "--config.reward_fn.system_prompt=", "--config.reward_fn.answer_prefill=",
           "--config.reward_fn.reward_funcs=bench.learning_rewards:length_reward",
           "--config.reward_fn.reward_weights=1", "--config.grpo.lr=2e-5",
           "--config.grpo.warmup_steps=0", "--config.grpo.kl_coef=0",
           "--config.grpo.loss_type=dapo", "--config.heldout.size=0",
           "--config.mesh.shape.data=1", "--config.mesh.shape.fsdp=1",
           "--config.mesh.shape.tensor=1"]
  if s["learn_model"]:
    flags.append(f"--config.model.source={s['learn_model']}")
  sizes = s["learn_sizes"]
  if "steps" in sizes:
    flags += [f"--config.steps={sizes['steps']}", f"--config.checkpoint.every={sizes['steps']}"]
  flags += [f"--config.reward_fn.{k}={v}" for k, v in sizes.items() if k != "steps"]
  return flags


def part_learn(s: dict) -> list[dict]:
  from bench.learning_vs_trl import LENGTH_PROMPTS  # noqa: PLC0415
  from rlsvr import metrics  # noqa: PLC0415

  folder = tempfile.mkdtemp(prefix="accelerator_learn_")
  data_path = os.path.join(folder, "length.jsonl")
  with open(data_path, "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"prompt": p}) + "\n" for p in LENGTH_PROMPTS)
  workdir = os.path.join(folder, "run")
  out = subprocess.run([sys.executable, "-m", "rlsvr.train", *learn_flags(s, data_path, workdir)],
                       cwd=REPO, capture_output=True, text=True)
  if out.returncode:
    raise RuntimeError(f"rlsvr.train exited {out.returncode}:\n{out.stderr[-3000:]}")
  steps = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  rewards = [r["reward/mean"] for r in steps]
  k = max(1, len(rewards) // 3)
  first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
  timed = steps[1:] or steps  # The first step compiles.
  play = sum(r["perf/play_s"] for r in timed) / len(timed)
  step = sum(r["perf/step_s"] for r in timed) / len(timed)
  return [{"model": s["learn_model"] or s["learn_config"], "steps": len(steps),
           "reward_first": first, "reward_last": last, "rose": last > first, "play_s": play,
           "update_s": step - play, "rewards": rewards, "peak_device_bytes": max(
               (r.get("perf/peak_device_bytes", 0) for r in steps), default=0) or None}]
