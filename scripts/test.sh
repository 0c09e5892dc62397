#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs the whole test suite on the CPU.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/model -x`).
# Fails when any test fails and when no test ran (pytest exits 5 then).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS=cpu
# malloc on 2 MiB pages, as `rlsvr.train` restarts itself with (`rlsvr.runtime.exec_with_huge_pages`):
# XLA:CPU's per-run buffers then fault in far fewer pages.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1"
# Two workers (pytest-xdist), one per core of the CI machine: the suite is mostly XLA
# compiles, which keep one core busy each. A third measured 9% faster beside ../shared
# but slower from a fresh clone (docs/benchmarks.md, "Test suite, cold cache"). A worker
# that runs out of tests takes queued ones from the other (worksteal), so a long test
# near the end does not leave a core idle. RLSVR_TEST_WORKERS sets the count.
.venv/bin/python -m pytest -q -n "${RLSVR_TEST_WORKERS:-2}" --dist worksteal --durations=15 "$@"
