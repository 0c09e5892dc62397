"""Reading, smoke-forming and running the commands of the docs' bash blocks.

The rules and why they are so: tests/test_docs_commands.py's docstring.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys

from tests.warm_python import WarmPython

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 300  # Per command: a hang fails the test instead of the whole suite.
FENCE = re.compile(r"^```(?:bash|sh|shell)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHONS = ("python", "python3", ".venv/bin/python")
CPU_VARIANTS = ("cpu", "cpu_long")  # Replaced by `smoke` in the smoke form.
NOT_RUN = {  # argv prefix -> why the smoke form is not to run it.
    ("bash", "scripts/train.sh"): "runs scripts/setup.sh, then the 16-22-minute main job; its "
                                  "trainer command is the train rule's spy_summ.py form",
    ("bash", "scripts/test.sh"): "runs scripts/setup.sh, then the whole suite (this test "
                                 "included); CI runs exactly this command",
    ("-m", "pytest"): "a part of the suite, which CI runs itself",
}


@dataclasses.dataclass(frozen=True)
class Bench:
  """How a bench script's smoke form is made."""

  config: str | None  # Its default --config, smoke-ified when the command names none;
  # None: the script takes no --config.
  # Flags that size it -> smoke values, set whether or not the command gives them (the
  # script's defaults are full size); `--set KEY=V` is "--set KEY", and None drops that
  # `--set`: the smoke config's own value, so its programs are those the suite compiled.
  sizes: dict[str, str | None]
  outputs: tuple[str, ...]  # Flags naming what it writes: pointed into tmp.
  extra: tuple[str, ...] = ()  # Flags the smoke form adds (the script's own smoke mode).


BENCH = {  # Flags not named here stay as written.
    # The learning part only: tests/test_bench_accelerator.py runs the others in-process.
    "bench/accelerator_check.py": Bench(None, {}, ("--json",), extra=("--smoke", "--parts=learn")),
    "bench/packing.py": Bench("configs/spy_summ.py:cpu", {"--steps": "1"}, ("--json",)),
    "bench/spy_ceiling.py": Bench("configs/spy_summ.py:cpu", {"--games": "2"}, ("--json",)),
    "bench/spy_probe.py": Bench("configs/spy_summ.py:cpu", {"--games": "4"}, ("--json",)),
    "bench/spy_readout.py": Bench("configs/spy_summ.py:cpu",
                                  {"--games": "2", "--per-step": "1", "--eval-games": "2",
                                   "--votes": "2"}, ("--json",)),
    "bench/learning_spy.py": Bench(
        "configs/spy_summ.py:cpu",
        {"--seeds": "0", "--set steps": "1", "--set heldout.size": "2",
         "--set spy.rollout_n": None, "--set spy.player_max_new_tokens": None,
         "--set spy.games_per_step": None, "--set grpo.micro_batch_size": None,
         "--set heldout.per_call": None},
        ("--workdir", "--json")),
}


@dataclasses.dataclass(frozen=True)
class DocCommand:
  page: str
  line: int  # Of the command's first line in the page.
  text: str  # Continuations joined, as a shell reads it.

  @property
  def id(self) -> str:
    return f"{self.page}:{self.line}"


