"""`rlsvr.runtime`: host devices before JAX starts, and the persistent compilation cache.

Each case runs in a fresh interpreter: both settings act when JAX starts.
"""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, *argv: str, **env) -> dict:
  base = {k: v for k, v in os.environ.items()
          if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR", "RLSVR_COMPILATION_CACHE",
                       "GLIBC_TUNABLES", "RLSVR_HUGE_PAGES")}
  out = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, text=True,
                       capture_output=True,
                       env={**base, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", **env},
                       timeout=120)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_host_devices_default_to_one_per_core_and_yield_to_xla_flags():
  code = """
import json
from rlsvr import runtime
n = runtime.set_host_devices()
import jax, os, subprocess, sys
child = subprocess.run([sys.executable, "-c", "import jax; print(jax.device_count())"],
                       capture_output=True, text=True, check=True).stdout.split()[-1]
print(json.dumps({"set": n, "devices": jax.device_count(), "cores": runtime.cpu_cores(),
                  "child": int(child), "XLA_FLAGS": os.environ.get("XLA_FLAGS")}))
"""
  got = _python(code)
  assert got["set"] == got["devices"] == got["cores"]
  # A child JAX starts as it would have: this process's devices are not in its environment.
  assert got["child"] == 1 and got["XLA_FLAGS"] is None
  got = _python(code, XLA_FLAGS="--xla_force_host_platform_device_count=3")
  assert got["set"] == got["devices"] == 3


def test_host_devices_cannot_change_once_jax_has_started():
  code = """
import json, jax
jax.devices()
from rlsvr import runtime
try:
  runtime.set_host_devices(4)
  print(json.dumps("no error"))
except RuntimeError as e:
  print(json.dumps(str(e)))
"""
  assert "before JAX starts" in _python(code)


COMPILE = """
import json, jax, jax.numpy as jnp
from jax._src import monitoring
from rlsvr import runtime
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
folder = runtime.enable_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # Keep even this small one.
def f(x):
  return jnp.sin(x) @ x + jnp.cos(x).T
jax.jit(f)(jnp.ones((32, 32))).block_until_ready()
print(json.dumps({"folder": folder, "hits": len(hits)}))
"""


def test_a_second_process_reads_its_programs_from_the_cache(tmp_path):
  env = {"RLSVR_CACHE": str(tmp_path)}
  first = _python(COMPILE, **env)
  assert first == {"folder": str(tmp_path / "jax-compilation"), "hits": 0}
  assert any(name.startswith("jit_f") for name in os.listdir(first["folder"]))
  assert _python(COMPILE, **env)["hits"] >= 1


@pytest.mark.parametrize("env,expected", [
    ({"RLSVR_COMPILATION_CACHE": "0"}, None),  # Off.
    ({"JAX_COMPILATION_CACHE_DIR": "{tmp}/own"}, "{tmp}/own"),  # A folder set before is kept.
])
def test_the_cache_can_be_turned_off_or_pointed_elsewhere(tmp_path, env, expected):
  env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
  got = _python(COMPILE, RLSVR_CACHE=str(tmp_path / "default"), **env)
  assert got["folder"] == (expected.format(tmp=tmp_path) if expected else None)
  assert not os.path.exists(tmp_path / "default" / "jax-compilation")


MIN_TIME = """
import json, jax
from rlsvr import runtime
runtime.enable_compilation_cache()
print(json.dumps(jax.config.jax_persistent_cache_min_compile_time_secs))
"""


