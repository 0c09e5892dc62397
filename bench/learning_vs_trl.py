r"""Learning side by side: our trainer (`rlsvr.train.train`, env `reward_fn`) vs TRL's `GRPOTrainer`.

From a fresh clone (the TRL venv as in ../shared/TOOLCHAIN.md, "Peers for side-by-side runs"):

  bash scripts/setup.sh                      # .venv + the SmolLM2 asset
  python3 -m venv /tmp/peers
  /tmp/peers/bin/pip install torch==2.13.0
  /tmp/peers/bin/pip install trl==1.16.0 transformers==5.24.0
  /tmp/peers/bin/pip install math-verify==0.9.0   # --task math only (its accuracy reward)
  .venv/bin/python bench/learning_vs_trl.py --task length --seeds 0 --steps 15   # ~30 min
  .venv/bin/python bench/learning_vs_trl.py --task math --seeds 0,1 --steps 15
  # --reuse keeps the seeds already finished in --out with the same settings, so
  # `--seeds 0` now and `--seeds 0,1 --reuse` later runs seed 1 only; a seed whose only
  # change is on our side (--pack-tokens) reruns ours and keeps TRL's run.
  .venv/bin/python bench/learning_vs_trl.py --task length --steps 2 --prompts-per-step 2 \
      --group-size 4 --max-new-tokens 8 --out /tmp/lvt     # a ~3-minute end-to-end check
  # Our side with rows padded instead of packed (grpo.pack_tokens=0):
  .venv/bin/python bench/learning_vs_trl.py --task length --seeds 0,1 --pack-tokens 0
  # LoRA on both sides (TRL with a peft LoraConfig: pip install peft==0.21.2 there too):
  .venv/bin/python bench/learning_vs_trl.py --task length --lora-rank 16 --lr 2e-4

Both sides: SmolLM2-135M-Instruct in float32 on the CPU, the same prompts in the same
order, the same reward function objects (bench/learning_rewards.py), P prompts x G
completions per step sampled fresh at temperature 1 (no top-p/top-k) from the current
weights, one AdamW update per batch at a constant lr (betas 0.9/0.999, eps 1e-8, weight
decay --weight-decay), global-norm clip, PPO clip eps, no KL, token-level loss (TRL
loss_type="dapo" = ours grpo.loss_type="dapo"), group-std advantages. Each side runs in
its own process, one after the other: ours with this venv's python (JAX_PLATFORMS=cpu,
HF_HUB_OFFLINE=1), TRL with --trl-python running bench/trl_side.py. Both run with malloc on
huge pages, as `rlsvr.train` does (`rlsvr.runtime.huge_pages_env`; RLSVR_HUGE_PAGES=0: neither).

Prompt order: our `reward_fn` env draws rows from a seeded, reshuffled-every-pass stream
(`rlsvr.envs.items.ItemStream`, seed `derive(seed, "items")`) and has no key to turn that
off, so this script replays that stream and hands TRL the rows in the drawn order with
`shuffle_dataset=False`. `checks.prompts_match` compares the prompts both sides logged.

Tasks: `length`: chat prompts (one user turn) and `length_reward`, -|20 - chars| / 20.
`math`: GSM8K (shared data folder) with configs/rlvr_math.py's instruction and reward
(rlsvr.rewards.math accuracy + 0.1 format). TRL cannot prefill a reply (a chat prompt
always ends with the generation prompt), so on both sides the prompt is plain text: the
chat template applied to the question, then the prefill "The final answer is $\boxed{";
the reward functions prepend the prefill to the completion before scoring.

With --lora-rank R both sides train adapters of rank R (alpha --lora-alpha, on
--lora-targets, dropout --lora-dropout, no bias) on the frozen model: ours `model.lora.*`,
TRL's `peft_config`. Their A matrices are drawn from different RNGs (the same distribution).

Differences left: the samples themselves (different RNGs, JAX vs torch kernels); TRL's
advantage is (r - mean) / (std + 1e-4), ours / (std + 1e-6); TRL excludes biases and
norms from weight decay, ours decays every weight (no decay by default: --weight-decay 0).
TRL 1.16 has no max_prompt_length: neither side truncates prompts. Step 1 includes our XLA
compilation (and TRL's warm-up); the timing means skip step 1 (`first_step_s` has it).

Outputs in --out: learning_vs_trl.json (all numbers), learning_vs_trl.png, and per seed
ours/ (metrics.jsonl, rollouts; checkpoints deleted), trl.json, *.log.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.learning_rewards import MATH_PREFILL, TASKS  # noqa: E402
from rlsvr import runtime  # noqa: E402

LENGTH_PROMPTS = [
    "What is the capital of France?", "Name a primary color.", "What is 2 + 3?",
    "Say hello.", "What animal says moo?", "Name a fruit that is yellow.",
    "What is the opposite of hot?", "How many legs does a spider have?",
    "What color is the sky on a clear day?", "Name a planet in our solar system.",
    "What is the largest ocean on Earth?", "Give me a synonym for happy.",
    "What do bees make?", "What is frozen water called?", "Name a day of the week.",
    "Who wrote Romeo and Juliet?", "What is the boiling point of water in Celsius?",
    "Name a musical instrument.", "What gas do plants take in?", "Translate 'thank you' "
    "into Spanish.", "What is the square root of 16?", "Name a month with 31 days.",
    "What is the chemical symbol for gold?", "Describe the moon in one word.",
    "What shape has three sides?", "Name a big cat.", "What is the main language of Brazil?",
    "Which season comes after winter?", "What do you call a baby dog?",
    "Name something you can read.", "What is 10 minus 4?", "Suggest a name for a cat.",
]


# ------------------------------------------------------------ pure helpers (tested)

def mean_se(values: Sequence[float]) -> tuple[float, float]:
  """Mean and standard error (sample std / sqrt(n)); SE is NaN below two values."""
  xs = [float(v) for v in values]
  if not xs:
    return math.nan, math.nan
  m = sum(xs) / len(xs)
  if len(xs) < 2:
    return m, math.nan
  return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def curve_stats(curves: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
  """Per step: mean over seeds and SE over seeds (0 with one seed: nothing to shade)."""
  n = min(len(c) for c in curves)
  stats = [mean_se([c[t] for c in curves]) for t in range(n)]
  return [m for m, _ in stats], [0.0 if math.isnan(s) else s for _, s in stats]


def last_k(curves: Sequence[Sequence[float]], k: int) -> dict[str, float]:
  """Mean and SE of the last k steps of every seed, pooled (k x seeds values; steps of one
  run are correlated, so this SE is optimistic)."""
  values = [v for c in curves for v in c[-k:]]
  m, se = mean_se(values)
  return {"mean": m, "se": se, "n": len(values), "k": k}


def ours_steps(records: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
  """Per-step records of our metrics.jsonl: reward/mean, perf/play_s (sampling + rewards),
  perf/step_s (play + batch + train_step); update = step - play."""
  out = []
  for r in sorted(records, key=lambda r: r["step"]):
    step_s, play_s = float(r["perf/step_s"]), float(r["perf/play_s"])
    out.append(dict(step=int(r["step"]), reward=float(r["reward/mean"]), sample_s=play_s,
                    update_s=step_s - play_s, step_s=step_s))
  return out


def trl_steps(records: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
  """Per-step records written by bench/trl_side.py, in the same form as `ours_steps`."""
  out = []
  for r in sorted(records, key=lambda r: r["step"]):
    step_s, sample_s = float(r["step_s"]), float(r["sample_s"])
    out.append(dict(step=int(r["step"]), reward=float(r["reward"]), sample_s=sample_s,
                    update_s=step_s - sample_s, step_s=step_s))
  return out


def same_prompts(ours: Sequence[Any], trl: Sequence[Any]) -> bool:
  """Whether both sides' prompts of a step are the same texts: our rollout records hold a
  chat prompt's user text, TRL's the messages."""
  text = lambda p: p if isinstance(p, str) else p[-1]["content"]
  return [text(p) for p in ours] == [text(p) for p in trl]


def timing(runs: Sequence[Sequence[dict[str, float]]], skip_first: bool = True) -> dict:
  """Mean sample/update/step seconds over steps (all seeds), step 1 left out when asked and
  there are later steps; plus the mean first step."""
  pooled = [s for run in runs for s in run if not (skip_first and s["step"] == 1 and len(run) > 1)]
  out = {k: mean_se([s[k] for s in pooled])[0] for k in ("sample_s", "update_s", "step_s")}
  out["first_step_s"] = mean_se([run[0]["step_s"] for run in runs if run])[0]
  out["steps_counted"] = len(pooled)
  return out


# ------------------------------------------------------------ data

def task_rows(task: str, model_dir: str, limit: int) -> tuple[list[dict], bool]:
  """(rows with a `prompt` column and the reward columns, whether prompts are chat)."""
  if task == "length":
    return [{"prompt": p} for p in LENGTH_PROMPTS[:limit or None]], True
  from rlsvr.data import math_datasets  # noqa: PLC0415
  from rlsvr.eval import math_suites  # noqa: PLC0415
  from rlsvr.model.tokenizer import load_tokenizer  # noqa: PLC0415

  tok = load_tokenizer(model_dir)
  rows = []
  for item in math_datasets.load("gsm8k", "", limit=limit or 64, seed=0):
    text = tok.apply_chat_template([{"role": "user", "content": math_suites.prompt(item)}],
                                   tokenize=False, add_generation_prompt=True)
    rows.append({"prompt": text + MATH_PREFILL, "answer": item.answer})
  return rows, False


def draw_order(rows: Sequence[dict], per_step: int, steps: int, seed: int) -> list[dict]:
  """The rows our reward_fn experiment draws in `steps` steps (its ItemStream, replayed)."""
  from rlsvr import seeding  # noqa: PLC0415
  from rlsvr.envs.items import ItemStream  # noqa: PLC0415

  stream = ItemStream(list(rows), per_step, seeding.derive(seed, "items"))
  return [row for _ in range(steps) for row in stream.next_step()]


# ------------------------------------------------------------ the two sides

def ours_worker(spec_path: str) -> None:
  """Our side, in its own process: configs/rlvr_math.py:cpu with every difference set."""
  with open(spec_path, encoding="utf-8") as f:
    s = json.load(f)
  from configs.rlvr_math import get_config  # noqa: PLC0415
  from rlsvr import train  # noqa: PLC0415
  from rlsvr.envs.reward_fn import data  # noqa: PLC0415
  from rlsvr.envs.reward_fn.config import RewardFnConfig  # noqa: PLC0415
  from rlsvr.model.tokenizer import load_tokenizer  # noqa: PLC0415

  c = get_config("cpu")
  c.model.source, c.model.param_dtype, c.model.compute_dtype = s["model_dir"], "float32", "float32"
  c.seed, c.steps = s["seed"], s["steps"]
  c.data.source, c.data.limit = s["data"], 0
  r = c.reward_fn
  r.prompt_field, r.instruction, r.system_prompt, r.answer_prefill = "prompt", "", "", ""
  r.use_chat_template = s["chat"]
  r.reward_funcs, r.reward_weights = ",".join(s["reward_funcs"]), ",".join(
      str(w) for w in s["reward_weights"])
  r.prompts_per_step, r.group_size, r.max_new_tokens = (s["prompts_per_step"], s["group_size"],
                                                        s["max_new_tokens"])
  c.sampling.temperature, c.sampling.top_p, c.sampling.top_k = s["temperature"], 1.0, 0
  g = c.grpo
  g.lr, g.warmup_steps, g.weight_decay, g.max_grad_norm = (s["lr"], 0, s["weight_decay"],
                                                          s["max_grad_norm"])
  g.b1, g.b2, g.adam_eps = 0.9, 0.999, 1e-8
  g.clip_low = g.clip_high = s["clip_eps"]
  g.kl_coef, g.entropy_coef, g.loss_type, g.advantage, g.norm_adv_by_std = (0.0, 0.0, "dapo",
                                                                            "grpo", True)
  g.updates_per_batch, g.rollout_is, g.filter_groups, g.overlong_buffer = 1, "none", False, 0
  g.micro_batch_size, g.remat = 0, False  # One pass over the whole batch, as TRL's.
  g.pack_tokens = s["pack_tokens"]
  if s.get("lora"):
    c.model.lora.update(rank=s["lora"]["rank"], alpha=s["lora"]["alpha"],
                        targets=",".join(s["lora"]["targets"]), dropout=s["lora"]["dropout"])
  c.checkpoint.every, c.log.tensorboard = s["steps"], False
  runtime.set_host_devices()  # As `rlsvr.train.main` does.
  t0 = time.time()
  train.train(c, s["workdir"])
  t1 = time.time()
  prompts = data.Prompts(RewardFnConfig.from_config(c), load_tokenizer(s["model_dir"]))
  with open(s["data_order"], encoding="utf-8") as f:
    first = json.load(f)[0]
  with open(s["out"], "w", encoding="utf-8") as f:
    json.dump({"prompt_ids_0": prompts.encode(prompts.prompt(first)), "run_s": t1 - t0}, f)


def ours_rollouts(workdir: str, step: int) -> tuple[list, float]:
  """(the prompts of a step's groups, its mean completion tokens) from our rollout records."""
  with open(os.path.join(workdir, "rollouts", f"step_{step:08d}.jsonl"), encoding="utf-8") as f:
    groups = [json.loads(line) for line in f]
  toks = [a["num_tokens"] for g in groups for a in g["completions"]]
  return [g["prompt"] for g in groups], sum(toks) / len(toks)


def run(cmd: list[str], env: dict[str, str], log_path: str) -> dict[str, float]:
  """Runs one side; its wall time, CPU seconds (user + sys of the process tree: less
  sensitive than wall time to other jobs on the machine) and the load averages around it."""
  t0, r0, load0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN), os.getloadavg()[0]
  with open(log_path, "w", encoding="utf-8") as log:
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                          check=False)
  if proc.returncode:
    with open(log_path, encoding="utf-8") as f:
      tail = f.read()[-3000:]
    raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}); log {log_path}:\n{tail}")
  r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  return {"wall_s": time.time() - t0, "load_before": load0, "load_after": os.getloadavg()[0],
          "cpu_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}


RESULT = "result.json"


def stored_result(seed_dir: str, specs: dict[str, dict]) -> tuple[dict | None, set[str]]:
  """(a seed's stored result, the sides it ran with exactly these specs): seeds and
  sides accumulate over invocations (--reuse) without mixing settings."""
  try:
    with open(os.path.join(seed_dir, RESULT), encoding="utf-8") as f:
      result = json.load(f)
  except (OSError, ValueError):
    return None, set()
  same = set()
  for side, spec in specs.items():
    try:
      with open(os.path.join(seed_dir, f"{side}_spec.json"), encoding="utf-8") as f:
        if json.load(f) == json.loads(json.dumps(spec)):
          same.add(side)
    except (OSError, ValueError):
      pass
  return result, same


def pack_tokens(args) -> int:
  """Our side's grpo.pack_tokens: --pack-tokens, else configs/rlvr_math.py:cpu's."""
  if args.pack_tokens is not None:
    return args.pack_tokens
  from configs.rlvr_math import get_config  # noqa: PLC0415

  return get_config("cpu").grpo.pack_tokens


def run_seed(args, seed: int, rows: list[dict], chat: bool, model_dir: str) -> dict:
  d = os.path.join(args.out, f"seed{seed}")
  os.makedirs(d, exist_ok=True)
  funcs, weights = TASKS[args.task]
  order = draw_order(rows, args.prompts_per_step, args.steps, seed)
  paths = {k: os.path.join(d, n) for k, n in (("data", "rows.jsonl"), ("order", "order.json"),
                                              ("ours", "ours.json"), ("trl", "trl.json"))}
  with open(paths["data"], "w", encoding="utf-8") as f:
    f.writelines(json.dumps(row) + "\n" for row in rows)
  with open(paths["order"], "w", encoding="utf-8") as f:
    json.dump([{**row, "prompt": [{"role": "user", "content": row["prompt"]}]} if chat else row
               for row in order], f)
  common = dict(model_dir=model_dir, seed=seed, steps=args.steps, chat=chat,
                prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                max_new_tokens=args.max_new_tokens, temperature=1.0, lr=args.lr,
                weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm,
                clip_eps=args.clip_eps, reward_funcs=funcs, reward_weights=weights,
                lora=dict(rank=args.lora_rank, alpha=args.lora_alpha,
                          targets=args.lora_targets.split(","), dropout=args.lora_dropout)
                if args.lora_rank else None)
  workdir = os.path.join(d, "ours")
  shutil.rmtree(workdir, ignore_errors=True)  # A fresh run, never a resume.
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
         "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
  # Both sides run with the malloc settings that `rlsvr.train` gives itself.
  env = runtime.huge_pages_env(env) or env
  specs = {"ours": dict(common, data=paths["data"], data_order=paths["order"], workdir=workdir,
                        out=paths["ours"], pack_tokens=pack_tokens(args)),
           "trl": dict(common, data=paths["order"], out=paths["trl"])}
  stored, same = stored_result(d, specs) if args.reuse else (None, set())
  if same == set(specs):
    print(f"seed {seed}: reusing {os.path.join(d, RESULT)}", flush=True)
    return stored
  for side in specs:
    with open(os.path.join(d, f"{side}_spec.json"), "w", encoding="utf-8") as f:
      json.dump(specs[side], f, indent=1)
  print(f"seed {seed}: our trainer ...", flush=True)
  ours_proc = run([args.ours_python, os.path.abspath(__file__), "--ours-worker",
                   os.path.join(d, "ours_spec.json")], env, os.path.join(d, "ours.log"))
  shutil.rmtree(os.path.join(workdir, "checkpoints"), ignore_errors=True)
  if "trl" in same:  # Only our side's settings changed (e.g. --pack-tokens): TRL's run stands.
    print(f"seed {seed}: reusing TRL's run in {paths['trl']}", flush=True)
    trl_proc = stored["process"]["trl"]
  else:
    print(f"seed {seed}: TRL ...", flush=True)
    trl_proc = run([args.trl_python, os.path.join(ROOT, "bench", "trl_side.py"),
                    os.path.join(d, "trl_spec.json")], env, os.path.join(d, "trl.log"))
  from rlsvr import metrics  # noqa: PLC0415

  ours = ours_steps(metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl")))
  with open(paths["trl"], encoding="utf-8") as f:
    trl_out = json.load(f)
  with open(paths["ours"], encoding="utf-8") as f:
    ours_out = json.load(f)
  trl, raw_trl = trl_steps(trl_out["steps"]), {r["step"]: r for r in trl_out["steps"]}
  prompts_match = []
  for o, t in zip(ours, trl):
    prompts, o["completion_tokens"] = ours_rollouts(workdir, o["step"])
    t["completion_tokens"] = raw_trl[t["step"]]["completion_tokens"]
    prompts_match.append(same_prompts(prompts, raw_trl[t["step"]]["prompts"]))
  checks = {"prompts_match": prompts_match,
            "prompt_ids_match": ours_out["prompt_ids_0"] == raw_trl[1]["prompt_ids_0"],
            "trl_generation_config": trl_out["generation_config"]}
  result = {"seed": seed, "ours": ours, "trl": trl, "checks": checks,
            "process": {"ours": {**ours_proc, "train_s": ours_out["run_s"]},
                        "trl": {**trl_proc, "train_s": trl_out["train_s"]}},
            "versions": trl_out["versions"]}
  with open(os.path.join(d, RESULT), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
  return result


# ------------------------------------------------------------ report

def plot(path: str, runs: list[dict], title: str) -> None:
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
  for side, color, label in (("ours", "C0", "rlsvr (JAX)"), ("trl", "C1", "TRL GRPOTrainer")):
    mean, se = curve_stats([[s["reward"] for s in r[side]] for r in runs])
    x = list(range(1, len(mean) + 1))
    ax.plot(x, mean, color=color, label=label)
    ax.fill_between(x, [m - e for m, e in zip(mean, se)], [m + e for m, e in zip(mean, se)],
                    color=color, alpha=0.25)
    for key, style in (("step_s", "-"), ("sample_s", "--")):
      bx.plot(x, curve_stats([[s[key] for s in r[side]] for r in runs])[0], style, color=color,
              label=f"{label} {'step' if key == 'step_s' else 'sampling'}")
  ax.set(xlabel="step", ylabel="mean reward", title=title)
  bx.set(xlabel="step", ylabel="seconds", title="wall time per step")
  ax.legend()
  bx.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--ours-worker", help=argparse.SUPPRESS)
  p.add_argument("--task", choices=sorted(TASKS), default="length")
  p.add_argument("--seeds", default="0")
  p.add_argument("--steps", type=int, default=15)
  p.add_argument("--prompts-per-step", type=int, default=4)
  p.add_argument("--group-size", type=int, default=4)
  p.add_argument("--max-new-tokens", type=int, default=16)
  p.add_argument("--lr", type=float, default=2e-5)
  p.add_argument("--weight-decay", type=float, default=0.0)
  p.add_argument("--max-grad-norm", type=float, default=1.0)
  p.add_argument("--clip-eps", type=float, default=0.2)
  p.add_argument("--lora-rank", type=int, default=0, help="0: full weights on both sides")
  p.add_argument("--lora-alpha", type=float, default=32.0)
  p.add_argument("--lora-targets", default="q,k,v,o,gate,up,down")
  p.add_argument("--lora-dropout", type=float, default=0.0)
  p.add_argument("--pack-tokens", type=int, default=None,
                 help="ours: grpo.pack_tokens (0: padded rows; default: the config's)")
  p.add_argument("--last-k", type=int, default=5)
  p.add_argument("--data-limit", type=int, default=0, help="prompts kept (0: all / 64 GSM8K)")
  p.add_argument("--out", default="runs/learning_vs_trl")
  p.add_argument("--trl-python", default="/tmp/peers/bin/python")
  p.add_argument("--ours-python", default=sys.executable)
  p.add_argument("--reuse", action="store_true",
                 help="keep a seed already finished in --out with the same settings")
  args = p.parse_args()
  if args.ours_worker:
    return ours_worker(args.ours_worker)
  from rlsvr.model import assets  # noqa: PLC0415

  args.out = os.path.abspath(args.out)
  model_dir = str(assets.smollm2_135m())
  rows, chat = task_rows(args.task, model_dir, args.data_limit)
  runs = [run_seed(args, int(s), rows, chat, model_dir) for s in args.seeds.split(",")]
  k = min(args.last_k, args.steps)
  summary = {side: {"last_k_reward": last_k([[s["reward"] for s in r[side]] for r in runs], k),
                    "first_step_reward": mean_se([r[side][0]["reward"] for r in runs])[0],
                    "timing": timing([r[side] for r in runs])} for side in ("ours", "trl")}
  summary["ratio_ours_over_trl"] = {key: summary["ours"]["timing"][key] / summary["trl"]["timing"][key]
                                    for key in ("step_s", "sample_s", "update_s")}
  result = {"args": vars(args), "model_dir": model_dir, "summary": summary, "runs": runs}
  with open(os.path.join(args.out, "learning_vs_trl.json"), "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
  plot(os.path.join(args.out, "learning_vs_trl.png"), runs,
       f"{args.task}: {args.prompts_per_step}x{args.group_size}, {args.max_new_tokens} tokens, "
       f"lr {args.lr:g}, seeds {args.seeds}"
       + (f", LoRA r{args.lora_rank}" if args.lora_rank else ""))
  print(f"{'step':>4} | {'ours reward':>11} {'tokens':>6} {'sample':>6} {'update':>6} | "
        f"{'TRL reward':>10} {'tokens':>6} {'sample':>6} {'update':>6}")
  o_mean = curve_stats([[s["reward"] for s in r["ours"]] for r in runs])[0]
  t_mean = curve_stats([[s["reward"] for s in r["trl"]] for r in runs])[0]
  for t in range(min(len(o_mean), len(t_mean))):
    cols = [[mean_se([r[side][t][k] for r in runs])[0]
             for k in ("completion_tokens", "sample_s", "update_s")] for side in ("ours", "trl")]
    print(f"{t + 1:>4} | {o_mean[t]:>11.3f} " + " ".join(f"{v:>6.1f}" for v in cols[0]) +
          f" | {t_mean[t]:>10.3f} " + " ".join(f"{v:>6.1f}" for v in cols[1]))
  for side in ("ours", "trl"):
    s, tm = summary[side]["last_k_reward"], summary[side]["timing"]
    print(f"{side}: last {k} steps {s['mean']:.3f} +- {s['se']:.3f} (n={s['n']}); "
          f"s/step {tm['step_s']:.1f} (sampling {tm['sample_s']:.1f}, update {tm['update_s']:.1f}; "
          f"first step {tm['first_step_s']:.1f})")
  ratio = summary["ratio_ours_over_trl"]
  print(f"ours/TRL time: step {ratio['step_s']:.2f}, sampling {ratio['sample_s']:.2f}, "
        f"update {ratio['update_s']:.2f}")
  for r in runs:
    print(f"seed {r['seed']}: prompts match per step {r['checks']['prompts_match']}, "
          f"prompt ids match {r['checks']['prompt_ids_match']}; " + ", ".join(
              f"{side} process {q['wall_s']:.0f} s wall, {q['cpu_s']:.0f} CPU-s, load "
              f"{q['load_before']:.1f}->{q['load_after']:.1f}" for side, q in r["process"].items()))
  print(f"wrote {os.path.join(args.out, 'learning_vs_trl.json')} and learning_vs_trl.png")


if __name__ == "__main__":
  main()
