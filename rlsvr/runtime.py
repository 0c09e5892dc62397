"""Process-wide JAX settings of the main job and the tests: host devices, compile cache.

  runtime.set_host_devices()           # before JAX starts: one CPU device per core
  runtime.enable_compilation_cache()   # compiled programs kept under the cache root

"""
from __future__ import annotations

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
  sets a count; returns the count in effect. Must run before JAX's backend starts."""
  current = host_device_count()
  if current is not None:
    return current
  if _cpu_backend_started():
    raise RuntimeError("set_host_devices() must run before JAX starts its backends")
  count = count or cpu_cores()
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICE_COUNT_FLAG}={count}".strip()
  return count


def compilation_cache_dir() -> str:
  """`$RLSVR_CACHE/jax-compilation` (default `~/.cache/rlsvr/jax-compilation`)."""
  return str(assets.cache_root() / CACHE_SUBDIR)


def enable_compilation_cache(directory: str | None = None) -> str | None:
  """Turns on JAX's persistent compilation cache in `directory` (default
  `compilation_cache_dir()`), unless one is already set (e.g. by JAX_COMPILATION_CACHE_DIR)
  or RLSVR_COMPILATION_CACHE=0; returns the folder in use, or None."""
  import jax  # noqa: PLC0415

  if os.environ.get("RLSVR_COMPILATION_CACHE", "1") == "0":
    return None
  if jax.config.jax_compilation_cache_dir:
    return jax.config.jax_compilation_cache_dir
  directory = directory or compilation_cache_dir()
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
  jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
  return directory
