"""Tests for rlsvr.workers: time limits, crashes, memory, recovery."""
import math
import os
import time

import pytest
import sympy

from rlsvr.workers import Outcome, WorkerPool, default_pool


@pytest.fixture(scope="module")
def pool():
  pool = WorkerPool(num_workers=2, preload=("sympy",))
  yield pool
  pool.close()


def test_results_in_order(pool):
  outcomes = pool.map(math.factorial, [(k,) for k in range(20)], timeout=10)
  assert [o.value for o in outcomes] == [math.factorial(k) for k in range(20)]
  assert all(o.ok and o.status == "ok" for o in outcomes)


def test_errors_are_outcomes(pool):
  outcome = pool.run(math.sqrt, -1.0, timeout=10)
  assert outcome == Outcome("error", None, "ValueError: math domain error")
  assert not outcome.ok


def test_hang_costs_the_limit_and_the_pool_recovers(pool):
  start = time.monotonic()
  outcome = pool.run(time.sleep, 30, timeout=0.5)
  elapsed = time.monotonic() - start
  assert outcome.status == "timeout"
  assert elapsed < 0.5 + 1.0  # the limit plus killing
  # Both slots keep serving after a kill: the replacement is forked from the warm zygote.
  start = time.monotonic()
  outcomes = pool.map(math.factorial, [(5,)] * 6, timeout=20)
  assert [o.value for o in outcomes] == [120] * 6
  assert time.monotonic() - start < 1.0


def test_one_slow_task_does_not_block_the_others(pool):
  start = time.monotonic()
  outcomes = pool.map(time.sleep, [(30,), (0,), (0,), (0,)], timeout=1.0)
  assert [o.status for o in outcomes] == ["timeout", "ok", "ok", "ok"]
  assert time.monotonic() - start < 1.0 + 1.0


def test_a_hanging_sympy_call_is_killed(pool):
  start = time.monotonic()
  outcome = pool.run(sympy.factorint, 2**400 + 1, timeout=0.5)  # far beyond 0.5 s
  assert outcome.status == "timeout"
  assert time.monotonic() - start < 1.5


def test_crash_and_memory_bound():
  pool = WorkerPool(num_workers=1, memory_bytes=1 << 30)
  try:
    assert pool.run(bytearray, 2 << 30, timeout=10).error.startswith("MemoryError")
    died = pool.run(os._exit, 3, timeout=10)  # pylint: disable=protected-access
    assert died == Outcome("error", None, "worker died")
    assert pool.run(abs, -2, timeout=20).value == 2
  finally:
    pool.close()
  with pytest.raises(RuntimeError, match="closed"):
    pool.run(abs, 1, timeout=1)


def test_latency_per_task(pool):
  pool.map(abs, [(1,)] * 4, timeout=20)  # warm
  n = 200
  start = time.monotonic()
  pool.map(abs, [(k,) for k in range(n)], timeout=10)
  per_task_ms = (time.monotonic() - start) / n * 1e3
  print(f"worker round trip: {per_task_ms:.2f} ms per task")
  assert per_task_ms < 20


def test_default_pool_is_shared():
  assert default_pool() is default_pool()


def test_a_task_past_its_limit_times_out_even_when_the_parent_reads_late(pool, monkeypatch):
  # Under load the parent can be descheduled between sending a task and waiting for it;
  # the result is then waiting when it looks, though the task ran past its limit.
  import multiprocessing.connection
  from rlsvr import workers

  real_wait = multiprocessing.connection.wait

  def late_wait(conns, timeout=None):
    time.sleep(0.3)  # The parent is late: the 0.1 s task has finished by now.
    return real_wait(conns, timeout)

  monkeypatch.setattr(workers.multiprocessing.connection, "wait", late_wait)
  outcome = pool.run(time.sleep, 0.1, timeout=0.02)
  assert outcome.status == "timeout", outcome
  assert pool.run(abs, -3, timeout=5.0).value == 3  # Within its limit: a result as before.
