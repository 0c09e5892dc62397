r"""The accelerator path in one command: parity, decode, update, learning, and memory.

  bash scripts/setup.sh                       # with RLSVR_ACCELERATOR=cuda12 (or cuda13, tpu)
  .venv/bin/python bench/accelerator_check.py --json /tmp/accelerator.json   # about 8 min, 1 GPU
  .venv/bin/python bench/accelerator_check.py --smoke --json /tmp/a.json      # CPU, tiny shapes

Each part runs in a process of its own (this script with `--part`), so its peak device
memory is its own and a part that fails (out of memory, a compile error) is a row of
the table while the others still run. Nothing is installed or downloaded; SmolLM2 is
used when `scripts/setup.sh` has fetched it. Parts:

  parity  logits of random Qwen3-0.6B-shaped weights and of SmolLM2-135M in float32 and
          bfloat16, ours and transformers' (on the GPU when torch sees one, else on the
          CPU), each against transformers in float32: max error, and ours / theirs.
  decode  sampler tokens/s at batch 32/128/512 x 512/2048-token prompts (greedy, 128 new
          tokens), as a fraction of the memory-bandwidth roofline (weights and filled KV
          slots read once per step), and `transformers.generate` where torch has the GPU.
  train   GRPO update tokens/s and MFU of Qwen3-0.6B and -1.7B shapes, bf16 compute with
          fp32 masters, remat off and on, whole rows and shared-prompt groups of 8; and
          LoRA rank 16 on every projection (remat on, groups; MFU counts 4N FLOPs a token).
  learn   `python -m rlsvr.train`: 10 steps of the length task of bench/learning_vs_trl.py
          on SmolLM2 (its reward must rise), with the step time split into play and update.

Every part's peak device memory (`memory_stats`, where the backend keeps it) is printed
next to the memory planner's estimate for its shapes (`rlsvr.plan`). `--smoke` runs
every part on tiny shapes on any backend; the suite runs it (tests/test_bench_accelerator.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import accelerator_parts as parts  # noqa: E402
from bench.accelerator_parts import SIZES  # noqa: E402

PARTS = ("parity", "decode", "train", "learn")
def planned_bytes(part: str, s: dict, row: dict) -> int | None:
  """The memory planner's per-device bytes for the shapes of one row of a part."""
  from configs.rlvr_math import get_config  # noqa: PLC0415
  from rlsvr import plan  # noqa: PLC0415
  from rlsvr.plan_costs import Estimates, model_config_of, param_bytes  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415

  model = row.get("model", "")
  c = get_config()
  if model == "smoke":
    return None  # Not a model the planner knows by name.
  c.model.source = {"smollm2-135m": "smollm2"}.get(model, f"random:{model}")
  c.mesh.shape = {"data": 1, "fsdp": 1, "tensor": 1}
  c.sampling.max_rows, c.sampling.max_cache_tokens, c.grpo.kl_coef = 0, 0, 0.0
  r = c.reward_fn
  if part == "decode":
    c.model.param_dtype = c.model.compute_dtype = row["dtype"]
    r.prompts_per_step, r.group_size, r.max_new_tokens = row["batch"], 1, row["new_tokens"]
    result = plan.plan(c, 1, estimates=Estimates(prompt_tokens=(("policy", row["prompt"]),)))
    sample = {k: v for k, v in result.phase_bytes().items() if k.startswith("sample")}
    weights = param_bytes(model_config_of(c.model.source), dict(c.mesh.shape),
                          jnp.dtype(row["dtype"]).itemsize)[0]
    return max(sample.values()) + weights  # The bench holds no masters or optimizer state.
  if part == "train":
    c.model.param_dtype, c.model.compute_dtype = "float32", row["compute"]
    c.grpo.remat, c.grpo.micro_batch_size = row["remat"], 0
    c.model.lora.update(rank=row.get("lora_rank", 0), targets="all")
    r.prompts_per_step, r.group_size = s["train_rows"] // s["group"], s["group"]
    r.max_new_tokens = s["train_completion"]
    result = plan.plan(c, 1, estimates=Estimates(prompt_tokens=(("policy", s["train_prompt"]),)))
    train = {k: v for k, v in result.phase_bytes().items() if k.startswith("train")}
    update = result.phase_bytes().get("optimizer update", 0)
    return result.resident_bytes + max(max(train.values()), update)
  return None


def run_part(part: str, smoke: bool) -> dict:
  """One part in this process: {"rows": [...], "peak_device_bytes", "seconds"} or the error."""
  import jax  # noqa: PLC0415

  from rlsvr import runtime  # noqa: PLC0415

  s, start = SIZES[smoke], time.time()
  try:
    rows = getattr(parts, f"part_{part}")(s)
  except Exception as e:  # noqa: BLE001  -- a part's failure is a result of the check
    return {"error": f"{type(e).__name__}: {e}"[:2000],
            "traceback": traceback.format_exc()[-4000:],
            "seconds": time.time() - start}
  for row in rows:
    try:
      row["planned_bytes"] = planned_bytes(part, s, row)
    except Exception as e:  # noqa: BLE001  -- a missing estimate is printed as such
      row["planned_bytes"] = None
      row["plan_error"] = f"{type(e).__name__}: {e}"[:300]
  return {"rows": rows, "peak_device_bytes": runtime.peak_device_bytes(),
          "seconds": time.time() - start,
          "device": f"{jax.device_count()} x {jax.devices()[0].device_kind}"}


