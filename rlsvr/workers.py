"""Killable worker processes with a wall-clock limit per task.

SymPy calls on untrusted input (`simplify`, `integrate`, a huge `evalf`),
math-verify comparisons and user reward functions can hang or exhaust memory,
often inside C code that no signal or thread can interrupt, and a signal is
no bound anyway where SIGINT is ignored (`nohup ... &`, `cmd &` in a script).
`WorkerPool` runs them in separate processes: a task that runs past its limit
is killed (SIGKILL) and reported as a timeout, so a hang costs at most the limit.

Workers are forked from a "zygote": a fresh interpreter (started with
`subprocess`, not forked from the parent, which may hold JAX threads) that
imports the preload modules once. Forking a warm zygote costs milliseconds,
so a killed worker is replaced at once even on a loaded machine, where
starting an interpreter and importing SymPy takes seconds. The zygote gets
the parent's `sys.path`, so whatever the parent imports by name it can too.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What became of one task: `status` is "ok", "error" or "timeout"."""

  status: str
  value: Any = None
  error: str = ""

  @property
  def ok(self) -> bool:
    return self.status == "ok"


_DIED = ("error", None, "worker died")


def _timed_out(timeout: float) -> tuple[str, None, str]:
  return ("timeout", None, f"no result within {timeout:g} s")


def _serve(conn: multiprocessing.connection.Connection, memory_bytes: int) -> None:
  """Worker loop (in a forked child): say ready, run (fn, args) tasks until EOF."""
  import resource  # pylint: disable=g-import-not-at-top
  if memory_bytes:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
  sys.setrecursionlimit(10_000)
  conn.send(f"ready {os.getpid()}")
  while True:
    try:
      fn, args, timeout = conn.recv()
    except (EOFError, OSError):
      return
    start = time.monotonic()
    try:
      reply = ("ok", fn(*args), "")
    except BaseException as e:  # noqa: BLE001  -- any failure of untrusted work is a result
      reply = ("error", None, f"{type(e).__name__}: {e}"[:500])
    # A task that ran past its limit is a timeout even when the parent, slowed by load,
    # reads its result before noticing the deadline: the outcome must not hang on that race.
    if time.monotonic() - start > timeout:
      reply = _timed_out(timeout)
    try:
      conn.send(reply)
    except Exception as e:  # noqa: BLE001  -- e.g. an unpicklable result
      conn.send(("error", None, f"unsendable result: {type(e).__name__}"))


def _zygote(sock_fd: int, memory_bytes: int, preload: Sequence[str],
            sys_path: Sequence[str] = ()) -> None:
  """Zygote main: take the parent's `sys_path`, import `preload`, then fork one worker per
  socket received."""
  import importlib  # pylint: disable=g-import-not-at-top
  sys.path[:] = list(dict.fromkeys(list(sys_path) + sys.path))
  for module in preload:
    importlib.import_module(module)
  signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
  sock = socket.socket(fileno=sock_fd)
  while True:
    try:
      message, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except OSError:
      return
    if not message or not fds:
      return  # the pool closed
    if os.fork() == 0:
      signal.signal(signal.SIGCHLD, signal.SIG_DFL)
      sock.close()
      try:
        _serve(multiprocessing.connection.Connection(fds[0]), memory_bytes)
      finally:
        os._exit(0)  # never run the zygote's own cleanup in a worker
    os.close(fds[0])


