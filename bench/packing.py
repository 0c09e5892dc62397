"""Padded against packed update batches on rows a real run plays: tokens computed, update time.

  python bench/packing.py                    # GSM8K (rlvr_math.py:cpu) and the spy clue step
  python bench/packing.py --config configs/rlvr_math.py:cpu --set data.source=gsm8k \
      --set reward_fn.prompts_per_step=8 --set reward_fn.num_generations=8
  python bench/packing.py --config configs/rlvr_math.py:smoke --pack-tokens 128 --steps 1
                                             # seconds (tests)
  python bench/packing.py --config configs/spy_summ.py:cpu,detectors --set spy.joint=True \
      --layouts "packed 1024 + shared" --pack-tokens 1024   # votes and clues in one batch

For each config (default: `configs/rlvr_math.py:cpu` on the shared GSM8K test split,
and `configs/spy_summ.py:cpu`'s clue step 2 and decision step 1), plays `--step`
from the initial weights as `rlsvr.train` does (its model, sampler, seeds and game)
and lays the trained rows
out each way the update reads them: whole rows padded to the length buckets, shared
prompts (each group's prompt once), packed into buffers of each `--pack-tokens`, and
packed with shared prompts. Each layout's `train_step` starts from the same state;
the time is the median of `--steps` steps after the first (which compiles, timed
apart). "slots/token" is the token positions the forward computes per token the rows
hold (every row's prompt and completion): above 1 is padding, below 1 prompts run
once for several rows; "unembedded" the positions the vocabulary-wide unembedding
computes ("x first": the time against the first layout measured, whole rows unless
`--layouts` names others). The update is the same in every layout
(tests/rl/test_packing.py): the printed pg_loss agrees. `--json` writes the rows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (config, its overrides, the step played): the spy game trains the decision phase at odd
# steps and the clue phase at even ones (`spy.mechanics.phase_at`).
DEFAULT_CASES = (("configs/rlvr_math.py:cpu", ("data.source=gsm8k",), 1),
                 ("configs/spy_summ.py:cpu", (), 2),
                 ("configs/spy_summ.py:cpu", (), 1))


def layouts(pack_tokens: list[int], only: str = "") -> list[tuple[str, bool, int]]:
  """(name, share_prompts, pack_tokens) of every layout measured: all, or those `only`
  names (comma-separated)."""
  out = [("whole rows", False, 0), ("shared prompts", True, 0)]
  for n in pack_tokens:
    out += [(f"packed {n}", False, n), (f"packed {n} + shared", True, n)]
  names = [n.strip() for n in only.split(",") if n.strip()]
  unknown = set(names) - {name for name, _, _ in out}
  if unknown:
    raise SystemExit(f"--layouts: no layout {sorted(unknown)}; these are "
                     f"{[name for name, _, _ in out]}")
  return [x for x in out if not names or x[0] in names]


def unembedded(batch) -> int:
  """Positions the update's unembedding (a vocabulary-wide matmul each) computes."""
  if "score_token_S" in batch:
    return batch["score_token_S"].size
  b, c = batch["loss_mask_BxC"].shape
  return b * (c + 1)  # Each row's window: its prompt's last position and C columns.


def play_step(c, step: int):
  """(model config, train state, played rows, pad id, GRPO config) of `c`'s step `step`,
  played from the initial weights."""
  from rlsvr import parallel, runtime  # noqa: PLC0415
  from rlsvr.envs import registry  # noqa: PLC0415
  from rlsvr.model.tokenizer import stop_ids  # noqa: PLC0415
  from rlsvr.rl import filtering  # noqa: PLC0415
  from rlsvr.rl.train_step import sampling_params  # noqa: PLC0415
  from rlsvr.sampling import Sampler  # noqa: PLC0415
  from rlsvr.train import check_config, grpo_config  # noqa: PLC0415
  from rlsvr.train_loop import _build, sampler_closure  # noqa: PLC0415

  check_config(c)
  runtime.enable_compilation_cache()
  grpo = grpo_config(c)
  mesh = parallel.make_mesh(dict(c.mesh.shape))
  model_config, state, experiment, tokenizer = _build(c, grpo, registry.get(c.env), mesh)
  sampler = Sampler(model_config, eos_ids=stop_ids(model_config, tokenizer), tokenizer=tokenizer,
                    max_rows=c.sampling.max_rows, max_cache_tokens=c.sampling.max_cache_tokens)
  policy_params = sampling_params(state)
  sample = sampler_closure(sampler, policy_params, c.seed, "policy", step)
  played = filtering.play_step(lambda r: experiment.play_round(step, sample, policy_params, r),
                               filter_groups=grpo.filter_groups,
                               max_rounds=grpo.max_num_gen_batches)
  finish_step = getattr(experiment, "finish_step", None)
  if finish_step is not None:
    finish_step(played.rows)
  sampler.release_weights()
  return model_config, state, played.rows, tokenizer.pad_token_id or 0, grpo


