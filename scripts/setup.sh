#!/usr/bin/env bash
# Creates .venv (Python 3.11) with the pinned requirements and fetches the
# offline assets. Idempotent: a later run with unchanged requirements only
# checks the assets (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.rlsvr-requirements.sha256
want="$(cat requirements.txt requirements-test.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing requirements into .venv (about 2 minutes the first time)"
  # torch first, pinned to the CPU wheel: anything that pulls an unpinned torch
  # later would otherwise fetch a multi-GB CUDA build.
  .venv/bin/python -m pip install -q --disable-pip-version-check "$(grep '^torch==' requirements-test.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-test.txt
  echo "$want" > "$stamp"
fi
bash scripts/fetch_assets.sh >/dev/null
echo "[setup] ready: $(.venv/bin/python -c 'import jax, transformers, torch; print(f"jax {jax.__version__}, transformers {transformers.__version__}, torch {torch.__version__}")')"