def doc_pages() -> list[str]:
  docs = sorted(f for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
  return ["README.md", *(os.path.join("docs", f) for f in docs)]


def commands_in(page: str, text: str) -> list[DocCommand]:
  """The commands of every bash block of `text`, continuations joined."""
  found = []
  for block in FENCE.finditer(text):
    first_line = text.count("\n", 0, block.start(1)) + 1
    pending, start = "", 0
    for k, line in enumerate(block.group(1).splitlines()):
      if not pending:
        start = first_line + k
      if line.rstrip().endswith("\\"):
        pending += line.rstrip()[:-1] + " "
        continue
      command = (pending + line).strip()
      pending = ""
      if command and shlex.split(command, comments=True):  # not blank, not only a comment
        found.append(DocCommand(page, start, command))
    if pending.strip():
      raise ValueError(f"{page}:{start}: the block ends inside a `\\` continuation")
  return found


def doc_commands() -> list[DocCommand]:
  return [cmd for page in doc_pages()
          for cmd in commands_in(page, open(os.path.join(REPO, page), encoding="utf-8").read())]


def split(text: str) -> tuple[dict[str, str], list[str]]:
  """(leading VAR=value assignments, argv) of one simple command; ValueError otherwise."""
  lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  words = list(lexer)
  if any(w and set(w) <= set("();<>|&") for w in words):
    raise ValueError(f"not a simple command (pipe, list or redirection): {text}")
  env = {}
  while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
    key, _, value = words.pop(0).partition("=")
    env[key] = value
  return env, words


# ------------------------------------------------------------------ the smoke forms

TMP = "<tmp>"  # Stands for the command's temp folder (outside the clone) until it runs.


@dataclasses.dataclass
class Smoke:
  """What the test runs for one documented command."""

  argv: list[str] | None  # None: not run (`skip` says why).
  skip: str = ""
  checkpoint: str = ""  # A workdir it reads: trained first unless the page trains it.
  before: list[list[str]] = dataclasses.field(default_factory=list)  # Runs first.
  writes: tuple[str, ...] = ()  # Relative paths it writes that later commands may read.
  expect_files: tuple[str, ...] = ()  # Paths (relative to the clone) it must write.
  expect_output: tuple[str, ...] = ()  # Text it must print (shell escapes removed).


def smoke_config(spec: str) -> str:
  """`configs/x.py[:a,cpu]` -> `configs/x.py:a,smoke`: CPU variants give way to `smoke`."""
  path, _, arg = spec.partition(":")
  variants = [v for v in arg.split(",") if v and v not in CPU_VARIANTS]
  return f"{path}:{','.join([*variants, *(['smoke'] if 'smoke' not in variants else [])])}"


def _flag(argv: list[str], name: str) -> str | None:
  """The value of `--name=V` / `--name V` in argv, else None."""
  for k, word in enumerate(argv):
    if word.startswith(name + "="):
      return word[len(name) + 1:]
    if word == name and k + 1 < len(argv):
      return argv[k + 1]
  return None


def _drop(argv: list[str], *flags: str) -> list[str]:
  """`argv` without `--flag=value` / `--flag value` of every name in `flags`."""
  out, skip_next = [], False
  for word in argv:
    if skip_next:
      skip_next = False
    elif word in flags:
      skip_next = True
    elif not any(word.startswith(f + "=") for f in flags):
      out.append(word)
  return out


def _with_smoke_config(argv: list[str]) -> list[str]:
  """`--config=SPEC` / `--config SPEC` with SPEC smoke-ified (smoke_config), in place: absl
  reads `--config.key=value` only after `--config`."""
  out, it = [], iter(argv)
  for word in it:
    if word == "--config":
      out.append(f"--config={smoke_config(next(it))}")
    elif word.startswith("--config="):
      out.append(f"--config={smoke_config(word[len('--config='):])}")
    else:
      out.append(word)
  if out == argv and _flag(argv, "--config") is None:
    raise ValueError("the command names no --config; its smoke form cannot choose one")
  return out


def _local(path: str | None) -> bool:
  return bool(path) and not os.path.isabs(path) and "://" not in path


def _train(argv):
  spec = _flag(argv, "--config") or ""
  is_smoke = "smoke" in spec.partition(":")[2].split(",")
  workdir = _flag(argv, "--workdir")
  written = (os.path.normpath(workdir),) if _local(workdir) else ()
  out = _with_smoke_config(argv)
  if not is_smoke:  # A smoke command's steps stay: a later command may read step N.
    out = _drop(out, "--config.steps") + ["--config.steps=1"]
  if workdir is not None and not written:  # /shared/..., gs://...: not on this machine
    workdir = f"{TMP}/run"
    out = _drop(out, "--workdir") + [f"--workdir={workdir}"]
  return Smoke(out, writes=written,
               expect_files=(f"{workdir}/metrics.jsonl",) if workdir else ())


def _eval(argv):
  return Smoke(_drop(_with_smoke_config(argv), "--workdir") + [f"--workdir={TMP}/eval"])


def checkpoint_config(workdir: str) -> str:
  """`runs/spy_summ_cpu` -> `configs/spy_summ.py:smoke`: the longest config stem starting
  the workdir's name; ValueError when none does."""
  name = os.path.basename(os.path.normpath(workdir))
  stems = sorted((f[:-3] for f in os.listdir(os.path.join(REPO, "configs"))
                  if f.endswith(".py") and not f.startswith("_") and name.startswith(f[:-3])),
                 key=len)
  if not stems:
    raise ValueError(f"no configs/<stem>.py names the checkpoint {workdir!r}")
  return f"configs/{stems[-1]}.py:smoke"


def _export(argv):
  checkpoint, out = _flag(argv, "--checkpoint"), _flag(argv, "--out")
  if not (_local(checkpoint) and _local(out)):
    raise ValueError("export needs a relative --checkpoint and --out")
  written = "adapter_config.json" if "--adapter" in argv else "config.json"  # PEFT's, or HF's.
  return Smoke(argv, checkpoint=checkpoint, writes=(os.path.normpath(out),),
               expect_files=(os.path.join(out, written),))


def _launch(argv):
  config = _flag(argv, "--config") or "configs/spy_summ.py"
  return Smoke(argv[:2] + ["--dry-run"] + argv[2:],
               expect_output=("-m rlsvr.train", f"--config={config}"))


def _bench(argv):
  script = argv[1]
  if script not in BENCH:
    raise ValueError(f"{script} has no entry in BENCH (the flags that size it)")
  bench = BENCH[script]
  out, it, sized = [argv[0], script], iter(argv[2:]), set()
  for word in it:
    if word == "--set":
      key, _, value = next(it).partition("=")
      sized.add(f"--set {key}")
      value = bench.sizes.get(f"--set {key}", value)
      out += ["--set", f"{key}={value}"] if value is not None else []
    elif word.split("=", 1)[0] in bench.sizes:
      flag = word.split("=", 1)[0]
      sized.add(flag)
      if "=" not in word:
        next(it)
      out.append(f"{flag}={bench.sizes[flag]}")
    else:
      out.append(word)
  for flag, value in bench.sizes.items():  # not given: the script's default is full size
    if flag not in sized and value is not None:
      key = flag.removeprefix("--set ")
      out += ["--set", f"{key}={value}"] if key != flag else [f"{flag}={value}"]
  if bench.config is not None:
    if _flag(out, "--config") is None:
      out.append(f"--config={bench.config}")
    out = _with_smoke_config(out)
  out = _drop(out, *bench.outputs) + [f for f in bench.extra if f not in out]
  written = [f"{flag}={TMP}/{flag.lstrip('-')}" for flag in bench.outputs]
  return Smoke(out + written, expect_files=tuple(f"{TMP}/json" for f in bench.outputs
                                                  if f == "--json"))


def _module(name):
  return lambda argv: argv[0] in PYTHONS and argv[1:3] == ["-m", name]


RULES = (  # (matches argv, the smoke form of argv); the module docstring says why each.
    (_module("rlsvr.train"), _train),
    (_module("rlsvr.eval"), _eval),
    (_module("rlsvr.plan"), lambda argv: Smoke(argv)),
    (_module("rlsvr.export"), _export),
    (lambda argv: argv[0] in PYTHONS and argv[1] == "-c", lambda argv: Smoke(argv)),
    (lambda argv: argv[0] == "bash" and re.fullmatch(r"launch/\w+\.sh", argv[1]), _launch),
    (lambda argv: argv[0] in PYTHONS and argv[1].startswith("bench/"), _bench),
)


def smoke_form(argv: list[str]) -> Smoke:
  """The smoke form of `argv` (module docstring); ValueError when no rule knows it."""
  for prefix, why in NOT_RUN.items():
    if tuple(argv[:2]) == prefix or tuple(argv[1:3]) == prefix:
      return Smoke(None, skip=why)
  if len(argv) >= 2:
    for matches, form in RULES:
      if matches(argv):
        return form(argv)
  raise ValueError("no smoke-form rule matches this command; add one to tests/"
                   "test_docs_commands.py (its docstring lists the rules)")


# ------------------------------------------------------------------ a page's chains


@dataclasses.dataclass
class Planned:
  command: DocCommand
  env: dict[str, str]
  smoke: Smoke | None
  error: str  # Why the command has no smoke form ("" : it has one).
  chain: int  # Commands of one chain share a clone and run in page order.


def _mentions(text: str, path: str) -> bool:
  return re.search(rf"(?<![\w/.-]){re.escape(path.rstrip('/'))}(?![\w.-])", text) is not None


def plan_page(commands: list[DocCommand]) -> list[Planned]:
  """Smoke forms, and chains: a command that names a path an earlier command of the page
  writes joins that command's chain (a resumed run, an export, a load of the export)."""
  planned, writer = [], {}  # path -> chain that writes it
  for k, cmd in enumerate(commands):
    env, smoke, error = {}, None, ""
    chain = next((c for path, c in writer.items() if _mentions(cmd.text, path)), k)
    try:
      env, argv = split(cmd.text)
      smoke = smoke_form(argv)
      if smoke.checkpoint and chain == k:  # No earlier command of the page trains it.
        smoke.before = [["python", "-m", "rlsvr.train",
                         f"--config={checkpoint_config(smoke.checkpoint)}", "--config.steps=1",
                         f"--workdir={smoke.checkpoint}"]]
    except ValueError as e:
      error, smoke = str(e), None
    if smoke is not None:
      for path in smoke.writes:
        writer.setdefault(path, chain)
    planned.append(Planned(cmd, env, smoke, error, chain))
  return planned


def plan_all() -> list[Planned]:
  by_page: dict[str, list[DocCommand]] = {}
  for cmd in doc_commands():
    by_page.setdefault(cmd.page, []).append(cmd)
  return [p for cmds in by_page.values() for p in plan_page(cmds)]


# ------------------------------------------------------------------ running them


_WARM: dict[tuple, WarmPython] = {}  # environment -> its warm interpreter, per process


def run(argv: list[str], cwd: str, env: dict[str, str], tmp: str, warm: bool = True
        ) -> subprocess.CompletedProcess:
  """`argv` in `cwd`; with `warm`, a `python` command runs in a child of a warm interpreter
  (tests/warm_python.py: the same run less the heavy imports). Not for a command that sets
  variables of its own: the libraries read some of them on import."""
  argv = [w.replace(TMP, tmp) for w in argv]
  interpreter_there = argv[0] != ".venv/bin/python" or os.path.exists(os.path.join(cwd, argv[0]))
  if warm and argv[0] in PYTHONS and interpreter_there and WarmPython.runs(argv[1:]):
    key = tuple(sorted(env.items()))
    if key not in _WARM:
      _WARM[key] = WarmPython(env)
    return _WARM[key].run(argv[1:], cwd, env, TIMEOUT_S, out_dir=tmp)
  argv = [sys.executable if argv[0] in ("python", "python3") else argv[0], *argv[1:]]
  return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=TIMEOUT_S)


