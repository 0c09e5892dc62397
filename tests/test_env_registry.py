"""A new environment is one module: this file registers a toy game and trains it.

The toy game ("echo"): each prompt asks for a number; the reward is the share of
completion tokens equal to the prompt's last token. Nothing in rlsvr names it.
"""
import ast
import dataclasses
import os

import ml_collections
import numpy as np
import pytest

from configs.base import base_config, run_locally
from rlsvr import metrics, plan, train
from rlsvr.envs import registry
from rlsvr.envs.base import EpisodeBatch, Trajectory
from rlsvr.envs.items import ItemStream, StreamExperiment, round_rng

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class EchoGame:
  """Keeps a running count of played prompts: state that must survive a resume."""

  def __init__(self, group_size: int, max_new_tokens: int):
    self.group_size, self.max_new_tokens, self.played = group_size, max_new_tokens, 0

  def state_dict(self):
    return {"played": self.played}

  def load_state_dict(self, state):
    self.played = state["played"]

  def play_episodes(self, items, sample, rng, step):
    prompts = [[int(t) for t in rng.integers(100, 200, size=3)] + [item] for item in items]
    done = sample([p for p in prompts for _ in range(self.group_size)],
                  max_new_tokens=self.max_new_tokens, temperature=1.0)
    rows = []
    for i, completion in enumerate(done):
      prompt = prompts[i // self.group_size]
      hits = np.mean([t == prompt[-1] for t in completion.ids]) if completion.ids else 0.0
      rows.append(Trajectory(prompt, list(completion.ids), list(completion.logprobs),
                             float(hits), group_id=i // self.group_size, role="echo",
                             finish_reason=completion.finish_reason))
    self.played += len(prompts)
    return EpisodeBatch(rows, {"echo/played": float(self.played)},
                        record_text=f"echo prompt {prompts[0]}\n", records=[{"items": items}],
                        labels={"phase": "echo"})


class EchoExperiment(StreamExperiment):
  def __init__(self, ctx: registry.BuildContext):
    c = self.c = ctx.config
    self.env = EchoGame(c.echo.group_size, c.echo.max_new_tokens)
    self.items = ItemStream(list(range(10, 60)), c.echo.prompts_per_step, c.seed)

  def play_round(self, step, sample, policy_params, round_=0):
    return self.env.play_episodes(self.items.next_step(), sample,
                                  round_rng(self.c.seed, step, round_), step)


def check(c):
  if c.echo.group_size < 2:
    raise ValueError("bad config (echo.group_size): GRPO needs groups of 2 or more")


def plan_echo(c, est):
  rows = c.echo.prompts_per_step * c.echo.group_size
  return registry.EnvPlan(
      (registry.SamplerCall("echo", rows, 4, c.echo.max_new_tokens,
                            rows_per_prompt=c.echo.group_size),),
      (registry.TrainPhase("echo", rows, ("echo",), c.echo.max_new_tokens),))


SPEC = registry.register(registry.EnvSpec(
    "echo", check=check, build=EchoExperiment, plan=plan_echo,
    console=(("echo/played", "played", "{:.0f}"),), plots=(("played", ("echo/played",)),)))


def echo_config(env: str = "echo") -> ml_collections.ConfigDict:
  c = base_config()
  run_locally(c, "random:tiny", tokenizer="qwen3")
  c.env = env
  c.echo = ml_collections.ConfigDict(dict(prompts_per_step=2, group_size=2, max_new_tokens=4))
  c.steps = 2
  c.grpo.remat = False
  c.checkpoint.every = 1
  return c


def test_a_toy_environment_trains_through_the_trainer(tmp_path, capfd):
  workdir = str(tmp_path / "echo")
  last = train.train(echo_config(), workdir)
  records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  assert records[-1]["echo/played"] == 4.0 and records[-1]["phase"] == "echo"
  assert "actor/pg_loss" in last and "reward/mean" in last
  assert "played 4" in capfd.readouterr().out  # the environment's console column
  assert "echo prompt" in open(os.path.join(workdir, "rollouts.txt"), encoding="utf-8").read()
  # Its state is checkpointed and restored: a rerun for one more step continues the count.
  c = echo_config()
  c.steps = 3
  train.train(c, workdir)
  assert metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))[-1]["echo/played"] == 6.0


