"""The notebooks in notebooks/: committed without outputs, and each runs headless without error.

The kernel is this interpreter (the venv's python): a kernel spec pointing at
`sys.executable` is written into a temporary directory, so the tests need no
Jupyter installation or registered kernel, only `.venv`.
"""
import pathlib

import nbformat
import pytest
from ipykernel import kernelspec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {"spy_reward_ablations.ipynb", "rlsr_judge_ablations.ipynb"}
KERNEL_NAME = "rlsvr-test-python"
# Each notebook runs in seconds; the limit only stops a hung cell from hanging the suite.
CELL_TIMEOUT_S = 120


def _ids(paths):
  return [p.stem for p in paths]


def test_expected_notebooks_exist():
  assert EXPECTED <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  nbformat.validate(nb)
  for i, cell in enumerate(nb.cells):
    if cell.cell_type == "code":
      assert cell.outputs == [], f"cell {i} has outputs: strip them before committing"
      assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_uses_package_functions(path):
  # The notebooks must call the package, not carry copies of its logic.
  source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
  assert "from rlsvr" in source


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory) -> KernelSpecManager:
  """Finds only a kernel spec that runs this interpreter, written to a temp dir."""
  kernels = tmp_path_factory.mktemp("kernels")
  kernelspec.write_kernel_spec(path=kernels / KERNEL_NAME,
                               overrides={"display_name": "rlsvr test kernel"})
  return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_executes_without_error(path, kernel_specs):
  nb = nbformat.read(path, as_version=4)
  km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_specs)
  client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S,
                          resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
  client.execute()  # raises CellExecutionError on the first failing cell
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  num_plots = sum("image/png" in o.get("data", {}) for o in outputs)
  num_plot_cells = sum("plt.show()" in c.source for c in nb.cells)
  assert num_plot_cells and num_plots >= num_plot_cells, "a plot did not render"
