"""Shared helpers for the evaluation tests: shared-data paths, smoke configs, tiny data files."""
import json
import pathlib

import pytest

from rlsvr.data import sources


def shared_path(relative: str) -> pathlib.Path:
  """A file under the shared data folder; skips the test when it is absent."""
  path = sources.shared_data_dir() / relative
  if not path.exists():
    pytest.skip(f"shared data not available: {path} is absent (expected at ../shared/data "
                f"relative to the repository, or ${sources.ENV_VAR})")
  return path


def write_jsonl(path: pathlib.Path, rows) -> str:
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                  encoding="utf-8")
  return str(path)


def smoke(config_module: str, workdir: pathlib.Path, **data_files):
  """The `smoke` variant of an eval config, reading `data_files` (dataset -> local path)."""
  import importlib

  c = importlib.import_module(f"configs.{config_module}").get_config("smoke")
  c.datasets = ",".join(data_files)
  for name, path in data_files.items():
    c.data[name] = path
  c.workdir = str(workdir)
  return c


@pytest.fixture(scope="session")
def pool():
  from rlsvr import workers

  pool = workers.WorkerPool(num_workers=2, preload=("math_verify", "rlsvr.eval.math_suites"))
  yield pool
  pool.close()
