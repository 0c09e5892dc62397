"""How the suite asks XLA:CPU to compile: 8 host devices, -O0, XLA's older fusion
emitters and one LLVM module a program, for speed of compiling.

A cold suite is mostly XLA compiles of tiny programs. At -O0 (LLVM's optimisation
off) a tiny train step compiles in less than half the time and runs about as fast;
with the older (LLVM IR) fusion emitters instead of the MLIR ones it compiles in
less than half that again (at XLA's default level they make no difference). XLA
splits a program's LLVM IR into up to 32 modules to compile them on several threads;
a test's programs are small, and one module each spent about a tenth less CPU on a cold
part of the suite.
docs/benchmarks.md ("Test suite, cold cache") has the whole suite at each setting.
The HLO passes (fusion, layout, in-place updates) still run, so a test of a
program's structure sees what a user's run compiles.

Where a test holds float32 error to a bar measured on users' programs (parity with
transformers), it compiles with XLA's defaults instead: `AS_USERS_COMPILE`.
"""
import os

DEVICES = 8
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count="
OPT_LEVEL_FLAG = "--xla_backend_optimization_level="
EMITTERS_FLAG = "--xla_cpu_use_fusion_emitters="
SPLIT_FLAG = "--xla_cpu_parallel_codegen_split_count="
# XLA's own defaults (DebugOptions), what a user's `python -m rlsvr.train` compiles with:
# pass as `jax.jit(..., compiler_options=...)`.
AS_USERS_COMPILE = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True,
                    "xla_cpu_parallel_codegen_split_count": 32}


def flags(devices: int = DEVICES, base: str = "") -> str:
  """XLA_FLAGS for a suite process: `base`, plus the host device count, -O0, the older
  fusion emitters and one codegen module unless `base` sets them itself."""
  words = base.split()
  if not any(w.startswith(DEVICE_COUNT_FLAG) for w in words):
    words.append(f"{DEVICE_COUNT_FLAG}{devices}")
  if not any(w.startswith(OPT_LEVEL_FLAG) for w in words):
    words.append(f"{OPT_LEVEL_FLAG}0")
  if not any(w.startswith(EMITTERS_FLAG) for w in words):
    words.append(f"{EMITTERS_FLAG}false")
  if not any(w.startswith(SPLIT_FLAG) for w in words):
    words.append(f"{SPLIT_FLAG}1")
  return " ".join(words)


def child_env(devices: int, **extra: str) -> dict[str, str]:
  """This process's environment for a child the suite starts, on `devices` host devices
  (the child compiles as the suite does, so their programs share the compilation cache)."""
  base = " ".join(w for w in os.environ.get("XLA_FLAGS", "").split()
                  if not w.startswith(DEVICE_COUNT_FLAG))
  return {**os.environ, "XLA_FLAGS": flags(devices, base), **extra}
