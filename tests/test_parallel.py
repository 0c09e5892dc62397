"""Mesh, batch placement, and sharded runs equal to one device."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rlsvr import parallel
from rlsvr.rl.rollout import Trajectory
from rlsvr.model import params as params_lib
from rlsvr.model import qwen3
from rlsvr.model.config import ModelConfig
from rlsvr.rl.batch import build_batch
from rlsvr.rl.train_step import GRPOConfig, init_train_state, train_step
from rlsvr.sampling import generate
from tests.rl.tiny import random_params

GRPO = GRPOConfig(lr=1e-3, kl_coef=0.1, entropy_coef=0.01, adam_eps=1e-4)


def test_mesh_shapes():
  assert dict(parallel.make_mesh().shape) == {"data": 1, "fsdp": 8, "tensor": 1}
  assert dict(parallel.make_mesh({"data": 2, "tensor": -1}).shape) == {"data": 2, "fsdp": 1,
                                                                        "tensor": 4}
  assert parallel.make_mesh({"fsdp": 1}).size == 1  # a smaller mesh takes the first devices
  with pytest.raises(ValueError, match="needs 16"):
    parallel.make_mesh({"fsdp": 16})
  with pytest.raises(ValueError, match="unknown mesh axes"):
    parallel.make_mesh({"model": 2})


# ------------------------------------------------ sharded == single device, per mesh

# Every sharded dimension divides the meshes below: 8 query / 4 KV heads and the MLP
# split over tensor=4, hidden 64 over fsdp up to 4, the vocabulary over tensor.
MESH_CONFIG = ModelConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                          num_heads=8, num_kv_heads=4, head_dim=8, tie_word_embeddings=False)
MESHES = {"data8": {"data": 8}, "data2_fsdp4": {"data": 2, "fsdp": 4},
          "fsdp2_tensor4": {"fsdp": 2, "tensor": 4}}
NEW_TOKENS = 12


def _prompts():
  rng = np.random.default_rng(1)
  return [rng.integers(1, 128, int(n)).tolist() for n in (5, 9, 3, 12, 7, 1, 10, 4)]


def _batch(completions):
  rows = [Trajectory(prompt_ids=p, completion_ids=list(c.ids), logprobs=list(c.logprobs),
                     reward=float(i % 3), group_id=i // 2, role="policy")
          for i, (p, c) in enumerate(zip(_prompts(), completions))]
  return build_batch(rows, min_bucket=8)


def _run_everything(params, mesh=None):
  """Forward logits, greedy samples and one train step on `params` (sharded or not)."""
  tokens_BxT = np.asarray(_prompts()[3][:8] * 2, np.int32).reshape(2, 8)
  logits = qwen3.apply(MESH_CONFIG, params, jnp.asarray(tokens_BxT))
  completions = generate(MESH_CONFIG, params, _prompts(), max_new_tokens=NEW_TOKENS,
                         temperature=0.0)
  batch = _batch(completions)
  state = init_train_state(MESH_CONFIG, GRPO, params)
  state, metrics = train_step(state, batch if mesh is None else parallel.put_batch(batch, mesh))
  return logits, completions, state, metrics


@pytest.fixture(scope="module")
def single_device():
  params = random_params(MESH_CONFIG, std=0.3)
  return params, _run_everything(params)


def _assert_placed_by_the_rules(tree, mesh):
  for path, x in params_lib.flatten(tree).items():
    rule = NamedSharding(mesh, params_lib.spec_for(path, x.shape, mesh))
    assert x.sharding.is_equivalent_to(rule, x.ndim), (path, x.sharding.spec, rule.spec)


@pytest.mark.parametrize("shape", MESHES.values(), ids=MESHES.keys())
def test_sharded_forward_sampler_and_train_step_equal_one_device(single_device, shape):
  params, (logits, completions, state, metrics) = single_device
  mesh = parallel.make_mesh(shape)
  sharded = parallel.shard_params(params, mesh)
  _assert_placed_by_the_rules(sharded, mesh)
  s_logits, s_completions, s_state, s_metrics = _run_everything(sharded, mesh)

  np.testing.assert_allclose(np.asarray(s_logits), np.asarray(logits), atol=2e-5, rtol=0)
  assert [c.ids for c in s_completions] == [c.ids for c in completions]
  np.testing.assert_allclose([c.logprobs for c in s_completions],
                             [c.logprobs for c in completions], atol=1e-4)
  # The update keeps params, Adam's moments and the reference copy on the rules' shardings.
  _assert_placed_by_the_rules(s_state.params, mesh)
  _assert_placed_by_the_rules(s_state.ref_params, mesh)
  _assert_placed_by_the_rules(s_state.opt_state[1][0].mu, mesh)
  for a, b in zip(jax.tree.leaves(s_state.params), jax.tree.leaves(state.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=0)
  for k, v in metrics.items():
    np.testing.assert_allclose(float(s_metrics[k]), float(v), rtol=1e-4, atol=1e-6, err_msg=k)


# ------------------------------------------------ processes and host data

@pytest.fixture
def fake_initialize(monkeypatch):
  calls = []
  monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
  monkeypatch.setattr(jax.config, "update", lambda *a: None)
  for var in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "JAX_NUM_PROCESSES", "TPU_WORKER_HOSTNAMES",
              "TPU_PROCESS_ADDRESSES", "JAX_COORDINATOR_ADDRESS", "MEGASCALE_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(var, raising=False)
  return calls


def test_distributed_starts_only_when_asked_or_in_a_multiprocess_cluster(fake_initialize,
                                                                         monkeypatch):
  parallel.initialize_distributed("auto")
  parallel.initialize_distributed("off")
  monkeypatch.setenv("SLURM_NTASKS", "1")  # a one-task SLURM job is one process
  parallel.initialize_distributed("auto")
  assert fake_initialize == []
  monkeypatch.setenv("SLURM_NTASKS", "4")
  parallel.initialize_distributed("auto")  # left to JAX's cluster detection
  assert fake_initialize[-1] == dict(coordinator_address=None, num_processes=None,
                                     process_id=None)
  monkeypatch.delenv("SLURM_NTASKS")
  monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "w0,w1")
  parallel.initialize_distributed("auto")
  parallel.initialize_distributed("on", "10.0.0.1:1234", 2, 1)
  assert len(fake_initialize) == 3
  assert fake_initialize[-1] == dict(coordinator_address="10.0.0.1:1234", num_processes=2,
                                     process_id=1)
  with pytest.raises(ValueError, match="distributed.mode"):
    parallel.initialize_distributed("yes")


def test_put_batch_splits_rows_when_they_divide():
  mesh = parallel.make_mesh({"data": 2, "fsdp": 4})
  batch = parallel.put_batch({"a": np.arange(16).reshape(8, 2), "b": np.arange(6)}, mesh)
  assert batch["a"].sharding.spec == P(("data", "fsdp"))
  assert batch["a"].addressable_shards[1].data.shape == (1, 2)
  assert batch["b"].sharding.spec == P()  # 6 rows over 8 devices: replicated
  np.testing.assert_array_equal(parallel.to_host(batch)["a"], np.arange(16).reshape(8, 2))


def test_host_split_mesh_only_for_large_calls_on_one_cpu_device(monkeypatch):
  from rlsvr import runtime

  params = {"w": jnp.ones((4, 4))}
  monkeypatch.setattr(runtime, "cpu_cores", lambda: 2)
  mesh = parallel.host_split_mesh(params, parallel.HOST_SPLIT_MIN_ROWS)
  assert dict(mesh.shape) == {"data": 2, "fsdp": 1, "tensor": 1}
  assert parallel.host_split_mesh(params, parallel.HOST_SPLIT_MIN_ROWS - 1) is None
  sharded = parallel.shard_params(random_params(MESH_CONFIG), parallel.make_mesh({"fsdp": 2}))
  assert parallel.host_split_mesh(sharded, 1024) is None  # Weights on a mesh stay there.
  monkeypatch.setattr(runtime, "cpu_cores", lambda: 16)
  assert parallel.host_split_mesh(params, 1024).size == 8  # At most the devices there are.
  monkeypatch.setattr(runtime, "cpu_cores", lambda: 1)
  assert parallel.host_split_mesh(params, 1024) is None
  y = parallel.replicate(params, mesh)["w"]
  assert y.sharding.is_fully_replicated and len(y.devices()) == 2
  for shard in y.addressable_shards:
    np.testing.assert_array_equal(np.asarray(shard.data), np.ones((4, 4)))
