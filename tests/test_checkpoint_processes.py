"""Checkpoints of a two-process run (one CPU device each, gloo collectives, one host).

Each process writes and reads its own shards, so a step can be readable on one
process and not on the other (a truncated shard file of process 1). Resuming
must then set the step aside on every process alike and restore the same older
step everywhere, or the processes would continue from different states.
"""
import glob
import json
import os
import socket
import subprocess
import sys
import textwrap

from tests import xla

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, workdir, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)

    from rlsvr import checkpoint, parallel
    from rlsvr.model import params as params_lib, qwen3, sources
    from rlsvr.rl.train_step import GRPOConfig, init_train_state

    config = sources.resolve("random:tiny")
    mesh = parallel.make_mesh({"fsdp": 2})  # Every large weight split over the processes.
    params = jax.device_put(qwen3.init_params(config, jax.random.key(0)),
                            params_lib.unflatten(params_lib.param_shardings(config, mesh)))
    state = init_train_state(config, GRPOConfig(), params)
    ckpt = checkpoint.Checkpointer(workdir, keep=3)
    if phase == "save":
      for step in (1, 2):
        ckpt.save(step, state.replace(step=state.step + step), {"at": step}, {})
    else:
      # Global arrays gathered whole on every process: the restored shards fit together.
      checksum = lambda tree: float(sum(abs(x).sum() for x in jax.tree.leaves(parallel.to_host(tree))))
      saved = checksum(state.params)  # The fresh state's weights are the saved ones.
      state, env_state, _ = ckpt.restore(state)
      print("RESULT " + json.dumps({"step": int(parallel.to_host(state.step)),
                                    "env": env_state, "steps": ckpt.manager.all_steps(),
                                    "weights_as_saved": checksum(state.params) == saved}))
    ckpt.close()
""")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _run_both(workdir: str, phase: str) -> list[str]:
  port = _free_port()
  env = xla.child_env(devices=1, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(port), str(i), workdir, phase],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT) for i in range(2)]
  outs = []
  for p in procs:
    try:
      outs.append(p.communicate(timeout=240)[0])
    finally:
      p.kill()
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  return outs


def test_a_step_unreadable_on_one_process_is_set_aside_on_all(tmp_path):
  workdir = str(tmp_path / "run")
  _run_both(workdir, "save")
  # Truncate every data file that process 1 wrote for step 2: process 0 reads its own
  # shards of step 2 without error, process 1 cannot.
  shards = glob.glob(os.path.join(workdir, "checkpoints", "2", "state", "ocdbt.process_1", "d",
                                  "*"))
  assert shards
  for path in shards:
    with open(path, "r+b") as f:
      f.truncate(8)

  outs = _run_both(workdir, "restore")
  results = [json.loads(out.split("RESULT ", 1)[1].splitlines()[0]) for out in outs]
  assert [r["step"] for r in results] == [1, 1], outs
  assert [r["env"] for r in results] == [{"at": 1}, {"at": 1}]
  assert [r["steps"] for r in results] == [[1], [1]]
  assert [r["weights_as_saved"] for r in results] == [True, True]
  assert "unreadable on process(es) [1]" in outs[0]  # Process 0 says why it gave step 2 up.
  assert [name.split(".")[0] for name in
          os.listdir(os.path.join(workdir, "checkpoints_unreadable"))] == ["2"]
