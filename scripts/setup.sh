#!/usr/bin/env bash
# Creates .venv (Python 3.11) with the pinned requirements and fetches the
# offline assets. Idempotent: a later run with unchanged requirements only
# checks the assets (seconds).
#
# RLSVR_ACCELERATOR=cuda12|cuda13|tpu also installs the pinned jax's plugin for
# that accelerator (the launch/ scripts set it); the default is the CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
accelerator="${RLSVR_ACCELERATOR:-cpu}"
case "$accelerator" in
  cpu|cuda12|cuda13|tpu) ;;
  *) echo "RLSVR_ACCELERATOR=$accelerator: use cpu, cuda12, cuda13 or tpu" >&2; exit 2 ;;
esac

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.rlsvr-requirements.sha256
want="$( (cat requirements.txt requirements-test.txt; echo "$accelerator") | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing requirements into .venv (about 2 minutes the first time)"
  # torch first, pinned to the CPU wheel: anything that pulls an unpinned torch
  # later would otherwise fetch a multi-GB CUDA build.
  .venv/bin/python -m pip install -q --disable-pip-version-check "$(grep '^torch==' requirements-test.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-test.txt
  if [ "$accelerator" != cpu ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check \
      "jax[$accelerator]==$(sed -n 's/^jax==//p' requirements.txt)"
  fi
  echo "$want" > "$stamp"
fi
bash scripts/fetch_assets.sh >/dev/null
echo "[setup] ready: $(.venv/bin/python -c 'import jax, transformers, torch; print(f"jax {jax.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")')"
