#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs the whole test suite on the CPU.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/model -x`).
# Fails when any test fails and when no test ran (pytest exits 5 then).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS=cpu
.venv/bin/python -m pytest -q --durations=15 "$@"
