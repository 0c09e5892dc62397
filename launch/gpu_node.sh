#!/usr/bin/env bash
# One GPU node: a single process drives all of the node's GPUs (the paper's setup is
# one node of 8). Sets up .venv with CUDA jax, then trains; the trainer prints its
# memory plan and refuses a config that does not fit (`python -m rlsvr.plan` shows it).
#
#   bash launch/gpu_node.sh --config=configs/spy_summ.py --workdir=runs/spy_summ \
#       [--dry-run] [--no-setup] [-- --config.steps=50]
#
# The mesh is config.mesh.shape: by default fsdp over every GPU. Tensor-parallel-8, as
# the paper ran, keeps every micro-batch row on every GPU, so it fits with one row:
# `-- --config.mesh.shape.fsdp=1 --config.mesh.shape.tensor=8 --config.grpo.micro_batch_size=1`
# (docs/scaling.md; `python -m rlsvr.plan` with the same flags checks it).
source "$(dirname "$0")/_common.sh"
parse_flags "$@"
cd "$REPO"
setup cuda12
# JAX preallocates this share of each GPU; the memory plan reads the same variable.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
trainer_command
run "${TRAINER[@]}"
