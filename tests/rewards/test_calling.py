"""Reward functions by path, TRL's calling convention, weights, None, and failures."""
import math
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rlsvr.rewards.calling import RewardFunctionError, RewardSet, TrainerState, resolve
from tests.rewards import funcs

F = "tests.rewards.funcs"
STATE = TrainerState(global_step=4, max_steps=10)
REPO = pathlib.Path(__file__).resolve().parents[2]
_ARGS = dict(prompts=["p"], completions=["c"], completion_ids=[[1]], columns={},
             trainer_state=STATE)


@pytest.fixture(params=[0.0, 60.0], ids=["in_process", "worker"])
def limit(request):
  """Both ways a function is called: in this thread (no limit), in a killable worker."""
  return request.param


def _score(paths, weights=None, n=4, columns=None, completions=None, timeout_s=0.0):
  rewards = RewardSet(paths, weights or [1.0] * len(paths), timeout_s)
  completions = completions or [f"c{'x' * k}" for k in range(n)]
  return rewards.score(prompts=[f"p{k // 2}" for k in range(n)], completions=completions,
                       completion_ids=[(k, 99) for k in range(n)],
                       columns=columns if columns is not None else {"answer": list(range(n))},
                       trainer_state=STATE)


def test_resolve_accepts_colon_and_dot_paths():
  assert resolve(f"{F}:one") is funcs.one
  assert resolve(f"{F}.one") is funcs.one
  assert resolve(f"{F}:Scorer.__call__") is funcs.Scorer.__call__


@pytest.mark.parametrize("path, says", [
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    (f"{F}:missing", "has no 'missing'"),
    (f"{F}:NOT_CALLABLE", "not callable"),
    ("justaname", "is not 'module:function'"),
])
def test_resolve_names_the_bad_path(path, says):
  with pytest.raises(ValueError, match=says) as e:
    resolve(path)
  assert path in str(e.value)


def test_a_trl_function_gets_prompts_completions_ids_columns_and_trainer_kwargs():
  funcs.CALLS.clear()
  scores = _score([f"{F}:trl_style"], columns={"answer": [1, 1, 2, 2], "level": list("aabb")})
  (call,) = funcs.CALLS
  assert call["prompts"] == ["p0", "p0", "p1", "p1"]
  assert call["completions"] == ["c", "cx", "cxx", "cxxx"]
  assert call["completion_ids"] == [[0, 99], [1, 99], [2, 99], [3, 99]]
  assert call["answer"] == [1, 1, 2, 2] and call["level"] == list("aabb")
  assert call["trainer_state"].global_step == 4 and call["trainer_state"].max_steps == 10
  assert callable(call["log_metric"]) and callable(call["log_extra"])
  np.testing.assert_allclose(scores.total, [1, 2, 3, 4])
  assert scores.names == ["trl_style"]
  assert scores.metrics["rewards/trl_style/mean"] == 2.5
  assert scores.metrics["rewards/trl_style/std"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))


def test_conversational_completions_pass_through_as_messages():
  funcs.CALLS.clear()
  completions = [[{"role": "assistant", "content": "ab"}], [{"role": "assistant", "content": "a"}]]
  scores = _score([f"{F}:trl_style"], n=2, completions=completions, columns={})
  assert funcs.CALLS[0]["completions"] == completions
  np.testing.assert_allclose(scores.total, [2, 1])


def test_weighted_sum_and_per_function_means(limit):
  scores = _score([f"{F}:trl_style", f"{F}:one"], timeout_s=limit, weights=[0.5, 2.0])
  np.testing.assert_allclose(scores.total, [0.5 * n + 2.0 for n in (1, 2, 3, 4)])
  assert scores.metrics["rewards/one/mean"] == 1.0 and scores.metrics["rewards/one/std"] == 0.0


def test_none_adds_nothing_and_is_left_out_of_the_mean(limit):
  scores = _score([f"{F}:none_for_odd", f"{F}:one"], timeout_s=limit, weights=[3.0, 1.0])
  np.testing.assert_allclose(scores.total, [4.0, 1.0, 4.0, 1.0])
  assert math.isnan(scores.per_func[1, 0])
  assert scores.metrics["rewards/none_for_odd/mean"] == 1.0  # over the two rows it scored
  assert not scores.unscorable.any() and scores.metrics["rewards/unscorable"] == 0


def test_rows_every_function_declines_are_unscorable(limit):
  scores = _score([f"{F}:none_for_odd", f"{F}:always_none"], timeout_s=limit)
  assert scores.unscorable.tolist() == [False, True, False, True]
  assert scores.metrics["rewards/unscorable"] == 2
  assert "rewards/always_none/mean" not in scores.metrics  # no reward given: no mean


def test_log_metric_and_log_extra_reach_metrics_and_records(limit):
  scores = _score([f"{F}:logs"], timeout_s=limit, n=3, columns={})
  assert scores.metrics["custom/count"] == 3.0
  assert [e["note"] for e in scores.extra] == ["row 0", "row 1", "row 2"]


