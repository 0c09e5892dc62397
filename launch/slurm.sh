#!/usr/bin/env bash
# Multi-node GPU with SLURM: one process per node, each driving its node's GPUs; JAX
# finds its peers in SLURM's environment (`jax.distributed` cluster detection, started
# by --config.distributed.mode=on). Process 0 writes logs; every process writes its
# checkpoint shards, so WORKDIR must be on a filesystem all nodes share (or gs://).
#
#   bash launch/slurm.sh --nodes=4 --gpus_per_node=8 [--partition=gpu] [--time=48:00:00] \
#       --config=configs/spy_summ.py --workdir=/shared/runs/spy_summ \
#       [--dry-run] [--no-setup] [-- --config.mesh.shape.data=4 --config.mesh.shape.fsdp=8 \
#       --config.grpo.micro_batch_size=32 --config.sampling.max_cache_tokens=2621440]
#
# Rows split over data x fsdp only when they divide it, so the per-step row counts grow
# with the data shards (docs/scaling.md, "More devices"; `python -m rlsvr.plan` checks it).
#
# Sets up .venv here (the repo must be on the shared filesystem too), writes the job
# script to WORKDIR/slurm_job.sh and submits it with sbatch. --dry-run prints the job
# script and the sbatch command instead.
source "$(dirname "$0")/_common.sh"
NODES=2
GPUS_PER_NODE=8
PARTITION=""
TIME="48:00:00"
parse_flags "$@"
cd "$REPO"
setup cuda12
trainer_command --config.distributed.mode=on
job="#!/usr/bin/env bash
#SBATCH --job-name=rlsvr-$(basename "${CONFIG%%:*}" .py)
#SBATCH --nodes=$NODES
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=$GPUS_PER_NODE
#SBATCH --exclusive
#SBATCH --time=$TIME
#SBATCH --output=$WORKDIR/slurm-%j.out${PARTITION:+
#SBATCH --partition=$PARTITION}
set -euo pipefail
cd $(quoted "$REPO")
export XLA_PYTHON_CLIENT_MEM_FRACTION=\${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
srun --ntasks-per-node=1 $(quoted "${TRAINER[@]}")
"
script="$WORKDIR/slurm_job.sh"
if [ "$DRY_RUN" = 1 ]; then
  echo "# $script"
  printf '%s' "$job"
else
  mkdir -p "$WORKDIR"
  printf '%s' "$job" > "$script"
fi
run sbatch "$script"
