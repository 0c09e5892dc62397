"""Environments by name: what the trainer, the checkpointer and the memory planner ask of one.

An environment is one module that calls `register(EnvSpec(...))` at import time.
The config's `env` key picks it: a built-in name (imported on first use), a name
registered by code that ran before (a test, a notebook), or `"package.module"` /
`"package.module:name"`, which imports that module first (`"package.module"` alone
names the one environment it registers), so a project outside this repository adds
a game with `--config.env=my_project.my_game`.

  spec = registry.get(c.env)
  spec.check(c)                 # ValueError naming the key; before anything is loaded
  exp = spec.build(BuildContext(c, tokenizer, model_config, initial_params, mesh))
  exp.play_round(step, sample, policy_params, round_) -> EpisodeBatch
  spec.plan(c, estimates) -> EnvPlan   # sampler calls and train phases, for rlsvr.plan

Nothing here imports jax: `rlsvr.plan` and config checks use it on any machine.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Protocol

from rlsvr.rl.rollout import EpisodeBatch

# Built-in environments: name -> the module that registers it (imported on first use, so
# asking for one never imports another's dependencies).
BUILTIN = {"spy": "rlsvr.envs.spy.experiment", "rlsr": "rlsvr.envs.self_judge.experiment",
           "reward_fn": "rlsvr.envs.reward_fn.experiment"}


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What an environment may use to build itself.

  `initial_params` are the policy's initial weights in the compute dtype (a copy the
  environment may keep, e.g. as a fixed judge; the trainer's masters are donated). In a
  LoRA run they are the trainer's frozen base itself, shared, never donated.
  """

  config: Any  # The whole ConfigDict; an environment reads its own section.
  tokenizer: Any
  model_config: Any
  initial_params: Any
  mesh: Any

  @property
  def chat_template_kwargs(self) -> dict[str, Any]:
    """What every prompt passes to the chat template (`model.enable_thinking`)."""
    thinking = self.config.model.get("enable_thinking")
    return {} if thinking is None else {"enable_thinking": bool(thinking)}


class Experiment(Protocol):
  """The trainer's view of a built environment: it plays steps and holds state."""

  def play_round(self, step: int, sample, policy_params, round_: int = 0) -> EpisodeBatch:
    """Plays round `round_` of training step `step`: draws its items and plays them.

    Rounds > 0 come only under `grpo.filter_groups`. `sample(prompts, **sampling)`
    samples from the policy; `policy_params` are the sampler's compute-dtype weights of
    this step (e.g. for an online judge).
    """
    ...

  def state_dict(self) -> dict[str, Any]:
    """JSON-serialisable state to checkpoint (stream position, baselines, ...)."""
    ...

  # Optional: `finish_step(trained_rows)` after the step's rounds, with the rows its update
  # trains (after dynamic sampling), before their advantages: state that must move once
  # per step (the spy game's role baselines) moves there, and may set the rows' baselines.
  # Optional: `release_weights()`, called with the policy sampler's before each update: an
  # environment with samplers of its own (a judge's) drops their decode layouts there.

  def load_state_dict(self, state: Mapping[str, Any], step: int) -> None:
    ...

  def model_state(self, step: int) -> dict[str, Any]:
    """Weights of extra models to checkpoint after `step`, by name ({} when none need it).

    On resume at step s, a freshly built experiment's `model_state(s)` is the template
    (shapes, dtypes, shardings) the saved weights are restored into: which models a
    step saves must depend on the step and the config only.
    """
    ...

  def load_model_state(self, params: Mapping[str, Any]) -> None:
    """Restores what `model_state` saved (the names saved at the restored step)."""
    ...

  # Optional: `evaluate(sample, policy_params) -> dict[str, float]` scores the policy on
  # `heldout.size` held-out episodes, the same ones every call, leaving the training state
  # (stream, baselines) untouched; `k/se` entries are standard errors (`rlsvr.heldout`).


