"""Every command in the ```bash blocks of README.md and docs/*.md, run in its smoke form.

The blocks are read when the tests are collected, so a command a page gains is
tested without touching this file, and one no rule below knows FAILS (its test id
says where it is): a documented command cannot go untested by accident.

How a command is read: lines ending in `\\` continue on the next, `#` starts a
comment (shell rules, quotes respected), blank lines are skipped, and leading
`VAR=value` words become the command's environment, as in a shell. Pipes, `&&`,
`;` and redirections are refused: such a command needs a rule of its own.

How each one runs, as a user of a fresh clone without `../shared` and offline
would run it: from the repository root of a temporary copy of the working tree
(tracked and untracked, not ignored, files, committed to a new git repository
there; `.venv` linked in; one hard-linked copy per chain, below), so `runs/`,
`exported/` and the like land in the copy and `../shared` next to it does not
exist; with `RLSVR_DATA` an empty folder (the only other way to the shared data,
`rlsvr.data.sources.shared_data_dir`), `HF_*_OFFLINE=1`, `JAX_PLATFORMS=cpu`,
the suite's 8 host devices (so the suite's compiled programs are shared), and
`PYTHONPATH` the folder holding the docs' example files (`my_rewards.py`,
`my_loss.py`, ...: `readme_examples()` of tests/test_readme_examples.py), where
the README tells the user to put them.
`python` / `python3` is this test's interpreter (the user's activated `.venv`);
`.venv/bin/python` stays as written (it must exist in the copy). Such a command runs in
a child forked from a warm interpreter that imported JAX, transformers, orbax and
matplotlib once per test process (tests/warm_python.py: a third of a smoke run's time;
its tests hold argv, sys.path, exit codes and shutdown to a new interpreter's), unless
the command sets variables of its own (libraries read some on import): then in a new one.

The smoke form, rule by rule (first match wins; RULES in tests/doc_commands.py):

- `bash scripts/train.sh`, `bash scripts/test.sh`, `python -m pytest`: not run.
  Both scripts first run scripts/setup.sh (builds `.venv`, fetches models), then
  the 16-22-minute main job or the whole suite, which holds this test; CI runs
  `bash scripts/test.sh` itself, and the main job's trainer command is the
  train rule's `spy_summ.py` form. They show up as skipped tests with this reason.
- `python -m rlsvr.train --config=FILE[:variants] ...`: the variants lose `cpu` and
  `cpu_long` and gain `smoke` (the tiny random model; `smoke` applied after a CPU
  variant would keep its sizes, e.g. 8 held-out games) and `--config.steps=1`
  replaces any given, except in a command that already names `smoke`: it is its
  own smoke form, and a later command may read its step N. A relative
  `--workdir` stays (it lands in the clone), a remote or absolute one goes to tmp.
  Every other flag stays, so overrides, plug-ins and reward functions are loaded
  and used.
- `python -m rlsvr.eval --config=FILE[:variants] ...`: the same config rule, a tmp
  `--workdir`.
- `python -m rlsvr.plan ...`, `python -c CODE`: as written.
- `python -m rlsvr.export --checkpoint runs/NAME --out DIR ...`: as written; it
  must write `DIR/config.json` (with `--adapter`, PEFT's `DIR/adapter_config.json`). When no earlier command of its page trains
  `runs/NAME`, a smoke run trains it first: the config is the longest
  `configs/<stem>.py` whose stem starts NAME (`runs/spy_summ_cpu` ->
  `configs/spy_summ.py:smoke`, one step).
- `bash launch/<script>.sh ...`: with `--dry-run` added first (it prints the
  setup, the job and the trainer command and runs none: these need GPUs, Slurm
  or a TPU pod); the printed trainer command must name the documented config.
- `python bench/<script>.py ...`: scripts listed in BENCH only, each with the
  flags that size it set to smoke values (added where the command leaves them to the
  script's full-size defaults: one seed, one step, two held-out games) or dropped, or
  its own smoke flag added (`--smoke`) (BENCH says which; a dropped `--set` leaves the
  smoke config's value, whose programs the suite has compiled already: read from the
  compilation cache, not compiled again), the `--config` rule above (on the script's
  default config when the command names none), and the flags naming what it writes
  (`--workdir`, `--json`) into tmp. A bench script not in BENCH fails.
- Anything else fails with "no smoke-form rule".

Chains: a command that names a relative path an earlier command of its page
writes (a train's `--workdir`, an export's `--out`) runs after it, in the same
clone: a resumed run, an export of that run, a `python -c` loading the export.
Each command is still its own test id (`<page>:<line>`); a chain runs once per
xdist worker, its commands in page order, and a test reports its own command.

Commands whose smoke forms are the same (recipes that differ only in seeds or steps)
and that belong to no chain run once per xdist worker; each keeps its own test id.

Time: each command is a fresh process (python, jax and transformers start, then
compiles, most from the persistent compilation cache the suite shares), so the
file costs roughly 10-40 s of CPU per training-like command.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from tests.doc_commands import (REPO, TMP, DocCommand, commands_in, plan_all, plan_page,
                                run_planned, smoke_form, split)
from tests.test_readme_examples import readme_examples


@pytest.fixture(scope="module")
def user_clone(tmp_path_factory):
  """(template clone, environment): a fresh clone as the module docstring describes."""
  root = tmp_path_factory.mktemp("docs_commands")
  clone = root / "clone"
  files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
  for rel in filter(None, files):
    src = os.path.join(REPO, rel)
    if os.path.isfile(src):  # a file deleted in the work tree is still listed by --cached
      os.makedirs(os.path.dirname(clone / rel), exist_ok=True)
      shutil.copy2(src, clone / rel)
  # A clone has a HEAD: launch/tpu_pod.sh ships `git archive HEAD`, even its dry run names it.
  git = ["git", "-c", "user.name=docs test", "-c", "user.email=docs@test", "-c",
         "commit.gpgsign=false"]
  for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the working tree"]):
    subprocess.run(git + args, cwd=clone, check=True, capture_output=True)
  os.symlink(os.path.join(REPO, ".venv"), clone / ".venv")  # after the commit: not in it
  user = root / "user_project"  # The docs' example files, on PYTHONPATH.
  user.mkdir()
  for name, code in readme_examples().items():
    (user / name).write_text(code)
  (root / "empty_data").mkdir()
  # XLA_FLAGS stays the suite's (8 host devices, -O0: tests/xla.py): the commands'
  # programs are then those the suite's own smoke runs compiled, read back from the
  # persistent compilation cache instead of compiled again in every subprocess.
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTEST_", "COV_")) and k != "PYTHONPATH"}
  env.update(RLSVR_DATA=str(root / "empty_data"), PYTHONPATH=str(user), JAX_PLATFORMS="cpu",
             HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
             TOKENIZERS_PARALLELISM="false")
  assert not (clone.parent / "shared").exists()
  return str(clone), env


PLANNED = plan_all()


def test_docs_have_commands_and_the_readme_its_own():
  pages = {p.command.page for p in PLANNED}
  assert "README.md" in pages
  assert any("rlsvr.train" in p.command.text for p in PLANNED if p.command.page == "README.md")


@pytest.mark.parametrize("planned", PLANNED, ids=[p.command.id for p in PLANNED])
def test_documented_command_runs_in_its_smoke_form(planned, user_clone, tmp_path_factory):
  if planned.error:
    pytest.fail(f"{planned.command.id}: {planned.command.text}\n{planned.error}", pytrace=False)
  if planned.smoke.argv is None:
    pytest.skip(f"not run: {planned.smoke.skip}")
  tmp_root = str(tmp_path_factory.getbasetemp() / "docs_commands_runs")
  os.makedirs(tmp_root, exist_ok=True)
  why = run_planned(planned, PLANNED, user_clone, tmp_root)
  if why:
    pytest.fail(f"{planned.command.id}: {planned.command.text}\n{why}", pytrace=False)


# ------------------------------------------------------------------ the rules themselves


def test_commands_are_read_with_continuations_and_comments():
  page = ("text\n```bash\n# only a comment\nA=1 python -m rlsvr.plan --config=x.py \\\n"
          "    --devices=8   # a comment\n\nbash scripts/test.sh\n```\n```python\nx = 1\n```\n")
  cmds = commands_in("p.md", page)
  assert [(c.line, c.text) for c in cmds] == [
      (4, "A=1 python -m rlsvr.plan --config=x.py      --devices=8   # a comment"),
      (7, "bash scripts/test.sh")]
  assert split(cmds[0].text) == ({"A": "1"}, ["python", "-m", "rlsvr.plan", "--config=x.py",
                                              "--devices=8"])
  with pytest.raises(ValueError, match="not a simple command"):
    split("python -m rlsvr.plan --config=x.py | tee out")


def test_smoke_forms_follow_the_rules():
  train = smoke_form(split(".venv/bin/python -m rlsvr.train --config=configs/a.py:cpu,delayed "
                           "--config.steps=20 --workdir runs/x --config.plugins=m")[1])
  assert train.argv == [".venv/bin/python", "-m", "rlsvr.train",
                        "--config=configs/a.py:delayed,smoke", "--workdir", "runs/x",
                        "--config.plugins=m", "--config.steps=1"]
  assert train.writes == ("runs/x",)
  remote = smoke_form(["python", "-m", "rlsvr.train", "--config=c.py:smoke", "--workdir=gs://b"])
  assert remote.argv[-1] == f"--workdir={TMP}/run" and remote.writes == ()
  (export,) = plan_page(commands_in("p.md", "```bash\npython -m rlsvr.export --checkpoint "
                                               "runs/spy_summ_cpu --out x/\n```\n"))
  assert export.smoke.before[0][3:] == ["--config=configs/spy_summ.py:smoke", "--config.steps=1",
                                        "--workdir=runs/spy_summ_cpu"]
  assert smoke_form(["bash", "launch/slurm.sh", "--nodes=2", "--", "--config.steps=3"]
                    ).argv == ["bash", "launch/slurm.sh", "--dry-run", "--nodes=2", "--",
                               "--config.steps=3"]
  bench = smoke_form(split("python bench/learning_spy.py --seeds 0,1 --set steps=20 "
                           "--set spy.rollout_n=8 --set grpo.lr=3e-5")[1])
  assert bench.argv == ["python", "bench/learning_spy.py", "--seeds=0", "--set", "steps=1",
                        "--set", "grpo.lr=3e-5", "--set", "heldout.size=2",
                        "--config=configs/spy_summ.py:smoke",
                        f"--workdir={TMP}/workdir", f"--json={TMP}/json"]
  # Sizes a command leaves to the script's defaults (three seeds, the config's steps and
  # held-out games) are set too: a bare command is the full-size run.
  bare = smoke_form(split("python bench/learning_spy.py --config configs/spy_summ.py:cpu,"
                          "detectors --json docs/x.json")[1])
  assert bare.argv == ["python", "bench/learning_spy.py", "--config=configs/spy_summ.py:detectors,"
                       "smoke", "--seeds=0", "--set", "steps=1", "--set", "heldout.size=2",
                       f"--workdir={TMP}/workdir", f"--json={TMP}/json"]
  assert smoke_form(["bash", "scripts/test.sh"]).skip
  for unknown in (["tensorboard", "--logdir", "runs"], ["python", "bench/new_bench.py"]):
    with pytest.raises(ValueError):
      smoke_form(unknown)


def test_commands_that_read_what_an_earlier_one_wrote_share_its_chain():
  page = ("```bash\npython -m rlsvr.train --config=configs/spy_summ.py:smoke --workdir=runs/s\n"
          "python -m rlsvr.plan --config=configs/spy_summ.py\n"
          "python -m rlsvr.export --checkpoint runs/s --out exported/s\n"
          "python -m rlsvr.export --checkpoint runs/spy_summ_cpu --out exported/s2\n"
          "python -c \"print(open('exported/s/config.json').read())\"\n```\n")
  planned = plan_page(commands_in("p.md", page))
  assert [p.chain for p in planned] == [0, 1, 0, 3, 0]
  assert planned[2].smoke.before == []  # the page trains runs/s itself
  assert planned[3].smoke.before  # nothing in the page trains runs/spy_summ_cpu
  unknown = plan_page(commands_in("p.md", "```bash\ntail -f runs/x/rollouts.txt\n"
                                            "python -m rlsvr.export --checkpoint runs/x --out y\n"
                                            "```\n"))
  assert "no smoke-form rule" in unknown[0].error
  assert "no configs/<stem>.py names the checkpoint 'runs/x'" in unknown[1].error


def test_a_broken_documented_command_fails(user_clone, tmp_path):
  """A misspelt config in a README command: its smoke form fails, so the doc test would."""
  readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
  train = next(c for c in commands_in("README.md", readme) if "rlsvr.train" in c.text)
  # Its own page name: results are kept per command id, and the real one may have run here.
  broken = DocCommand("README.md (misspelt)", train.line,
                      train.text.replace("configs/rlvr_math.py", "configs/rlvr_maths.py"))
  assert broken.text != train.text
  (p,) = plan_page([broken])
  broken_p = dataclasses.replace(p, chain=-1)
  why = run_planned(broken_p, [broken_p], user_clone, str(tmp_path))
  assert "exited" in why and "rlvr_maths" in why


def test_a_smoke_form_two_commands_share_runs_once(user_clone, tmp_path):
  """Commands whose smoke forms are the same (they differ only in seeds or steps) run one
  process; a different form, or a command of a chain, runs its own."""
  log = tmp_path / "runs.log"
  once = f"python -c \"open('{log}', 'a').write('x')\""
  other = f"python -c \"open('{log}', 'a').write('y')\""
  planned = plan_page(commands_in("forms.md", f"```bash\n{once}\n{once}\n{other}\n```\n"))
  assert [run_planned(p, planned, user_clone, str(tmp_path)) for p in planned] == ["", "", ""]
  assert log.read_text() == "xy"