def measure(name: str, c, step: int, pack_tokens: list[int], steps: int,
            only: str = "") -> list[dict]:
  import dataclasses  # noqa: PLC0415

  import jax  # noqa: PLC0415
  import numpy as np  # noqa: PLC0415

  from rlsvr.rl import batch as batching  # noqa: PLC0415
  from rlsvr.rl.train_step import init_train_state, train_step  # noqa: PLC0415

  t0 = time.time()
  model_config, state, rows, pad_id, grpo = play_step(c, step)
  trained = [t for t in rows if t.trained]
  row_tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in trained)
  print(f"{name}: {len(trained)} trained rows, {row_tokens} tokens "
        f"(prompts {min(len(t.prompt_ids) for t in trained)}-"
        f"{max(len(t.prompt_ids) for t in trained)}, completions "
        f"{min(len(t.completion_ids) for t in trained)}-"
        f"{max(len(t.completion_ids) for t in trained)}), played in {time.time() - t0:.0f} s",
        flush=True)
  params = jax.tree.map(np.asarray, state.params)  # Every layout starts from these.
  del state
  multiple = grpo.updates_per_batch * (c.grpo.micro_batch_size or 1)
  out = []
  for layout, share, pack in layouts(pack_tokens, only):
    batch = batching.build_batch(rows, grpo, pad_id=pad_id, batch_multiple=multiple,
                                 share_prompts=share, pack_tokens=pack)
    state = init_train_state(model_config, dataclasses.replace(grpo), params)
    t0 = time.perf_counter()
    state, metrics = train_step(state, batch)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
      t0 = time.perf_counter()
      state, m = train_step(state, batch)
      jax.block_until_ready(m)
      times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    shapes = {k: v.shape for k, v in batch.items() if k.endswith(("NxL", "BxT", "UxP", "BxC"))}
    row = {"config": name, "layout": layout, "slots": batching.forward_slots(batch),
           "unembedded": unembedded(batch), "row_tokens": row_tokens, "update_s": step_s, "first_s": compile_s,
           "tokens_per_s": row_tokens / step_s, "pg_loss": float(metrics["actor/pg_loss"]),
           "shapes": {k: list(v) for k, v in shapes.items()}}
    row["slots_per_token"] = row["slots"] / row_tokens
    out.append(row)
    print(f"  {layout:<22} slots/token {row['slots_per_token']:5.2f}  unembedded "
          f"{row['unembedded']:6d}  update {step_s:7.2f} s "
          f"({row_tokens / step_s:7.0f} tok/s)  first {compile_s:6.1f} s  pg_loss "
          f"{row['pg_loss']:+.6f}  {' '.join(f'{k}={tuple(v)}' for k, v in shapes.items())}",
          flush=True)
    del state
  base = out[0]["update_s"]
  for row in out:
    row["time_vs_first"] = row["update_s"] / base
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", action="append", default=[],
                      help="config spec (repeatable); default: the two cases of the docstring")
  parser.add_argument("--set", action="append", default=[], help="KEY=VALUE on every config")
  parser.add_argument("--pack-tokens", default="512,1024",
                      help="comma-separated buffer sizes to measure")
  parser.add_argument("--layouts", default="",
                      help="comma-separated layout names to measure (default: all)")
  parser.add_argument("--step", type=int, default=1, help="the step played (with --config)")
  parser.add_argument("--steps", type=int, default=3, help="timed updates per layout")
  parser.add_argument("--json", default="", help="write the rows here")
  flags = parser.parse_args()
  from bench.common import load_config  # noqa: PLC0415
  from rlsvr import runtime  # noqa: PLC0415

  runtime.set_host_devices()  # As `rlsvr.train`: the sampler splits large calls over cores.
  cases = [(spec, (), flags.step) for spec in flags.config] or list(DEFAULT_CASES)
  pack_tokens = [int(n) for n in flags.pack_tokens.split(",") if n]
  rows = []
  for spec, own, step in cases:
    c = load_config(spec, (*own, *flags.set))
    rows += measure(" ".join([spec, *own, *flags.set, f"step {step}"]), c, step, pack_tokens,
                    flags.steps, flags.layouts)
  print(f"\n{'config':<52} {'layout':<22} {'slots/token':>11} {'unembedded':>10} "
        f"{'update s':>9} {'x first':>8}")
  for r in rows:
    print(f"{r['config'][:52]:<52} {r['layout']:<22} {r['slots_per_token']:>11.2f} "
          f"{r['unembedded']:>10d} {r['update_s']:>9.2f} {r['time_vs_first']:>8.2f}")
  print(f"load average: {os.getloadavg()}")
  if flags.json:
    with open(flags.json, "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  main()