@dataclasses.dataclass(frozen=True)
class SamplerCall:
  """One batched sampler call of a step, as the memory planner sizes it."""

  name: str
  rows: int
  prompt_tokens: int  # An estimate; `python -m rlsvr.plan --prompt_tokens` overrides it.
  new_tokens: int
  rows_per_prompt: int = 1  # Rows that share one prompt (one cache prefix).
  model: str = ""  # "" : the policy; else a name in `EnvPlan.extra_models`.


@dataclasses.dataclass(frozen=True)
class TrainPhase:
  """One kind of train step: its rows, the calls whose prompts it trains on, its length."""

  name: str
  rows: int
  calls: tuple[str, ...]
  completion_tokens: int


@dataclasses.dataclass(frozen=True)
class EnvPlan:
  """A step's memory-relevant shapes (see `rlsvr.plan`)."""

  calls: tuple[SamplerCall, ...]
  phases: tuple[TrainPhase, ...]  # Alternatives: a step runs one of them.
  # Extra models held for the whole run: name -> model source ("" : a copy of the policy's
  # architecture in the compute dtype, e.g. a judge that is the initial policy).
  extra_models: Mapping[str, str] = dataclasses.field(default_factory=dict)
  notes: tuple[str, ...] = ()  # The assumptions behind the prompt lengths, printed.


@dataclasses.dataclass(frozen=True)
class EnvSpec:
  """A registered environment.

  `check(c)` raises ValueError for an impossible config (naming the key) and runs
  before anything heavy is loaded; `build(ctx)` returns an `Experiment`;
  `plan(c, estimates)` gives the memory planner the step's shapes, with
  `estimates` an `rlsvr.plan_costs.Estimates`. `console` lists the metrics worth
  a console column, as (metric, label, format) triples; `plots` the panels of
  `curves.png` after the reward, as (title, metric keys).
  """

  name: str
  check: Callable[[Any], None]
  build: Callable[[BuildContext], Experiment]
  plan: Callable[[Any, Any], EnvPlan]
  console: tuple[tuple[str, str, str], ...] = ()
  plots: tuple[tuple[str, tuple[str, ...]], ...] = ()


_REGISTRY: dict[str, EnvSpec] = {}


def register(spec: EnvSpec) -> EnvSpec:
  """Adds `spec` under `spec.name` (a module may re-register itself on reload)."""
  _REGISTRY[spec.name] = spec
  return spec


def unregister(name: str) -> None:
  _REGISTRY.pop(name, None)


def names() -> list[str]:
  return sorted(set(BUILTIN) | set(_REGISTRY))


def get(name: str) -> EnvSpec:
  """The environment `name` (see the module docstring); ValueError when there is none."""
  if name in _REGISTRY:
    return _REGISTRY[name]
  module, _, registered = name.partition(":")
  module = BUILTIN.get(name, module)
  try:
    importlib.import_module(module)
  except ModuleNotFoundError as e:
    if name in BUILTIN or e.name != module:
      raise  # A broken environment module: its own error says more.
  else:
    if registered or name in BUILTIN:
      if (registered or name) in _REGISTRY:
        return _REGISTRY[registered or name]
    else:  # "package.module": the one environment that module registered.
      found = [s for s in _REGISTRY.values() if _module_of(s) == module]
      if len(found) == 1:
        return found[0]
  raise ValueError(f"env={name!r} is not a registered environment; known: {names()}, or "
                   "'package.module[:name]' of a module that calls rlsvr.envs.registry.register")


def import_plugins(c) -> None:
  """Imports the modules of `c.plugins`, which register environments, RLSR tasks, losses
  or advantage estimators; ValueError when one is not importable."""
  for module in filter(None, (m.strip() for m in c.get("plugins", "").split(","))):
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name != module:
        raise  # The plug-in itself is broken: its own error says more.
      raise ValueError(f"bad config: plugins names {module!r}, which is not importable "
                       "(is its folder on PYTHONPATH?)") from None


def _module_of(spec: EnvSpec) -> str:
  return getattr(spec.build, "__module__", "")
