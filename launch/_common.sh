# Shared by the launch scripts (sourced, not run): flag parsing, dry runs, the trainer command.
#
# Every script takes:
#   --config=FILE[:variants]  experiment (default configs/spy_summ.py)
#   --workdir=DIR             output folder (a shared filesystem or gs:// bucket when multi-host)
#   --dry-run                 print what would run, run nothing
#   --no-setup                skip scripts/setup.sh (the .venv already exists)
#   -- ARGS                   passed on to `python -m rlsvr.train` (e.g. --config.steps=20)
# plus the script's own --key=value flags, which land in the variable KEY (upper case).

set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONFIG=configs/spy_summ.py
WORKDIR=""
DRY_RUN=0
SETUP=1
TRAIN_ARGS=()

parse_flags() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      --no-setup) SETUP=0 ;;
      --) shift; TRAIN_ARGS=("$@"); break ;;
      --*=*)
        local key="${1%%=*}"; key="${key#--}"; key="${key//-/_}"
        key="$(echo "$key" | tr '[:lower:]' '[:upper:]')"
        printf -v "$key" '%s' "${1#*=}" ;;
      *) echo "unknown argument: $1 (see the top of $0)" >&2; exit 2 ;;
    esac
    shift
  done
  if [ -z "$WORKDIR" ]; then
    local name; name="$(basename "${CONFIG%%:*}" .py)"
    WORKDIR="runs/$name"
  fi
}

# Runs a command, or prints it (shell-quoted) under --dry-run.
run() {
  if [ "$DRY_RUN" = 1 ]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}

# The venv with the accelerator's jax plugin (RLSVR_ACCELERATOR: cuda12 | tpu | cpu).
setup() {
  if [ "$SETUP" = 1 ]; then
    run env RLSVR_ACCELERATOR="$1" bash "$REPO/scripts/setup.sh"
  fi
}

# TRAINER: the trainer's command line for one process (run from $REPO).
trainer_command() {
  TRAINER=(.venv/bin/python -m rlsvr.train "--config=$CONFIG" "--workdir=$WORKDIR"
           ${TRAIN_ARGS[@]+"${TRAIN_ARGS[@]}"} "$@")
}

# Its arguments shell-quoted into one string (for job scripts and remote shells).
quoted() {
  local out; out="$(printf '%q ' "$@")"; echo "${out% }"
}
