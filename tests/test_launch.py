"""launch/: dry runs print what would run and run nothing; the SLURM job really trains.

The SLURM test stands in fake `sbatch` and `srun` commands that start the job script
and two trainer processes on this machine with the environment SLURM gives its tasks,
so JAX's own cluster detection, the gloo CPU collectives and the whole multi-process
path run for real; the result must equal one process with the same 2-device mesh.
"""
import os
import stat
import subprocess

import pytest

from configs import spy_summ
from rlsvr import metrics, train
from tests import xla

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_commands(tmp_path, names):
  """Executables on PATH that log their arguments to calls.log (and run nothing)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  for name in names:
    path = bin_dir / name
    path.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >> "{tmp_path}/calls.log"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
  return bin_dir


def _launch(script, args, tmp_path, extra_env=None, timeout=60):
  bin_dir = _fake_commands(tmp_path, ["sbatch", "srun", "gcloud"])
  env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **(extra_env or {})}
  return subprocess.run(["bash", f"launch/{script}", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script,args,expected", [
    ("gpu_node.sh", ["--config=configs/rlsr_countdown.py", "--", "--config.steps=5"],
     ["RLSVR_ACCELERATOR=cuda12 bash", "/scripts/setup.sh",
      ".venv/bin/python -m rlsvr.train --config=configs/rlsr_countdown.py "
      "--workdir=runs/rlsr_countdown --config.steps=5"]),
    ("slurm.sh", ["--nodes=4", "--partition=gpu", "--workdir=/shared/run", "--no-setup"],
     ["#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
      "srun --ntasks-per-node=1 .venv/bin/python -m rlsvr.train --config=configs/spy_summ.py "
      "--workdir=/shared/run --config.distributed.mode=on", "+ sbatch /shared/run/slurm_job.sh"]),
    ("tpu_pod.sh", ["--tpu=pod", "--zone=us-east5-a", "--project=p", "--workdir=gs://b/run"],
     ["+ git archive --format=tar.gz", "gcloud compute tpus tpu-vm scp",
      "--zone=us-east5-a --project=p --worker=all", "RLSVR_ACCELERATOR=tpu",
      "rlsvr.train\\ --config=configs/spy_summ.py\\ --workdir=gs://b/run\\ "
      "--config.distributed.mode=on"]),
])
def test_dry_runs_print_the_commands_and_run_nothing(tmp_path, script, args, expected):
  out = _launch(script, ["--dry-run", *args], tmp_path)
  assert out.returncode == 0, out.stderr
  for text in expected:
    assert text in out.stdout, (text, out.stdout)
  assert not (tmp_path / "calls.log").exists()
  assert not os.path.exists("/shared/run")


@pytest.mark.parametrize("script,args,match", [
    ("tpu_pod.sh", ["--zone=z"], "--tpu=NAME and --zone=ZONE are required"),
    ("gpu_node.sh", ["--dryrun"], "unknown argument"),
    ("gpu_node.sh", ["stray"], "unknown argument"),
])
def test_bad_arguments_are_refused(tmp_path, script, args, match):
  out = _launch(script, args, tmp_path)
  assert out.returncode == 2 and match in out.stderr


def test_slurm_job_trains_on_two_processes_like_one(tmp_path):
  bin_dir = _fake_commands(tmp_path, [])
  # sbatch runs the job script at once; srun starts SLURM_NTASKS copies of its command
  # with the variables SLURM sets per task (one "node": localhost).
  (bin_dir / "sbatch").write_text('#!/usr/bin/env bash\nSLURM_JOB_ID=$RANDOM exec bash "$1"\n')
  (bin_dir / "srun").write_text("""#!/usr/bin/env bash
shift  # --ntasks-per-node=1
pids=()
for i in 0 1; do
  SLURM_NTASKS=2 SLURM_PROCID=$i SLURM_LOCALID=$i SLURM_STEP_NODELIST=localhost \\
    "$@" > "$FAKE_SLURM_LOG.$i" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
""")
  for f in ("sbatch", "srun"):
    (bin_dir / f).chmod(0o755)
  # One device per process keeps the compiles small; the mesh spans both processes.
  smoke = ["--config.steps=1", "--config.mesh.shape.data=1", "--config.mesh.shape.fsdp=2"]
  single, multi = str(tmp_path / "single"), str(tmp_path / "multi")
  log = str(tmp_path / "task")
  env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_LOG": log}
  job = subprocess.Popen(
      ["bash", "launch/slurm.sh", "--nodes=2", "--no-setup", "--config=configs/spy_summ.py:smoke",
       f"--workdir={multi}", "--", *smoke], cwd=REPO, text=True,
      env=xla.child_env(1, **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  try:
    # The same run in this process while the job runs: the same mesh on its first two
    # devices (`parallel.make_mesh`), and no third interpreter to start and compile in.
    config = spy_summ.get_config("smoke")
    config.steps, config.mesh.shape.data, config.mesh.shape.fsdp = 1, 1, 2
    train.train(config, single)
    out = job.communicate(timeout=600)[0]
  finally:
    job.kill()
  tasks = [open(f"{log}.{i}", encoding="utf-8").read() for i in range(2)]
  assert job.returncode == 0, out[-2000:] + "\n".join(t[-3000:] for t in tasks)
  assert "step 1/1" in tasks[0] and "step 1/1" not in tasks[1]  # process 0 alone logs

  read = lambda d, name: open(os.path.join(d, name), encoding="utf-8").read()
  assert read(multi, "rollouts.txt") == read(single, "rollouts.txt")
  got, want = (metrics.read_jsonl(os.path.join(d, "metrics.jsonl"))[0] for d in (multi, single))
  for k, v in want.items():
    if k.startswith(("spy/", "reward/", "response_length/", "actor/pg", "actor/entropy")):
      assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
  state_dir = os.path.join(multi, "checkpoints", "1", "state")
  assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))
  assert os.path.isfile(os.path.join(multi, "slurm_job.sh"))
