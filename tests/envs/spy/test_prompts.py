"""Tests for rlsvr.envs.spy.prompts: what each prompt must say."""
import pytest

from rlsvr.envs.spy import SpyGameConfig
from rlsvr.envs.spy import prompts

DOC = "The quick brown fox jumps over the lazy dog."


@pytest.mark.parametrize("task", ["summarisation", "writing", "math"])
def test_player_prompts(task):
  config = SpyGameConfig.for_task(task, mask_fraction=0.3)
  civilian = prompts.player_prompt(config, player=2, is_spy=False, view=DOC)
  spy = prompts.player_prompt(config, player=3, is_spy=True, view="The ****** brown fox.")
  for prompt in (civilian, spy):
    assert "who is the spy" in prompt and "30%" in prompt
    assert f"{config.num_players} players" in prompt
  assert "You are Player 2. You are not the spy" in civilian and DOC in civilian
  assert "You are Player 3 and you are the spy" in spy and "The ****** brown fox." in spy
  assert DOC not in spy
  if task == "math":
    assert "\\boxed{" in civilian and "Answer:` followed" not in civilian
  else:
    assert "`Answer:`" in civilian


def test_player_prompt_without_input_and_with_earlier_outputs():
  config = SpyGameConfig.for_task("writing", "sequential", num_players=3)
  prompt = prompts.player_prompt(config, player=3, is_spy=True, view=None,
                                 earlier=[(1, 1, "story one"), (1, 2, "")])
  assert "did not receive the writing prompt" in prompt
  assert "received no writing prompt at all" in prompt
  assert "Player 1: story one" in prompt and "Player 2: (no answer)" in prompt
  assert "the spy writes last" in prompt


@pytest.mark.parametrize("task,criterion", [
    ("summarisation", "summary that skips"), ("writing", "element of the prompt"),
    ("math", "key quantities"),
])
def test_detector_prompt(task, criterion):
  config = SpyGameConfig.for_task(task)
  outputs = [(1, k, f"output {k}") for k in range(1, config.num_players + 1)]
  prompt = prompts.detector_prompt(config, reference=DOC, outputs=outputs)
  assert prompt.startswith("You are the judge of")
  assert DOC in prompt and criterion in prompt
  assert f"{config.mask_fraction:.0%}" in prompt
  assert all(f"Player {k}: output {k}" in prompt for k in range(1, config.num_players + 1))
  assert f"1 to {config.num_players}" in prompt
  assert "\\boxed{k}" in prompt and "\\boxed{N/A}" in prompt


def test_format_outputs_labels_rounds():
  assert prompts.format_outputs([(2, 1, "x")], rounds=2) == "Player 1 (round 2): x"
  assert prompts.format_outputs([(1, 4, "")], rounds=1) == "Player 4: (no answer)"


def test_fact_sheet_prompts_are_brief_and_complete():
  """The facts task states the same parts (rules, role, task, sheet, format; for judges the
  full sheet, what to look for, every output and the vote) in a sentence each."""
  config = SpyGameConfig.for_task("facts", mask_fraction=0.3)
  civilian = prompts.player_prompt(config, player=2, is_spy=False, view=DOC)
  spy = prompts.player_prompt(config, player=3, is_spy=True, view="The ****** brown fox.")
  for prompt in (civilian, spy):
    assert prompt.startswith("Game: who is the spy, 4 players.") and "30%" in prompt
    assert "Restate every fact" in prompt and "`Answer:`" in prompt
  assert "You are Player 2, not the spy" in civilian and DOC in civilian
  assert "You are Player 3, the spy" in spy and "The ****** brown fox." in spy
  assert DOC not in spy
  judge = prompts.detector_prompt(config, reference=DOC,
                                  outputs=[(1, k, f"output {k}") for k in range(1, 5)])
  assert DOC in judge and "Look for:" in judge and "30%" in judge
  assert all(f"Player {k}: output {k}" in judge for k in range(1, 5))
  assert judge.endswith("Reply `\\boxed{1}`, `\\boxed{2}`, `\\boxed{3}` or `\\boxed{4}` (`\\boxed{N/A}` if you cannot tell).")
  assert len(judge) < 0.6 * len(prompts.detector_prompt(
      SpyGameConfig.for_task("summarisation", mask_fraction=0.3), reference=DOC,
      outputs=[(1, k, f"output {k}") for k in range(1, 5)]))
