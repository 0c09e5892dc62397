"""Process-wide settings of the main job and the tests: malloc, host devices, compile cache.

  runtime.exec_with_huge_pages()       # first thing: malloc's big buffers on 2 MiB pages
  runtime.set_host_devices()           # before JAX starts: one CPU device per core
  runtime.enable_compilation_cache()   # compiled programs kept under the cache root

"""
from __future__ import annotations

import json
import os
import re
import sys

from rlsvr.model import assets

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
CACHE_SUBDIR = "jax-compilation"
# Programs that compile faster than this are not worth a file (JAX's default is 1 s; the
# tests' many sub-second compiles add up, and reading an entry takes milliseconds).
MIN_COMPILE_SECONDS = 0.5
MAX_CACHE_BYTES = 8 * 2**30  # Least recently used entries are deleted beyond this.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb"


def cpu_cores() -> int:
  """Cores this process may run on (its affinity mask, not the machine's count)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # macOS
    return os.cpu_count() or 1


def host_device_count() -> int | None:
  """The host device count that XLA_FLAGS asks for, or None when it does not say."""
  match = re.search(_DEVICE_COUNT_FLAG + r"=(\d+)", os.environ.get("XLA_FLAGS", ""))
  return int(match.group(1)) if match else None


def _cpu_backend_started() -> bool:
  if "jax" not in sys.modules:
    return False
  from jax._src import xla_bridge  # noqa: PLC0415
  return bool(xla_bridge._backends)  # noqa: SLF001  (no public "has the backend started")


def set_host_devices(count: int | None = None) -> int:
  """Asks XLA:CPU for `count` devices (default: one per core) unless XLA_FLAGS already
  sets a count; returns the count in effect. Must run before JAX's backend starts.

  Through JAX's config, not XLA_FLAGS: the environment is what child processes inherit,
  and a child JAX (a user's subprocess, a worker) must not get this process's devices."""
  current = host_device_count()
  if current is not None:
    return current
  import jax  # noqa: PLC0415

  if jax.config.jax_num_cpu_devices > 0:
    return jax.config.jax_num_cpu_devices
  if _cpu_backend_started():
    raise RuntimeError("set_host_devices() must run before JAX starts its backends")
  count = count or cpu_cores()
  jax.config.update("jax_num_cpu_devices", count)
  return count


def huge_pages_env(environ=os.environ) -> dict[str, str] | None:
  """`environ` with glibc's malloc asking for transparent huge pages, or None when it
  already does, when RLSVR_HUGE_PAGES=0, or off Linux (see `exec_with_huge_pages`)."""
  tunables = environ.get("GLIBC_TUNABLES", "")
  if (not sys.platform.startswith("linux") or environ.get("RLSVR_HUGE_PAGES", "1") == "0"
      or HUGE_PAGES_TUNABLE + "=" in tunables):
    return None
  return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables,
                                                              HUGE_PAGES_TUNABLE + "=1")))}


_ORIGINAL_TUNABLES = "_RLSVR_GLIBC_TUNABLES_BEFORE_RESTART"  # JSON: the value, or null.
_restarted = False


def exec_with_huge_pages() -> None:
  """Restarts this process (same pid and command line) with `GLIBC_TUNABLES` asking
  malloc for transparent huge pages, unless it already does; glibc reads tunables only
  at start-up. Call it first, before any work. RLSVR_HUGE_PAGES=0 turns it off.

  XLA:CPU allocates a program's large buffers afresh on every run, and glibc maps each
  from the kernel, so every step faults in each 4 KiB page again; on 2 MiB pages an
  update faults far less and runs faster (bench/train_step.py). Harmless where the
  kernel offers no huge pages or the C library is not glibc (the variable is then ignored).

  The restarted process puts `GLIBC_TUNABLES` back as it was, so that its children (a
  user's subprocess, reward workers) start as they would have. Under a debugger or tracer
  (`python -m pdb`, coverage) it does not restart: a restart would lose the breakpoints.
  """
  global _restarted
  if _ORIGINAL_TUNABLES in os.environ:  # This is the restarted process.
    original = json.loads(os.environ.pop(_ORIGINAL_TUNABLES))
    if original is None:
      os.environ.pop("GLIBC_TUNABLES", None)
    else:
      os.environ["GLIBC_TUNABLES"] = original
    _restarted = True
    return
  env = huge_pages_env()
  # (Not `"pdb" in sys.modules`: absl.app imports pdb for its --pdb_post_mortem flag.)
  if env is None or _restarted or sys.gettrace() is not None:
    return
  env[_ORIGINAL_TUNABLES] = json.dumps(os.environ.get("GLIBC_TUNABLES"))
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def compilation_cache_dir() -> str:
  """`$RLSVR_CACHE/jax-compilation` (default `~/.cache/rlsvr/jax-compilation`)."""
  return str(assets.cache_root() / CACHE_SUBDIR)


def enable_compilation_cache(directory: str | None = None) -> str | None:
  """Turns on JAX's persistent compilation cache in `directory` (default
  `compilation_cache_dir()`), unless one is already set (e.g. by JAX_COMPILATION_CACHE_DIR)
  or RLSVR_COMPILATION_CACHE=0; returns the folder in use, or None. Programs compiled in
  under `MIN_COMPILE_SECONDS` are not kept unless JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS
  says otherwise."""
  import jax  # noqa: PLC0415

  if os.environ.get("RLSVR_COMPILATION_CACHE", "1") == "0":
    return None
  if jax.config.jax_compilation_cache_dir:
    return jax.config.jax_compilation_cache_dir
  directory = directory or compilation_cache_dir()
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
  if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # The user's, if set.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
  jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
  return directory


# XLA:CPU hands float32 dots to YNNPACK by default. Its kernels round a dot's sum
# 1.15-1.4x more than Eigen's (or PyTorch's MKL), and a 30-layer forward compounds that
# past transformers' own float32 error. On the update's matmuls Eigen's are as fast or
# faster; on decode-sized ones YNNPACK's are faster (docs/benchmarks.md, "float32
# accuracy"). So the programs that run whole sequences (the update and its no-gradient
# passes) compile without YNNPACK; the sampler keeps it.
FULL_SEQUENCE_CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def jit_full_sequence(fn, *, compiler_options=None, **jit_kwargs):
  """`jax.jit(fn, **jit_kwargs)`, compiled with `FULL_SEQUENCE_CPU_OPTIONS` (and
  `compiler_options`) when the default backend is the CPU. The backend is read at the
  first call, not here, so that `set_host_devices` can still run before JAX starts."""
  import functools  # noqa: PLC0415

  import jax  # noqa: PLC0415

  jitted = {}

  def for_backend():
    backend = jax.default_backend()
    if backend not in jitted:
      options = {**(FULL_SEQUENCE_CPU_OPTIONS if backend == "cpu" else {}),
                 **(compiler_options or {})}
      jitted[backend] = jax.jit(fn, compiler_options=options or None, **jit_kwargs)
    return jitted[backend]

  @functools.wraps(fn)
  def call(*args, **kwargs):
    return for_backend()(*args, **kwargs)

  call.lower = lambda *args, **kwargs: for_backend().lower(*args, **kwargs)
  # Programs compiled so far (tests count compiles with it, as with a jitted function).
  call._cache_size = lambda: sum(j._cache_size() for j in jitted.values())  # noqa: SLF001
  return call


def peak_device_bytes() -> int | None:
  """The first local device's peak allocated bytes since the process started, where the
  backend keeps them (GPU, TPU); None on the CPU, which keeps no such statistics."""
  import jax  # noqa: PLC0415

  return (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