def test_a_module_path_names_an_environment(tmp_path, monkeypatch):
  """`env = "package.module[:name]"` imports a project's own module, which registers itself."""
  (tmp_path / "my_project_env.py").write_text(
      "import dataclasses\n"
      "from rlsvr.envs import registry\n"
      "from tests.test_env_registry import SPEC\n"
      "registry.register(dataclasses.replace(SPEC, name='my_echo', build=type("
      "'MyEcho', (SPEC.build,), {})))\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  try:
    assert registry.get("my_project_env").name == "my_echo"
    assert registry.get("my_project_env:my_echo").name == "my_echo"
    with pytest.raises(ValueError, match="not a registered environment"):
      registry.get("my_project_env:nothing")
  finally:
    registry.unregister("my_echo")
  with pytest.raises(ModuleNotFoundError, match="no_such_dependency"):
    (tmp_path / "broken_env.py").write_text("import no_such_dependency\n")
    registry.get("broken_env")
  with pytest.raises(ValueError, match="known: .*spy"):
    registry.get("chess")


def test_an_environment_checks_and_plans_its_own_section():
  c = echo_config()
  c.echo.group_size = 1
  with pytest.raises(ValueError, match="echo.group_size"):
    train.check_config(c)
  table = plan.plan(echo_config(), 1).table()
  assert "[sample: echo" in table or "echo" in table.split("train:")[0]
  assert "train: echo (4 rows" in table


def test_an_environment_may_keep_extra_models(tmp_path):
  """What `model_state` returns is checkpointed and handed back on resume."""
  import jax
  import jax.numpy as jnp

  from rlsvr import checkpoint

  loaded = []

  class KeepsACopy(EchoExperiment):  # holds the policy it last played with, like a judge
    def __init__(self, ctx):
      super().__init__(ctx)
      self.copy = ctx.initial_params

    def play_round(self, step, sample, policy_params, round_=0):
      self.copy = jax.tree.map(jnp.copy, policy_params)
      return super().play_round(step, sample, policy_params, round_)

    def model_state(self, step):
      return {"copy": self.copy} if step % 2 == 0 else {}

    def load_model_state(self, params):
      loaded.append(jax.tree.map(np.asarray, params))

  registry.register(dataclasses.replace(SPEC, name="echo_copy", build=KeepsACopy))
  try:
    workdir = str(tmp_path / "copy")
    train.train(echo_config("echo_copy"), workdir)
    ckpts = os.path.join(workdir, "checkpoints")
    assert "models" in os.listdir(os.path.join(ckpts, "2"))
    assert "models" not in os.listdir(os.path.join(ckpts, "1"))
    c = echo_config("echo_copy")
    c.steps = 3
    train.train(c, workdir)
  finally:
    registry.unregister("echo_copy")
  (restored,) = loaded
  _, _, after_step_1 = checkpoint.restore_params(ckpts, 1)  # what step 2 played with
  _, _, after_step_2 = checkpoint.restore_params(ckpts, 2)
  same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a),
                                                               jax.tree.leaves(b)))
  assert same(restored["copy"], after_step_1) and not same(restored["copy"], after_step_2)


# The generic machinery, and the names it must not contain.
GENERIC = ("rlsvr/train.py", "rlsvr/train_loop.py", "rlsvr/checkpoint.py", "rlsvr/plan.py",
           "rlsvr/plan_costs.py", "rlsvr/metrics.py", "rlsvr/rl")
ENV_WORDS = ("spy", "rlsr", "judge", "self_judge", "countdown", "integration", "detector")


def _code_names(path: str) -> set[str]:
  """Identifiers and string constants of a module, docstrings and comments excluded."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
  out = set()
  for n in ast.walk(tree):
    if isinstance(n, ast.Name):
      out.add(n.id)
    elif isinstance(n, ast.Attribute):
      out.add(n.attr)
    elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
      out.add(n.value)
    elif isinstance(n, (ast.Import, ast.ImportFrom)):
      out |= {a.name for a in n.names} | {getattr(n, "module", None) or ""}
  return out


def test_the_trainer_checkpointer_and_planner_name_no_environment():
  paths = []
  for p in GENERIC:
    full = os.path.join(REPO, p)
    paths += ([os.path.join(full, f) for f in sorted(os.listdir(full)) if f.endswith(".py")]
              if os.path.isdir(full) else [full])
  found = {os.path.relpath(p, REPO): sorted(n for n in _code_names(p)
                                            if any(w in n.lower() for w in ENV_WORDS))
           for p in paths}
  assert {p: names for p, names in found.items() if names} == {}
