"""The memory planner: exact arithmetic on small configs, the verdict, the CLI."""
import os
import subprocess
import sys

import pytest

from rlsvr import parallel, plan, plan_costs
from rlsvr.model.sources import TINY_QWEN3

GIB = 2**30
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smoke(**mesh):
  from configs.spy_summ import get_config

  c = get_config("smoke")
  if mesh:
    c.mesh.shape = mesh
  return c


def component(result, phase_prefix, name_prefix):
  (match,) = [c for c in result.components
              if c.phase.startswith(phase_prefix) and c.name.startswith(name_prefix)]
  return match


@pytest.mark.parametrize("shape", [{"fsdp": -1}, {"data": 2, "tensor": -1}, {"fsdp": 1},
                                   {"data": 2, "fsdp": 2, "tensor": 2}])
def test_mesh_sizes_match_make_mesh(shape):
  assert plan.mesh_sizes(shape, 8) == dict(parallel.make_mesh(shape).shape)


def test_mesh_sizes_refuse_impossible_meshes():
  with pytest.raises(ValueError, match="does not fit"):
    plan.mesh_sizes({"fsdp": 16}, 8)
  with pytest.raises(ValueError, match="does not fit"):
    plan.mesh_sizes({"fsdp": 3, "tensor": -1}, 8)


def test_resident_state_and_kv_cache_by_hand():
  m = TINY_QWEN3
  est = plan_costs.Estimates(prompt_tokens=(("players", 100), ("detectors", 300)))
  result = plan.plan(smoke(), 1, 16 * GIB, est)  # fp32, one device, kl_coef 0.001.
  n = m.num_params()
  assert component(result, "resident", "master params").bytes == 4 * n
  assert component(result, "resident", "AdamW").bytes == 8 * n
  assert component(result, "resident", "reference").bytes == 4 * n
  assert result.resident_bytes == 16 * n
  # players: 2 games x 4 players = 8 rows, P = 128, N = bucket(8) = 16.
  kv = component(result, "sample: players (B=8, P=128, N=16)", "KV cache").bytes
  assert kv == 2 * m.num_layers * 8 * m.num_kv_heads * m.head_dim * (128 + 16) * 4
  # detectors: 2 games x 2 rollouts = 4 rows continuing 2 prompts (P = 384, the bucket of
  # their 300 tokens plus the template) that they share.
  kv = component(result, "sample: detectors (B=4, 2 prompts x 2, P=384, N=16)", "KV cache").bytes
  assert kv == 2 * m.num_layers * m.num_kv_heads * m.head_dim * (2 * 384 + 4 * 16) * 4
  assert result.total_bytes == result.resident_bytes + max(result.phase_bytes().values())
  assert result.fits and result.headroom_bytes == 16 * GIB - result.total_bytes
  assert not [c for c in result.components if "copy" in c.name]  # fp32 compute: no copies


def test_bf16_compute_counts_fp32_masters_and_bf16_copies():
  c = smoke()
  c.model.compute_dtype = "bfloat16"
  result = plan.plan(c, 1, 16 * GIB)
  n = TINY_QWEN3.num_params()
  assert component(result, "resident", "master params (float32)").bytes == 4 * n
  assert component(result, "resident", "AdamW").bytes == 8 * n
  assert component(result, "resident", "reference params (bfloat16)").bytes == 2 * n
  assert component(result, "sample: players", "policy weights for the sampler").bytes == 2 * n
  assert component(result, "train: clue",
                   "trained weights of the forward (bfloat16 copy)").bytes == 2 * n


@pytest.mark.parametrize("variant,lora,copies", [
    ("smoke", 4, False), ("smoke,delayed", 4, True), ("smoke,online", 4, False),
    ("smoke", 0, True), ("smoke,delayed", 0, True), ("smoke,online", 0, False)])
def test_a_judge_copy_is_counted_only_where_the_judge_keeps_one(variant, lora, copies):
  """A LoRA run's judge shares the frozen base unless it is a delayed copy; an online
  judge reads the policy's weights."""
  from configs.rlsr_countdown import get_config

  c = get_config(variant)
  c.model.lora.rank = lora
  names = [comp.name for comp in plan.plan(c, 1, 16 * GIB).components
           if comp.phase == "resident"]
  assert any(n.startswith("judge params") for n in names) == copies, names


