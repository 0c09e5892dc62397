"""`python ...` commands run in a child forked from an interpreter that imported the heavy
libraries already: what a documented command costs beyond its own work.

A one-step smoke training run spends about 5.6 of its 15 s importing JAX, flax, optax,
orbax, transformers and matplotlib (docs/benchmarks.md, "Test suite, cold cache"); the
docs test starts some forty such processes. The server here imports them once per test
process, then forks one child per command, which runs the command as `python` would
(`-m MODULE`, `-c CODE` or `SCRIPT`) with its argv, folder, environment and stdout/stderr
files, and exits with its code after Python's own shutdown steps (non-daemon threads
joined, atexit handlers run).

What differs from a new interpreter: only that those libraries were imported before
`__main__` ran. No module of the repository is imported by the server (absl flags and
registries are defined by the command itself), and no JAX backend is started, so
XLA_FLAGS and the device count are read in the child. Import-time environment (JAX_*,
MPLBACKEND) is the server's: `run` refuses an environment other than the one the
server started with, and the caller runs such a command as a plain subprocess.
The same pattern serves the judge workers (rlsvr/workers.py).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time

# Imported by every trainer, eval and bench run; none of them starts a JAX backend.
PRELOAD = ("jax", "flax", "flax.linen", "optax", "orbax.checkpoint", "tensorstore",
           "transformers", "transformers.convert_slow_tokenizer", "tokenizers",
           "matplotlib.pyplot", "tensorboardX", "ml_collections.config_flags", "absl.app",
           "numpy", "yaml")


class WarmPython:
  """A server (a fresh `sys.executable`, environment `env`) that forks a child per `run`."""

  def __init__(self, env: dict[str, str]):
    self.env = dict(env)
    here = os.path.dirname(os.path.abspath(__file__))
    start = f"import sys; sys.path[0] = {here!r}; import warm_python; sys.path.pop(0); " \
            "warm_python.serve()"  # so the commands cannot import the suite's modules
    self._proc = subprocess.Popen([sys.executable, "-c", start], env=self.env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1)
    self._pending = b""  # read from the server's stdout, not yet a whole reply
    self._read(None)  # "ready": the libraries are imported

  def _read(self, deadline: float | None) -> dict | None:
    """The server's next reply, or None when `deadline` (time.monotonic) passes first.

    Lines are split here, from the raw pipe: a buffered readline may take the next
    reply too (a fast command's pid and exit code arrive together), and a select on
    the pipe would then wait for a reply that was already read."""
    fd = self._proc.stdout.fileno()
    while b"\n" not in self._pending:
      timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
      if not select.select([fd], [], [], timeout)[0]:
        return None
      chunk = os.read(fd, 1 << 16)
      if not chunk:
        raise RuntimeError(f"the warm interpreter exited ({self._proc.wait()})")
      self._pending += chunk
    line, _, self._pending = self._pending.partition(b"\n")
    return json.loads(line)

  @staticmethod
  def runs(args: list[str]) -> bool:
    """Whether `python *args` is a form the child runs: `-m`, `-c` or a script, no options
    before them (`-u`, `-X ...`: the server started without them)."""
    return bool(args) and (args[0] in ("-m", "-c") or not args[0].startswith("-"))

  def run(self, args: list[str], cwd: str, env: dict[str, str], timeout: float, out_dir: str
          ) -> subprocess.CompletedProcess:
    """`python *args` in `cwd`, as subprocess.run(capture_output=True, text=True) returns it
    (its output passes through files in `out_dir`); subprocess.TimeoutExpired after
    `timeout` s, its process group killed."""
    if env != self.env:
      raise ValueError("the command's environment is not the warm interpreter's")
    if not self.runs(args):
      raise ValueError(f"interpreter options are not the warm interpreter's: {args[:1]}")
    out, err = os.path.join(out_dir, "stdout"), os.path.join(out_dir, "stderr")
    self._proc.stdin.write(json.dumps({"args": args, "cwd": cwd, "out": out, "err": err}) + "\n")
    deadline = time.monotonic() + timeout
    pid = self._read(None)["pid"]
    reply = self._read(deadline)
    if reply is None:
      try:
        os.killpg(pid, signal.SIGKILL)
      except ProcessLookupError:  # before it made its own group, or just after it exited
        with contextlib.suppress(ProcessLookupError):
          os.kill(pid, signal.SIGKILL)
      self._read(None)
      raise subprocess.TimeoutExpired(["python", *args], timeout)
    with open(out, encoding="utf-8", errors="replace") as f_out, \
        open(err, encoding="utf-8", errors="replace") as f_err:
      stdout, stderr = f_out.read(), f_err.read()
    return subprocess.CompletedProcess(["python", *args], reply["returncode"], stdout, stderr)

  def close(self) -> None:
    self._proc.stdin.close()
    self._proc.wait()


# ------------------------------------------------------------------ the server's side


def serve() -> None:
  import importlib  # noqa: PLC0415
  for module in PRELOAD:
    importlib.import_module(module)
  base_path = list(sys.path)
  print(json.dumps({"ready": True}), flush=True)
  for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
      _child(request, base_path)  # never returns
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


def _child(request: dict, base_path: list[str]) -> None:
  """Runs `python *args` in this forked process, then exits with its code."""
  import atexit  # noqa: PLC0415
  import runpy  # noqa: PLC0415
  import threading  # noqa: PLC0415
  import traceback  # noqa: PLC0415

  os.setpgid(0, 0)  # a timeout kills what the command started too
  os.chdir(request["cwd"])
  for fd, path in ((1, request["out"]), (2, request["err"])):
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
  os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
  args, code = request["args"], 0
  sys.orig_argv = [sys.executable, *args]  # what a restart (rlsvr.runtime) runs again
  try:
    if args[0] == "-m":
      sys.argv, sys.path[:] = ["-m", *args[2:]], [os.getcwd(), *base_path]
      runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
      sys.argv, sys.path[:] = ["-c", *args[2:]], ["", *base_path]
      exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
    else:
      sys.argv = list(args)
      sys.path[:] = [os.path.dirname(os.path.abspath(args[0])), *base_path]
      runpy.run_path(args[0], run_name="__main__")
  except SystemExit as e:
    if isinstance(e.code, int) or e.code is None:
      code = e.code or 0
    else:
      print(e.code, file=sys.stderr)
      code = 1
  except BaseException:  # noqa: BLE001  -- as the interpreter reports an uncaught error
    traceback.print_exc()
    code = 1
  finally:
    # Python's own exit: wait for non-daemon threads (a checkpoint writer), then atexit.
    for thread in threading.enumerate():
      if thread is not threading.main_thread() and not thread.daemon:
        thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never the server's own cleanup