class _Worker:
  """One forked worker: a duplex connection, and its pid once it said ready."""

  def __init__(self, conn: multiprocessing.connection.Connection):
    self.conn, self.pid, self.ready = conn, None, False

  def kill(self) -> None:
    if self.pid is not None:
      try:
        os.kill(self.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    self.conn.close()  # a worker that is not running a task exits on EOF


class WorkerPool:
  """Persistent worker processes that run picklable functions with a wall-clock limit.

  A task costs a pickle round trip, not a process start. Its clock starts when
  a ready worker receives it. A task that runs past its limit, crashes its
  worker or exceeds the memory bound comes back as an `Outcome` with status
  "timeout" or "error", never as an exception; its worker is killed and a new
  one forked from the zygote. `memory_bytes` bounds each worker's address space
  (None: no bound).
  """

  def __init__(self, num_workers: int = 1, memory_bytes: int | None = 4 << 30,
               preload: Sequence[str] = ()):
    ours, theirs = socket.socketpair()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(
                   [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    sys_path = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    code = (f"from {__name__} import _zygote; _zygote({theirs.fileno()}, "
            f"{int(memory_bytes or 0)}, {list(preload)!r}, {sys_path!r})")
    self._zygote = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),),
                                    stdin=subprocess.DEVNULL, env=env)
    theirs.close()
    self._sock = ours
    self._workers = [self._fork() for _ in range(max(1, num_workers))]
    self._lock = threading.Lock()

  def _fork(self) -> _Worker:
    # Asynchronous: the worker says "ready <pid>" once the zygote has forked it.
    ours, theirs = socket.socketpair()
    try:
      socket.send_fds(self._sock, [b"f"], [theirs.fileno()])
    except OSError as e:
      raise RuntimeError("the worker zygote is gone; see its stderr") from e
    finally:
      theirs.close()
    return _Worker(multiprocessing.connection.Connection(ours.detach()))

  def close(self) -> None:
    for worker in self._workers:
      worker.kill()
    self._workers = []
    self._sock.close()
    self._zygote.kill()
    self._zygote.wait()

  def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Outcome:
    """`fn(*args)` in a worker, killed after `timeout` seconds."""
    return self.map(fn, [args], timeout=timeout)[0]

  def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple],
          timeout: float) -> list[Outcome]:
    """`fn(*args)` for every tuple, spread over the workers; each gets `timeout` seconds."""
    with self._lock:
      if not self._workers:
        raise RuntimeError("WorkerPool is closed")
      results: list[Outcome | None] = [None] * len(arg_tuples)
      pending = collections.deque(enumerate(arg_tuples))
      busy: dict[int, tuple[int, float]] = {}  # worker slot -> (task index, deadline)
      while pending or busy:
        for slot, worker in enumerate(self._workers):
          if worker.ready and slot not in busy and pending:
            index, args = pending.popleft()
            worker.conn.send((fn, tuple(args), timeout))
            busy[slot] = (index, time.monotonic() + timeout)
        listen = {w.conn: slot for slot, w in enumerate(self._workers)
                  if slot in busy or (pending and not w.ready)}
        next_deadline = min([d for _, d in busy.values()], default=time.monotonic() + 60)
        wait_s = next_deadline - time.monotonic()
        for conn in multiprocessing.connection.wait(list(listen), timeout=max(0.0, wait_s)):
          self._receive(listen[conn], busy, results)
        now = time.monotonic()
        for slot, (index, deadline) in list(busy.items()):
          if now >= deadline:
            results[index] = Outcome(*_timed_out(timeout))
            del busy[slot]
            self._replace(slot)
      return results  # type: ignore[return-value]

  def _receive(self, slot: int, busy: dict[int, tuple[int, float]], results: list) -> None:
    worker = self._workers[slot]
    try:
      message = worker.conn.recv()
    except (EOFError, OSError):  # the worker died: memory bound, crash
      if not worker.ready:
        raise RuntimeError("a worker failed to start; see the zygote's stderr") from None
      message = _DIED
    if isinstance(message, str) and message.startswith("ready "):
      worker.pid, worker.ready = int(message.split()[1]), True
      return
    if slot in busy:
      index, _ = busy.pop(slot)
      results[index] = Outcome(*message)
    if message == _DIED:
      self._replace(slot)

  def _replace(self, slot: int) -> None:
    self._workers[slot].kill()
    self._workers[slot] = self._fork()


_DEFAULT_POOL: WorkerPool | None = None
_DEFAULT_LOCK = threading.Lock()


def default_pool() -> WorkerPool:
  """A process-wide pool of two workers, started on first use and closed at exit.

  The workers preload the integration verifier (SymPy, latex2sympy2_extended).
  """
  global _DEFAULT_POOL
  with _DEFAULT_LOCK:
    if _DEFAULT_POOL is None:
      _DEFAULT_POOL = WorkerPool(num_workers=2, preload=("rlsvr.envs.self_judge.integration",))
      atexit.register(_DEFAULT_POOL.close)
    return _DEFAULT_POOL