def test_lora_counts_the_frozen_base_and_the_adapters_as_peft_counts_them():
  import peft
  import transformers

  from rlsvr.model import lora

  c = smoke()
  c.model.compute_dtype = "bfloat16"
  c.model.lora.update(rank=8, targets="all")
  result = plan.plan(c, 1, 16 * GIB)
  hf_model = transformers.AutoModelForCausalLM.from_config(
      transformers.AutoConfig.for_model(**TINY_QWEN3.to_hf_dict("float32")))
  peft_model = peft.get_peft_model(hf_model, peft.LoraConfig(
      r=8, lora_alpha=32, target_modules=[f"{t}_proj" for t in lora.TARGETS]))
  adapters, _ = peft_model.get_nb_trainable_parameters()
  n = TINY_QWEN3.num_params()
  assert component(result, "resident", "LoRA adapters, rank 8 (float32").bytes == 4 * adapters
  assert component(result, "resident", "AdamW").bytes == 8 * adapters
  # The base is frozen in the compute dtype and is the reference: no other copy is held.
  assert component(result, "resident", "frozen base params (bfloat16").bytes == 2 * n
  assert result.resident_bytes == 2 * n + 12 * adapters and "init" not in result.phase_bytes()
  assert component(result, "sample: players", "policy weights for the sampler").bytes == 2 * n
  assert component(result, "train: clue", "gradient accumulator").bytes == 4 * adapters
  assert component(result, "optimizer update", "gradients").bytes == 12 * adapters


def test_kv_cache_sharded_over_batch_and_heads():
  est = plan_costs.Estimates(prompt_tokens=(("players", 100),))
  c = smoke(data=1, fsdp=4, tensor=2)
  c.spy.games_per_step = 8  # 32 player rows: 8 per data shard; 2 KV heads over tensor=2.
  kv = component(plan.plan(c, 8, None, est), "sample: players", "KV cache")
  m = TINY_QWEN3
  assert kv.bytes == 2 * m.num_layers * (32 // 4) * (2 // 2) * m.head_dim * (128 + 16) * 4
  assert kv.sharding == "batch/4 (data·fsdp), kv heads/2"


def test_qwen3_8b_and_hub_names_resolve_offline():
  m = plan.model_config_of("hub:Qwen/Qwen3-8B")
  assert m.num_params() == 8_190_735_360
  assert plan.model_config_of("hub:Qwen/Qwen3-4B-Instruct-2507").rope_theta == 5_000_000.0
  assert plan.model_config_of("hub:Qwen/Qwen2.5-7B-Instruct").num_params() == 7_615_616_512
  with pytest.raises(ValueError, match="unknown offline"):
    plan.model_config_of("hub:nobody/no-such-model")


def test_infeasible_config_is_refused_with_the_plan():
  c = smoke(data=1, fsdp=1, tensor=1)
  c.model.source, c.model.compute_dtype = "random:qwen3-8b", "bfloat16"
  with pytest.raises(ValueError, match="does not fit") as err:
    plan.check_fits(c, num_devices=1, device_memory_bytes=16 * GIB)
  message = str(err.value)
  assert "DOES NOT FIT" in message and "AdamW mu + nu" in message and "8.19B params" in message
  assert plan.check_fits(smoke(), 1, 16 * GIB).fits
  assert plan.check_fits(smoke(), 1).fits is None  # CPU: no memory stats, no verdict.


def test_usable_memory_from_device_names():
  assert plan.usable_memory("h100-80gb", None, None) == int(81_559 * 2**20 * 0.75)
  assert plan.usable_memory("tpu-v5p", None, None) == 95 * GIB
  assert plan.usable_memory(None, 16, None) == 16 * GIB
  assert plan.usable_memory(None, None, None) is None  # CPU: nothing to detect.
  with pytest.raises(ValueError, match="unknown --device"):
    plan.usable_memory("gtx-1080", None, None)


def test_cli_prints_the_verdict():
  run = subprocess.run(
      [sys.executable, "-m", "rlsvr.plan", "--config=configs/spy_summ.py:smoke", "--devices=1",
       "--device=h100-80gb"], cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"),
      capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr
  assert "verdict: FITS" in run.stdout and "KV cache" in run.stdout


def test_largest_fitting_walks_down_to_the_first_qwen3_that_fits_with_its_largest_settings():
  from configs.rlvr_math import get_config

  from rlsvr.envs import registry

  c, memory = get_config(None), 60 * GIB
  tried = plan.largest_fitting(c, 1, memory)
  assert [name for name, _, _ in tried] == list(plan.QWEN3_LADDER[:len(tried)])
  *misses, (name, found, result) = tried
  assert misses and all(settings is None and not r.fits for _, settings, r in misses)
  assert found and result.fits and result.total_bytes <= memory

  def fits(max_rows, micro):
    d = c.copy_and_resolve_references()
    d.model.source, d.sampling.max_rows, d.grpo.micro_batch_size = f"hub:Qwen/{name}", max_rows, micro
    return plan.plan(d, 1, memory).fits

  rows, micro = found["sampling.max_rows"], found["grpo.micro_batch_size"]
  assert fits(rows, micro)
  call_rows = max(call.rows for call in registry.get(c.env).plan(c, plan_costs.Estimates()).calls)
  assert rows == 0 or not fits(0 if rows * 2 >= call_rows else rows * 2, micro)
  assert micro == c.grpo.micro_batch_size or not fits(rows, micro * 2)
