#!/usr/bin/env bash
# A Cloud TPU pod slice (e.g. v5p-64): one process per TPU VM worker, started on all
# workers at once over `gcloud ... ssh --worker=all`; JAX finds its peers from the TPU
# metadata (`jax.distributed` cluster detection, started by --config.distributed.mode=on).
#
#   bash launch/tpu_pod.sh --tpu=my-v5p-64 --zone=us-east5-a [--project=my-project] \
#       --config=configs/spy_summ.py --workdir=gs://my-bucket/runs/spy_summ \
#       [--dry-run] [-- --config.mesh.shape.fsdp=-1]
#
# Ships the committed tree (git archive of HEAD) to every worker, sets up .venv with
# jax[tpu] there, and trains. Checkpoints go to WORKDIR from every worker: use a gs://
# bucket. Process 0's console is the one streamed back with the logs.
source "$(dirname "$0")/_common.sh"
TPU=""
ZONE=""
PROJECT=""
parse_flags "$@"
if [ -z "$TPU" ] || [ -z "$ZONE" ]; then
  echo "--tpu=NAME and --zone=ZONE are required (see the top of $0)" >&2
  exit 2
fi
cd "$REPO"
gcloud_tpu=(gcloud compute tpus tpu-vm)
where=(--zone="$ZONE" ${PROJECT:+--project="$PROJECT"} --worker=all)
archive="/tmp/rlsvr-$(git rev-parse --short HEAD).tar.gz"
run git archive --format=tar.gz -o "$archive" HEAD
run "${gcloud_tpu[@]}" scp "$archive" "$TPU:~/rlsvr.tar.gz" "${where[@]}"
trainer_command --config.distributed.mode=on
remote="mkdir -p ~/rlsvr && tar -xzf ~/rlsvr.tar.gz -C ~/rlsvr && cd ~/rlsvr"
if [ "$SETUP" = 1 ]; then
  remote="$remote && RLSVR_ACCELERATOR=tpu bash scripts/setup.sh"
fi
run "${gcloud_tpu[@]}" ssh "$TPU" "${where[@]}" --command="$remote && $(quoted "${TRAINER[@]}")"