def table(results: dict) -> str:
  """One printed table: a line per row of every part."""
  gib = lambda b: "-" if not b else f"{b / 2**30:.2f}"
  lines = [f"{'part':<7} {'what':<44} {'result':<52} {'peak GiB':>9} {'plan GiB':>9}"]
  for part, res in results.items():
    if "error" in res:
      lines.append(f"{part:<7} FAILED after {res['seconds']:.0f} s: {res['error'][:200]}")
      continue
    for row in res["rows"]:
      if part == "parity":
        what = f"{row['model']} {row['dtype']} (ref on {row['reference_device']})"
        got = (f"max err ours {row['ours_max_err']:.2e}, transformers "
               f"{row['transformers_max_err']:.2e} ({row['ratio']:.2f}x)")
      elif part == "decode":
        what = f"{row['model']} {row['dtype']} B={row['batch']} P={row['prompt']}"
        if "skipped" in row:
          got = f"skipped: {row['skipped']}"
        else:
          got = (f"{row['tokens_per_s']:.0f} tok/s, {100 * row['roofline_measured']:.0f}% of "
                 f"measured roofline")
          if "transformers_tokens_per_s" in row:
            got += f", HF {row['transformers_tokens_per_s']:.0f} tok/s"
      elif part == "train":
        what = (f"{row['model']} {row['compute']} remat={row['remat']} {row['layout']} "
                f"B={row['rows']} T={row['T']}"
                + (f" LoRA r{row['lora_rank']}" if row.get("lora_rank") else ""))
        got = f"{row['tokens_per_s']:.0f} tok/s" + (
            f", MFU {100 * row['mfu']:.1f}%" if "mfu" in row else "") + \
            f", compile {row['compile_s']:.0f} s"
      else:
        what = f"{row['model']}, {row['steps']} steps of python -m rlsvr.train"
        got = (f"reward {row['reward_first']:+.3f} -> {row['reward_last']:+.3f} "
               f"({'rose' if row['rose'] else 'DID NOT RISE'}), play {row['play_s']:.1f} s + "
               f"update {row['update_s']:.1f} s")
      peak = row.get("peak_device_bytes", res.get("peak_device_bytes"))
      lines.append(f"{part:<7} {what:<44} {got:<52} {gib(peak):>9} "
                   f"{gib(row.get('planned_bytes')):>9}")
  return "\n".join(lines)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU, the test suite)")
  parser.add_argument("--parts", default=",".join(PARTS))
  parser.add_argument("--json", default=None, help="write every number here")
  parser.add_argument("--in-process", action="store_true",
                      help="run the parts in this process (no per-part memory peaks)")
  parser.add_argument("--part", help=argparse.SUPPRESS)  # A child: run one part, print JSON.
  args = parser.parse_args(argv)
  if args.part:
    print("RESULT " + json.dumps(run_part(args.part, args.smoke)))
    return {}
  parts = [p for p in args.parts.split(",") if p]
  if set(parts) - set(PARTS):
    parser.error(f"--parts: unknown {sorted(set(parts) - set(PARTS))}; known: {PARTS}")
  results = {}
  for part in parts:
    print(f"[accelerator_check] {part} ...", flush=True)
    if args.in_process:
      results[part] = run_part(part, args.smoke)
    else:
      out = subprocess.run([sys.executable, __file__, f"--part={part}",
                            *(["--smoke"] if args.smoke else [])], cwd=REPO, capture_output=True,
                           text=True)
      line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
      results[part] = json.loads(line[7:]) if line else {
          "error": f"the part's process exited {out.returncode}: {out.stderr[-1500:]}",
          "seconds": 0.0}
    print(f"[accelerator_check] {part}: {results[part].get('seconds', 0):.0f} s", flush=True)
  print(table(results))
  problems = failures(results, args.smoke)
  for problem in problems:
    print(f"[accelerator_check] FAILED: {problem}")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({**results, "failures": problems}, f, indent=1)
  return results


def failures(results: dict, smoke: bool) -> list[str]:
  """What makes the check fail: a part that raised, and (not in --smoke, where a random
  model has nothing to learn) a learning run whose reward did not rise."""
  out = [f"{part}: {res['error']}" for part, res in results.items() if "error" in res]
  if not smoke:
    out += [f"learn: reward {r['reward_first']:+.3f} -> {r['reward_last']:+.3f} did not rise"
            for r in results.get("learn", {}).get("rows", []) if not r["rose"]]
  return out


if __name__ == "__main__":
  _args = sys.argv[1:]
  _results = main(_args)
  sys.exit(1 if _results and failures(_results, "--smoke" in _args) else 0)