def test_callable_instances_are_named_by_their_class(limit):
  assert _score([f"{F}:scorer"], timeout_s=limit).metrics["rewards/Scorer/mean"] == 0.5


def test_a_raising_function_fails_the_step_naming_it_with_its_traceback(limit):
  with pytest.raises(RewardFunctionError, match=f"'{F}:raises' raised KeyError") as e:
    _score([f"{F}:one", f"{F}:raises"], timeout_s=limit)
  assert 'funcs.py", line' in str(e.value) and 'raise KeyError("gold")' in str(e.value)


@pytest.mark.parametrize("name, says", [("too_few", "returned 3 rewards for 4 completions"),
                                        ("not_numbers", "returned 'yes' for completion 0"),
                                        ("infinite", "returned inf for completion 1"),
                                        ("a_string", "returned 'ok', not one reward")])
def test_unusable_results_fail_the_step_naming_the_function(name, says, limit):
  with pytest.raises(RewardFunctionError, match=says) as e:
    _score([f"{F}:{name}"], timeout_s=limit)
  assert f"{F}:{name}" in str(e.value)


@pytest.mark.parametrize("name", ["bools", "numpy_values", "numpy_array", "torch_tensor",
                                  "torch_scalars", "a_tuple"])
def test_what_trl_accepts_as_rewards_is_accepted(name, limit):
  # TRL 1.16 builds torch.tensor(output) after None -> NaN: these all pass there.
  scores = _score([f"{F}:{name}"], timeout_s=limit)
  np.testing.assert_allclose(scores.per_func[:, 0], [1.0, 0.0, 0.5, np.nan])
  assert scores.unscorable.tolist() == [False, False, False, True]


def test_duplicate_names_and_reserved_columns_are_refused():
  with pytest.raises(ValueError, match="two reward functions are named"):
    RewardSet([f"{F}:one", f"{F}.one"], [1.0, 1.0])
  with pytest.raises(ValueError, match="shadow reward-function arguments"):
    _score([f"{F}:one"], columns={"completions": [0] * 4})


@pytest.mark.parametrize("name", ["hangs", "swallows_interrupt", "hangs_in_c"])
def test_a_function_past_its_time_limit_is_killed_and_fails_naming_it(name):
  # `hangs_in_c` spins in the regex engine, which no signal interrupts.
  rewards = RewardSet([f"{F}:{name}", f"{F}:one"], [1.0, 1.0], timeout_s=0.5)
  start = time.monotonic()
  with pytest.raises(RewardFunctionError, match=f"'{F}:{name}' did not return within 0.5 s"):
    rewards.score(**_ARGS)
  assert time.monotonic() - start < 10
  rewards.paths, rewards.funcs = rewards.paths[1:], rewards.funcs[1:]  # the worker is replaced
  rewards.names, rewards.weights = rewards.names[1:], rewards.weights[1:]
  np.testing.assert_allclose(rewards.score(**_ARGS).total, 1.0)


def test_the_time_limit_holds_where_sigint_is_ignored(tmp_path):
  # A background job of a non-interactive shell (`cmd &`, nohup) starts with SIGINT
  # ignored, so no KeyboardInterrupt can stop a hang there; the worker is killed instead.
  script = tmp_path / "hang.py"
  script.write_text(textwrap.dedent(f"""
      import signal, sys, time
      sys.path.insert(0, {str(REPO)!r})
      from rlsvr.rewards.calling import RewardFunctionError, RewardSet, TrainerState
      print("sigint ignored:", signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
      rewards = RewardSet(["{F}:hangs"], [1.0], timeout_s=1.0)
      start = time.monotonic()
      try:
        rewards.score(prompts=["p"], completions=["c"], completion_ids=[[1]], columns={{}},
                      trainer_state=TrainerState(0, 1))
      except RewardFunctionError as e:
        print(f"bounded after {{time.monotonic() - start:.1f}} s:", e)
      """))
  out = subprocess.run(["sh", "-c", f"'{sys.executable}' '{script}' & wait"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
  assert "sigint ignored: True" in out.stdout, out.stderr
  assert "did not return within 1 s" in out.stdout, out.stderr


def test_a_crashing_function_fails_the_step_naming_it():
  with pytest.raises(RewardFunctionError, match=f"'{F}:crashes': its worker process failed"):
    _score([f"{F}:crashes"], timeout_s=30)


def test_the_worker_keeps_a_function_state_between_steps():
  rewards = RewardSet([f"{F}:counter"], [1.0], timeout_s=30)
  totals = [rewards.score(**_ARGS).total[0] for _ in range(3)]
  assert totals == [1.0, 2.0, 3.0]
  rewards.close()


def test_the_time_limit_leaves_fast_functions_alone():
  rewards = RewardSet([f"{F}:one"], [1.0], timeout_s=0.5)
  for _ in range(20):
    np.testing.assert_allclose(rewards.score(**_ARGS).total, 1.0)
