"""The spy config section, typed at start-up: variants resolve before defaults fill in."""
import os
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from rlsvr.envs.spy.experiment import game_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def parse(spec: str, *overrides: str):
  """The config `python -m rlsvr.train --config=spec overrides...` would train."""
  argv = ["prog", f"--config={os.path.join(REPO, spec)}", *overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True)
  saved, sys.argv = sys.argv, argv  # config_flags reads the overrides from sys.argv
  try:
    values(argv)
  finally:
    sys.argv = saved
  return values.config


def test_overriding_the_variant_on_the_command_line_gives_that_variants_defaults():
  parallel = game_config(parse("configs/spy_summ.py"))
  assert (parallel.variant, parallel.num_players, parallel.mask_fraction) == ("parallel", 4, 0.2)
  seq = game_config(parse("configs/spy_summ.py", "--config.spy.variant=sequential"))
  assert (seq.variant, seq.num_players, seq.mask_fraction) == ("sequential", 2, 0.5)
  writing = game_config(parse("configs/spy_write.py", "--config.spy.variant=sequential"))
  assert (writing.num_players, writing.spy_view) == (2, "none")
  no_spy = game_config(parse("configs/spy_write.py", "--config.spy.variant=no_spy"))
  assert no_spy.training_phase == "clue"
  assert game_config(parse("configs/spy_math.py")).rollout_n == 4  # the task's default


def test_a_key_set_on_the_command_line_wins_over_the_variant():
  c = parse("configs/spy_summ.py", "--config.spy.variant=sequential",
            "--config.spy.num_players=3", "--config.spy.mask_fraction=0.3")
  game = game_config(c)
  assert (game.num_players, game.mask_fraction) == (3, 0.3)
  with pytest.raises(flags.IllegalFlagValueError):
    parse("configs/spy_summ.py", "--config.spy.num_players=three")


def test_the_cpu_variant_keeps_its_own_sizes():
  game = game_config(parse("configs/spy_summ.py:cpu"))
  assert (game.task, game.rollout_n, game.truncate_words, game.num_players) == (
      "facts", 8, 200, 4)
  assert game.constrained_vote and game.answer_prefill
  reports = game_config(parse("configs/spy_summ.py:cpu,reports"))
  assert (reports.task, reports.truncate_words) == ("summarisation", 80)
  # The other tasks' CPU games keep their task.
  assert game_config(parse("configs/spy_write.py:cpu")).task == "writing"


@pytest.mark.parametrize("thinking,think_block", [(None, False), (False, True), (True, False)])
def test_model_enable_thinking_reaches_every_prompt(thinking, think_block):
  """Qwen3's thinking switch is one config key; the game's prompts go through it."""
  from rlsvr.envs import registry
  from rlsvr.envs.spy.experiment import SpyExperiment
  from rlsvr.model.tokenizer import qwen3_tokenizer

  c = parse("configs/spy_summ.py:smoke",
            *([f"--config.model.enable_thinking={thinking}"] if thinking is not None else []))
  tokenizer = qwen3_tokenizer()
  exp = SpyExperiment(registry.BuildContext(c, tokenizer, None, None, None))
  text = tokenizer.decode(exp.env.encode("Summarise this."))
  assert ("<think>\n\n</think>" in text) == think_block


def test_cpu_long_is_the_cpu_default_run_longer():
  short, long_ = parse("configs/spy_summ.py:cpu"), parse("configs/spy_summ.py:cpu_long")
  assert game_config(long_) == game_config(short)
  assert (long_.steps, long_.heldout.size, short.steps, short.heldout.size) == (20, 16, 8, 8)
  assert long_.grpo.filter_groups and long_.model.source == "smollm2"


def test_heldout_per_call_sets_the_games_of_each_evaluation_call():
  from rlsvr.envs import registry
  from rlsvr.envs.spy.experiment import SpyExperiment
  from tests.envs.spy.fakes import ByteTokenizer, ScriptedPolicy, spy_finding_detector, \
      spy_marker_player

  def rows_per_call(*overrides):
    c = parse("configs/spy_summ.py:smoke", "--config.heldout.size=4", *overrides)
    exp = SpyExperiment(registry.BuildContext(c, ByteTokenizer(), None, None, None))
    policy = ScriptedPolicy(ByteTokenizer(), lambda p: spy_marker_player(p, "summarisation"),
                            spy_finding_detector)
    exp.evaluate(policy, None)
    return [len(texts) for texts, _ in policy.calls]

  # Players (4 per game), detectors (2 per game), then the plain prompts (4 per game).
  assert rows_per_call() == [8, 4, 8, 4, 8, 8]  # games_per_step = 2 at a time.
  assert rows_per_call("--config.heldout.per_call=4") == [16, 8, 16]


# The `--set` list the results.md runs of "The played game teaches" were made with.
PLAYED_RECIPE = (
    "spy.training_phase=decision", "steps=48", "spy.games_per_step=1", "spy.rollout_n=256",
    "spy.detector_orders=rotated", "spy.constrained_vote=True", "spy.vote_abstain=False",
    "spy.mask_fraction=0.4", "sampling.temperature=0.7", "spy.detector_temperature=1.0",
    "grpo.lr=3e-5", "grpo.warmup_steps=12", "grpo.kl_coef=0.2", "grpo.remat=False",
    "grpo.micro_batch_size=0", "grpo.filter_groups=False", "heldout.size=16",
    "heldout.per_call=16")


@pytest.mark.parametrize("variants,changed,every", [
    ("cpu_long,detectors", (), 8),
    # The main job: 24 steps, the players at 0.3 on one line, the rate decayed (results.md,
    # "A decaying learning rate").
    ("cpu,detectors", ("steps=24", "grpo.lr=8e-5", "grpo.warmup_steps=4",
                       "grpo.lr_schedule=cosine", "sampling.temperature=0.3",
                       "spy.player_stop_strings=('\\n',)"), 4)])
def test_the_detectors_variant_is_the_recipe_the_results_were_made_with(variants, changed,
                                                                        every):
  recipe = parse("configs/spy_summ.py:cpu",
                 *(f"--config.{s}" for s in PLAYED_RECIPE + changed))
  variant = parse(f"configs/spy_summ.py:{variants}")
  assert game_config(variant) == game_config(recipe)
  differ = {k for k in ("steps", "grpo", "sampling", "heldout", "model", "data", "seed")
            if variant[k] != recipe[k]}
  assert not differ, differ
  assert variant.checkpoint.every == every


def test_the_detectors_variant_needs_a_cpu_run():
  from configs import spy_summ
  with pytest.raises(ValueError, match="cpu,detectors"):
    spy_summ.get_config("detectors")
  smoke = spy_summ.get_config("smoke,detectors")  # the docs commands' smoke form
  assert game_config(smoke).rollout_n == 2 and not game_config(smoke).vote_abstain


def test_the_main_job_is_the_detectors_recipe_the_readme_describes():
  with open(os.path.join(REPO, "scripts", "train.sh")) as f:
    spec = next(a for a in f.read().split() if a.startswith("--config="))[len("--config="):]
  c = parse(spec)
  game = game_config(c)
  assert (game.task, game.training_phase, game.rollout_n, game.detector_orders) == (
      "facts", "decision", 256, "rotated")
  assert (c.steps, c.heldout.size, c.model.source) == (24, 16, "smollm2")
