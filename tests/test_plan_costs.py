"""The planner's cost arithmetic: parameter bytes by hand and against JAX, activations."""
import math

from rlsvr import parallel, plan, plan_costs
from rlsvr.model import params as params_lib, qwen3
from rlsvr.model.config import preset
from rlsvr.model.sources import TINY_QWEN3
from tests.test_plan import component, smoke


def test_param_bytes_exact_by_hand():
  m = TINY_QWEN3  # V151936 D16 F32 L2 H4 K2 Dh4, tied embeddings.
  v, d, f, l, h, k, dh = 151936, 16, 32, 2, 4, 2, 4
  norms = d + 2 * l * d + 2 * l * dh  # final, input, post-attention; q and k norms.
  assert m.num_params() == v * d + l * (2 * d * h * dh + 2 * d * k * dh + 3 * d * f) + norms
  one = {"data": 1, "fsdp": 1, "tensor": 1}
  assert plan_costs.param_bytes(m, one, 4)[0] == m.num_params() * 4
  # fsdp=8 splits the hidden dimension of every matrix; the norms stay whole.
  fsdp, how = plan_costs.param_bytes(m, {"data": 1, "fsdp": 8, "tensor": 1}, 2)
  assert fsdp == ((m.num_params() - norms) // 8 + norms) * 2
  assert how.startswith("fsdp8")
  # tensor=8: vocabulary and MLP units split; 4 query / 2 KV heads cannot be: replicated.
  tensor, _ = plan_costs.param_bytes(m, {"data": 1, "fsdp": 1, "tensor": 8}, 4)
  assert tensor == (v * d // 8 + l * 3 * d * f // 8 + l * (2 * d * h * dh + 2 * d * k * dh)
                    + norms) * 4


def test_param_bytes_match_jax_shard_shapes_on_a_real_mesh():
  mesh = parallel.make_mesh({"fsdp": 2, "tensor": 4})
  shardings = params_lib.param_shardings(TINY_QWEN3, mesh)
  per_device = sum(math.prod(shardings[path].shard_shape(leaf.shape)) * 4
                   for path, leaf in params_lib.flatten(qwen3.abstract_params(TINY_QWEN3)).items())
  assert plan_costs.param_bytes(TINY_QWEN3, dict(mesh.shape), 4)[0] == per_device


def test_activation_estimates_respond_to_remat_and_micro_batches():
  def act(**grpo):
    c = smoke()
    c.grpo.update(grpo)
    return component(plan.plan(c, 1), "train: clue", "activations").bytes

  assert act(remat=True) < act(remat=False)
  assert act(micro_batch_size=2) < act(micro_batch_size=8)


def test_max_rows_bounds_the_kv_cache_of_a_call():
  c = smoke()
  c.spy.games_per_step = 8  # 32 player rows
  whole = component(plan.plan(c, 1), "sample: players", "KV cache")
  c.sampling.max_rows = 4
  sliced = component(plan.plan(c, 1), "sample: players", "KV cache")
  assert sliced.phase.startswith("sample: players (B=4, 8 slices,")
  assert sliced.bytes * 8 == whole.bytes


def test_rows_sharing_a_prompt_count_its_prefix_once():
  m = TINY_QWEN3
  per_slot = 2 * m.num_layers * m.num_kv_heads * m.head_dim * 4
  kv = lambda **kw: component_named(plan_costs.sample_phase(
      "detectors", 16, 1000, 100, m, 4, 1, 1, 0, 512, **kw), "KV cache")
  shared = kv(max_rows=0, per_prompt=8)  # 2 prompts of P=1024, 16 rows of N=128.
  assert shared.bytes == per_slot * (2 * 1024 + 16 * 128)
  assert "2 prompts x 8" in shared.phase
  # Slices of 12 rows cut the groups of 8: the sampler then caches every row's prompt.
  assert kv(max_rows=12, per_prompt=8).bytes == per_slot * 16 * (1024 + 128)
  assert kv(max_rows=0, per_prompt=1).bytes == per_slot * 16 * (1024 + 128)
  # On data=8, 4 prompts would be prefilled whole on every device (2 rows each unshared):
  # the sampler does not share. 2 prompts (as many per device as rows) it does share.
  on_8 = lambda per_prompt: component_named(plan_costs.sample_phase(
      "detectors", 16, 1000, 100, m, 4, 8, 1, 0, 512, per_prompt=per_prompt), "KV cache")
  assert on_8(4).bytes == per_slot * 2 * (1024 + 128) and "prompts" not in on_8(4).phase
  assert on_8(8).bytes == per_slot * (2 * 1024 + 2 * 128) and "2 prompts x 8" in on_8(8).phase


def component_named(components, prefix):
  (match,) = [c for c in components if c.name.startswith(prefix)]
  return match


def test_blocked_attention_keeps_long_sequences_linear():
  """At T = 32k the activations of a 1-row micro-batch grow ~linearly in T (blocks of
  512 queries), where materialised scores would grow with T**2."""
  m = preset("qwen3-4b")
  act = lambda seq, block: plan_costs.train_activations(
      m, 1, seq, 1024, 2, remat=True, t=1, chunk=1024, block=block)
  assert act(32768, 512) < 2.5 * act(16384, 512)
  assert act(32768, 32768) > 3.5 * act(16384, 16384)
  assert act(32768, 512) < act(32768, 32768) / 20
