"""The import graph of `rlsvr/`: no cycles, and lower layers never import higher ones.

Read from the source (`import` / `from` statements at any depth, so a function's
lazy import counts as much as a module-level one), never by importing anything.
"""
import ast
import pathlib

import pytest

import rlsvr

ROOT = pathlib.Path(rlsvr.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for path in ROOT.rglob("*.py"):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def _import_graph() -> dict[str, set[str]]:
  """Module -> the rlsvr modules it imports (`from pkg import mod` names the module)."""
  modules = _modules()

  def resolve(name: str) -> str | None:
    while name and name not in modules:
      name = name.rpartition(".")[0]
    return name or None

  graph = {}
  for module, path in modules.items():
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        targets.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          anchor = package.rsplit(".", node.level - 1)[0]
          base = f"{anchor}.{base}" if base else anchor
        targets.update(f"{base}.{alias.name}" for alias in node.names)
    graph[module] = {m for m in map(resolve, targets) if m and m != module}
  return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def _imports_from(lower: str, higher: tuple[str, ...]) -> list[str]:
  """"a -> b" for every module a in package `lower` that imports a module b under `higher`."""
  return sorted(f"{a} -> {b}" for a, targets in _import_graph().items()
                if a == lower or a.startswith(lower + ".")
                for b in targets if any(b == h or b.startswith(h + ".") for h in higher))


def test_the_graph_sees_lazy_imports_and_packages():
  graph = _import_graph()
  assert "rlsvr.model.qwen3" in graph["rlsvr.model.decode"]
  assert "rlsvr.model.sources" in graph["rlsvr.eval.generation"]  # imported inside a function
  assert "rlsvr.sampling.layout" in graph["rlsvr.sampling"]  # a package's __init__


def test_no_import_cycles():
  assert _cycles(_import_graph()) == []


def test_rl_imports_no_environment():
  assert _imports_from("rlsvr.rl", ("rlsvr.envs",)) == []


@pytest.mark.parametrize("lower", ["rlsvr.model", "rlsvr.sampling"])
def test_model_and_sampling_import_no_higher_layer(lower):
  assert _imports_from(lower, ("rlsvr.rl", "rlsvr.envs", "rlsvr.train")) == []


def test_data_imports_no_environment_or_evaluation():
  """Datasets sit below both their readers: environments and evaluation import `rlsvr.data`."""
  assert _imports_from("rlsvr.data", ("rlsvr.envs", "rlsvr.eval", "rlsvr.rewards")) == []


def test_environments_import_no_evaluation_suite():
  """Environments read datasets from `rlsvr.data`, not through the suites that score them
  (`eval.runner`'s `mean_stderr`, a plain statistic, is still shared)."""
  assert [edge for edge in _imports_from("rlsvr.envs", ("rlsvr.eval",))
          if not edge.endswith(" -> rlsvr.eval.runner")] == []


def test_model_imports_nothing_outside_it():
  """The bottom layer: `parallel`, `sampling` and everything above build on it."""
  assert [edge for edge in _imports_from("rlsvr.model", ("rlsvr",))
          if not edge.split(" -> ")[1].startswith("rlsvr.model")] == []
