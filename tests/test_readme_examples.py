"""The examples of README.md and docs/extending.md, run as written: each is one file a user adds."""
import doctest
import importlib
import os
import re
import sys

import numpy as np
import pytest

from rlsvr import metrics, plan, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Where the examples live: the reward function in the README, the other plug-ins in the docs.
EXAMPLE_FILES = {"README.md": {"my_rewards.py"},
                 "docs/extending.md": {"my_game.py", "repeat_config.py", "my_task.py",
                                       "my_loss.py"}}


def _blocks(kind: str, path: str) -> list[tuple[str, str]]:
  """(name, code) of every python block after a `<!-- KIND: NAME -->` marker in `path`."""
  text = open(os.path.join(REPO, path), encoding="utf-8").read()
  return re.findall(rf"<!-- {kind}: (\S+) -->\n```python\n(.*?)```", text, re.DOTALL)


def readme_examples() -> dict[str, str]:
  """file name -> the code block after its `<!-- example: NAME -->` marker, in every page."""
  pages = ["README.md", *sorted(os.path.join("docs", f) for f in os.listdir(
      os.path.join(REPO, "docs")) if f.endswith(".md"))]
  found: dict[str, str] = {}
  for page in pages:
    blocks = _blocks("example", page)
    assert {name for name, _ in blocks} == EXAMPLE_FILES.get(page, set()), page
    for name, code in blocks:
      assert name not in found, f"example {name} appears twice"
      found[name] = code
  return found


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  """The examples as modules on sys.path, as a user's project folder would be."""
  folder = tmp_path_factory.mktemp("user_project")
  found = readme_examples()
  assert set(found) == set().union(*EXAMPLE_FILES.values())
  for name, code in found.items():
    (folder / name).write_text(code)
  (folder / "parity_judge.txt").write_text(
      "Is {{n}} even or odd? A student answered: {{answer}}\n"
      "Reply \\boxed{1} if the answer is right, \\boxed{0} if it is not.\n")
  sys.path.insert(0, str(folder))
  yield folder
  sys.path.remove(str(folder))


def test_a_new_game_trains_with_its_config_file(examples, tmp_path, capfd):
  c = importlib.import_module("repeat_config").get_config()
  assert "train: policy (4 rows" in plan.plan(c, 1).table()  # the planner asks the plug-in
  workdir = str(tmp_path / "repeat")
  train.train(c, workdir)
  records = metrics.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert [r["step"] for r in records] == [1, 2]
  assert "repeat/first_token" in records[-1] and "actor/pg_loss" in records[-1]
  assert "| tok " in capfd.readouterr().out


def test_a_trl_style_reward_function_is_named_by_path(examples):
  from configs.rlvr_math import get_config
  from rlsvr.rewards.calling import RewardSet, TrainerState

  c = get_config("smoke")
  c.reward_fn.reward_funcs = "rlsvr.rewards.math:format,my_rewards:brevity"
  c.reward_fn.reward_weights = "1.0,0.1"
  train.check_config(c)
  rewards = RewardSet(["my_rewards:brevity"], [1.0], timeout_s=60)  # in a worker, as trained
  scores = rewards.score(prompts=["q", "q"], completions=["", "x" * 100],
                         completion_ids=[[], [1] * 100], columns={"answer": ["1", "2"]},
                         trainer_state=TrainerState(global_step=0, max_steps=1))
  np.testing.assert_allclose(scores.total, [1.0, 0.5])


def test_the_readme_call_of_the_reward_function_prints_what_it_shows(examples):
  """The README's `>>>` block, run as a doctest against the example module."""
  blocks = _blocks("doctest", "README.md")
  assert [name for name, _ in blocks] == ["my_rewards.py"]
  test = doctest.DocTestParser().get_doctest(blocks[0][1], {}, "README", "README.md", 0)
  assert test.examples
  result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
  assert result.failed == 0 and result.attempted == len(test.examples)


def test_a_new_rlsr_task_is_one_module(examples):
  from configs.rlsr_countdown import get_config
  from rlsvr.envs.self_judge import tasks

  task = tasks.get_task("my_task:parity")
  assert task.load_problems("", split="train", limit=4, seed=0) == [0, 1, 2, 3]
  verdicts = task.verify([3, 4], ["<answer>odd</answer>", "<answer>odd</answer>"], config=None,
                         pool=None)
  assert [(v.format_ok, v.correct) for v in verdicts] == [(True, True), (True, False)]
  c = get_config("smoke")
  c.plugins, c.rlsr.task = "my_task", "parity"
  c.rlsr.judge_template = str(examples / "parity_judge.txt")
  train.check_config(c)  # the template fits the task's placeholders


def test_a_new_policy_loss_is_selected_by_name(examples):
  import jax.numpy as jnp

  from rlsvr.rl import losses
  from tests.conftest import smoke_config

  c = smoke_config()
  c.grpo.policy_loss = "reinforce"
  with pytest.raises(ValueError, match="reinforce"):
    train.check_config(c)  # not registered until its module is a plug-in
  c.plugins = "my_loss"
  train.check_config(c)
  logp_BxT = jnp.log(jnp.array([[0.5, 0.25]]))
  terms = losses.policy_loss_fn("reinforce")(logp_BxT, logp_BxT, jnp.array([[2.0, 2.0]]),
                                             jnp.ones((1, 2)), None)
  np.testing.assert_allclose(terms["pg_loss"], [[2 * np.log(2), 4 * np.log(2)]], rtol=1e-6)


def test_a_plugin_that_is_not_importable_is_a_config_error():
  from tests.conftest import smoke_config

  c = smoke_config()
  c.plugins = "no_such_plugin_module"
  with pytest.raises(ValueError, match="plugins names 'no_such_plugin_module'"):
    train.check_config(c)
