"""Shared fixtures: one SymPy worker pool for the whole directory, the shared data root."""
import pathlib
import subprocess
import sys

import pytest

from rlsvr import workers

# ../shared/data relative to the repository root.
SHARED_DATA = pathlib.Path(__file__).resolve().parents[3].parent / "shared" / "data"


@pytest.fixture(scope="session")
def pool():
  pool = workers.WorkerPool(num_workers=2, preload=("rlsvr.envs.self_judge.integration",))
  yield pool
  pool.close()


def shared_path(*parts: str) -> pathlib.Path:
  """A path under the shared data directory; skips the test when it is absent."""
  path = SHARED_DATA.joinpath(*parts)
  if not path.exists():
    pytest.skip(f"shared data not available: {path} is absent (expected at ../shared/data "
                "relative to the repository)")
  return path


def assert_payload_is_live(template: str, control: pathlib.Path) -> None:
  """Runs `template` (with `{marker}`) as Python in a subprocess: proves that the payload,
  if it were ever executed, would create its marker file."""
  code = template.replace("{marker}", str(control))
  subprocess.run([sys.executable, "-c", code], check=False,
                 capture_output=True, timeout=30)
  assert control.exists(), "the control payload should have created its file"