def failure(proc: subprocess.CompletedProcess, what: str) -> str:
  if proc.returncode == 0:
    return ""
  return (f"{what} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
          f"--- stderr\n{proc.stderr[-4000:]}")


_DONE: dict[str, str] = {}  # command id -> "" (passed) or why it failed, per process
_CHAIN_CLONES: dict[tuple[str, int], str] = {}
# A standalone command's smoke form -> its result: commands that differ only in what the
# smoke form sizes down (seeds, steps, games) run the same program, once.
_DONE_FORMS: dict[tuple, str] = {}


def _standalone_form(p: Planned, planned: list[Planned]) -> tuple | None:
  """The key of `p`'s smoke form when it reads and writes nothing of its page's chains."""
  alone = not any(q is not p and (q.command.page, q.chain) == (p.command.page, p.chain)
                  for q in planned)
  if not alone or p.smoke.before or p.smoke.writes:
    return None
  return tuple(p.smoke.argv), tuple(sorted(p.env.items()))


def run_planned(p: Planned, planned: list[Planned], user_clone, tmp_root: str) -> str:
  """Runs `p` (and the commands of its chain before it in `planned`, once per process) in
  its chain's clone (a hard-linked copy of `user_clone`'s); "" when it did what its rule
  expects, else why not."""
  template, base_env = user_clone
  form = _standalone_form(p, planned)
  if form is not None and form in _DONE_FORMS:
    return _DONE_FORMS[form]
  key = (p.command.page, p.chain)
  if key not in _CHAIN_CLONES:
    clone = os.path.join(tmp_root, f"chain_{len(_CHAIN_CLONES)}")
    shutil.copytree(template, clone, symlinks=True, copy_function=os.link)  # cheap: links
    _CHAIN_CLONES[key] = clone
  clone = _CHAIN_CLONES[key]
  for q in planned:
    if (q.command.page, q.chain) != key or q.command.id in _DONE or q.smoke is None:
      continue
    if q.smoke.argv is None or q.error:
      continue
    tmp = os.path.join(tmp_root, re.sub(r"\W", "_", q.command.id))
    os.makedirs(tmp, exist_ok=True)
    env, why = {**base_env, **q.env}, ""
    for before in q.smoke.before:
      why = why or failure(run(before, clone, env, tmp, warm=not q.env),
                           f"{shlex.join(before)} (its checkpoint)")
    if not why:
      proc = run(q.smoke.argv, clone, env, tmp, warm=not q.env)
      why = failure(proc, shlex.join(w.replace(TMP, tmp) for w in q.smoke.argv))
    if not why:
      for path in q.smoke.expect_files:
        if not os.path.exists(os.path.join(clone, path.replace(TMP, tmp))):
          why = f"wrote no {path}"
      printed = proc.stdout.replace("\\", "")  # dry runs print shell-quoted commands
      why = why or next((f"printed no {t!r}:\n{proc.stdout[-2000:]}"
                         for t in q.smoke.expect_output if t not in printed), "")
    _DONE[q.command.id] = why
    if q is p:
      break
    if why:  # a later command of the chain would only fail for this one's reason
      return f"an earlier command of its chain, {q.command.id}, failed: {why}"
  if form is not None:
    _DONE_FORMS[form] = _DONE[p.command.id]
  return _DONE[p.command.id]