def test_the_minimum_compile_time_is_ours_unless_jax_s_variable_sets_it(tmp_path, monkeypatch):
  """The tests set JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 for their subprocesses."""
  from rlsvr import runtime

  monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
  assert _python(MIN_TIME, RLSVR_CACHE=str(tmp_path)) == runtime.MIN_COMPILE_SECONDS
  assert _python(MIN_TIME, RLSVR_CACHE=str(tmp_path),
                 JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0") == 0


HUGE_PAGES = """
import ctypes, json, os, resource, subprocess, sys
from rlsvr import runtime
with open(sys.argv[1], "a") as f:
  f.write(f"{os.getpid()}\\n")  # One line per start of this process.
if len(sys.argv) > 2:  # As under a debugger or a coverage tool.
  sys.settrace(lambda *args: None)
runtime.exec_with_huge_pages()
sys.settrace(None)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
# Plain malloc, as XLA's buffers are (numpy asks the kernel for huge pages by itself).
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
ctypes.memset(libc.malloc(2**28), 1, 2**28)  # 256 MiB, each page touched once.
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
with open(sys.argv[1]) as f:
  starts = f.read().split()
with open("/proc/self/environ", "rb") as f:  # What this process started with (glibc may
  started = f.read()                          # rewrite the tunables in place: search it).
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('GLIBC_TUNABLES'))"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(json.dumps({"starts": starts, "pid": os.getpid(), "faults": faults,
                  "on_huge_pages": b"glibc.malloc.hugetlb=1" in started,
                  "tunables": os.environ.get("GLIBC_TUNABLES"), "child": child}))
"""


def _huge_pages_run(tmp_path, *argv, **env) -> dict:
  return _python(HUGE_PAGES, str(tmp_path / f"starts{len(list(tmp_path.iterdir()))}"), *argv,
                 **env)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables are Linux's")
def test_the_process_restarts_once_with_malloc_on_huge_pages(tmp_path):
  got = _huge_pages_run(tmp_path)
  # Restarted in place: the same pid twice, then never again (the tunable is set), with
  # the environment of its children as before the restart.
  assert got["starts"] == [str(got["pid"])] * 2
  assert got["on_huge_pages"] and got["tunables"] is None and got["child"] == "None"
  kept = _huge_pages_run(tmp_path, GLIBC_TUNABLES="glibc.malloc.arena_max=2")
  assert kept["on_huge_pages"] and kept["starts"] == [str(kept["pid"])] * 2
  assert kept["tunables"] == kept["child"] == "glibc.malloc.arena_max=2"
  for env in ({"RLSVR_HUGE_PAGES": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}):
    got = _huge_pages_run(tmp_path, **env)
    assert len(got["starts"]) == 1 and got["tunables"] == env.get("GLIBC_TUNABLES"), env
  traced = _huge_pages_run(tmp_path, "traced")  # A restart would lose pdb's breakpoints.
  assert len(traced["starts"]) == 1 and not traced["on_huge_pages"]


def _transparent_huge_pages() -> str:
  try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="utf-8") as f:
      return f.read()
  except OSError:
    return ""


@pytest.mark.skipif("[never]" in _transparent_huge_pages() or not _transparent_huge_pages(),
                    reason="this kernel offers no transparent huge pages")
def test_malloc_on_huge_pages_faults_far_fewer_pages(tmp_path):
  pages = 2**28 // 4096  # The 256 MiB buffer in 4 KiB pages.
  huge = _huge_pages_run(tmp_path)["faults"]
  # About 130 faults on a quiet machine; where free memory is fragmented the kernel backs
  # part of the buffer with small pages (8816 faults, after three suites ran side by side).
  assert huge < pages / 4, huge
  if "[madvise]" in _transparent_huge_pages():  # Then malloc's own pages are small without it.
    small = _huge_pages_run(tmp_path, RLSVR_HUGE_PAGES="0")["faults"]
    assert small > pages / 2, small


def test_full_sequence_programs_compile_dots_without_ynnpack_and_round_no_worse():
  """`jit_full_sequence` compiles the update's dots without XLA:CPU's default YNNPACK
  kernels, whose float32 rounding error measured 1.15-1.26x Eigen's (the kernel used
  instead) on the update's matmul shapes, SmolLM2-135M's projections over a 157-token
  batch (docs/benchmarks.md, "float32 accuracy"). A ratio to PyTorch's error is no bar:
  MKL's own error moves by 20% between its AVX2 and AVX-512 kernels."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from rlsvr import runtime

  dot = runtime.jit_full_sequence(jnp.dot)
  rng = np.random.default_rng(0)
  for m, k, n in ((157, 576, 1536), (157, 1536, 576), (157, 576, 49152)):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    assert "__ynn_fusion" not in dot.lower(a, b).compile().as_text()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rms = lambda x: float(np.sqrt(np.mean((np.asarray(x, np.float64) - exact) ** 2)))
    ours, default = rms(dot(a, b)), rms(jax.jit(jnp.dot)(a, b))
    assert ours <= default, ((m, k, n), ours, default)
