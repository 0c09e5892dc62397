"""Every key a smoke run logs is in docs/metrics.md.

The glossary's entries are the backticked names in the first cell of each table row
of its `## metrics.jsonl` and `## heldout.jsonl` sections. A name with `<placeholder>`
stands for one key per value: PLACEHOLDERS says which values each placeholder takes
(a placeholder not listed there fails the test). A held-out key `k/se` is the
standard error of `k` and is documented with it.

The runs: the spy_summ smoke run the suite shares (`smoke_run`, 2 steps: both phases),
and one step of rlsr_countdown.py:smoke and rlvr_math.py:smoke.
"""
import importlib
import os
import re

import pytest

from rlsvr import heldout, metrics, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLOSSARY = os.path.join(REPO, "docs", "metrics.md")

# What each `<placeholder>` of the glossary matches, as a regex of one key segment.
PLACEHOLDERS = {
    "role": "spy|civilian|detector",  # spy/baseline/<role>, ...
    "name": "[^/]+",  # rewards/<name>/mean: a reward function's name
    "rule": "mask_chars|least_recall|most_unsupported|missed_consensus|best_per_game"
            "|best_per_game_chance",  # ceiling/<rule>
}


def glossary(section: str, text: str | None = None) -> list[str]:
  """The names documented in the `## <section>` part of docs/metrics.md."""
  if text is None:
    text = open(GLOSSARY, encoding="utf-8").read()
  parts = re.split(r"^## ", text, flags=re.MULTILINE)
  (body,) = [p for p in parts if p.startswith(section)]
  names = []
  for line in body.splitlines():
    cells = line.split("|")
    if line.startswith("| `") and len(cells) > 2:
      names += re.findall(r"`([^`]+)`", cells[1])
  return names


def matcher(names: list[str]) -> re.Pattern:
  """One regex matching every key the documented names stand for."""
  alternatives = []
  for name in names:
    pieces = re.split(r"<([^<>]+)>", name)
    regex = ""
    for k, piece in enumerate(pieces):
      if k % 2 == 0:
        regex += re.escape(piece)
      else:
        assert piece in PLACEHOLDERS, f"docs/metrics.md: {name}: unknown placeholder <{piece}>"
        regex += f"(?:{PLACEHOLDERS[piece]})"
    alternatives.append(regex)
  return re.compile("|".join(f"(?:{a})" for a in alternatives))


def undocumented(keys, names: list[str]) -> list[str]:
  pattern = matcher(names)
  return sorted(k for k in keys if not pattern.fullmatch(k))


def smoke_workdir(config: str, request, tmp_path) -> str:
  if config == "spy_summ":
    return request.getfixturevalue("smoke_run")
  c = importlib.import_module(f"configs.{config}").get_config("smoke")
  c.steps = 1
  workdir = str(tmp_path / config)
  train.train(c, workdir)
  return workdir


@pytest.mark.parametrize("config", ["spy_summ", "rlsr_countdown", "rlvr_math"])
def test_every_logged_metric_is_in_the_glossary(config, request, tmp_path):
  workdir = smoke_workdir(config, request, tmp_path)
  records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert records
  keys = set().union(*records)
  assert "actor/pg_loss" in keys and "reward/mean" in keys
  assert undocumented(keys, glossary("metrics.jsonl")) == []
  held = {k.removesuffix(heldout.SE) for r in heldout.read(workdir) for k in r}
  assert undocumented(held, glossary("heldout.jsonl")) == []


def test_the_matching_is_exact():
  text = ("## metrics.jsonl\n\n| metric | meaning |\n| --- | --- |\n"
          "| `a/b`, `spy/baseline/<role>` | x |\n| `rewards/<name>/mean` | y |\n"
          "## heldout.jsonl\n\n| `c` | z |\n")
  names = glossary("metrics.jsonl", text)
  assert names == ["a/b", "spy/baseline/<role>", "rewards/<name>/mean"]
  assert undocumented({"a/b", "spy/baseline/detector", "rewards/my_fn/mean"}, names) == []
  assert undocumented({"a/bc", "spy/baseline/judge", "rewards/a/b/mean", "c"}, names) == [
      "a/bc", "c", "rewards/a/b/mean", "spy/baseline/judge"]
  with pytest.raises(AssertionError, match="unknown placeholder <x>"):
    matcher(["k/<x>"])
