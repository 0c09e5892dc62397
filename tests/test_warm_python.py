"""The warm interpreter (tests/warm_python.py) runs a command as a new `python` would."""
import os
import subprocess
import sys
import time

import pytest

from tests import warm_python
from tests.warm_python import WarmPython

SHOW = ("import json, os, sys; print(json.dumps([sys.argv, sys.orig_argv, sys.path[0], "
        "os.getcwd(), __name__, os.environ.get('RLSVR_WARM_TEST')]))")


@pytest.fixture(scope="module")
def warm():
  env = {**os.environ, "RLSVR_WARM_TEST": "yes"}
  server = WarmPython(env)
  yield server, env
  server.close()


def _both(warm, tmp_path, args):
  """(warm result, new-interpreter result) of `python *args` in tmp_path."""
  server, env = warm
  out = tmp_path / "out"
  out.mkdir(exist_ok=True)
  hot = server.run(args, str(tmp_path), env, timeout=60, out_dir=str(out))
  cold = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=60)
  return hot, cold


def test_argv_path_folder_and_environment_are_a_new_interpreters(warm, tmp_path):
  (tmp_path / "show.py").write_text(SHOW + "\n")
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "__init__.py").write_text("")
  (tmp_path / "pkg" / "show.py").write_text(SHOW + "\n")
  for args in (["-c", SHOW, "a", "--b=1"], ["show.py", "x"], ["-m", "pkg.show", "--y"]):
    hot, cold = _both(warm, tmp_path, args)
    assert (hot.returncode, hot.stdout) == (cold.returncode, cold.stdout) == (0, cold.stdout)
    assert cold.stdout.strip()


def test_exit_codes_errors_threads_and_atexit_are_a_new_interpreters(warm, tmp_path):
  done = tmp_path / "done.txt"
  late_writer = ("import atexit, threading, time\n"
                 f"atexit.register(lambda: open({str(done)!r}, 'a').write('atexit '))\n"
                 "def work():\n  time.sleep(0.5)\n"
                 f"  open({str(done)!r}, 'a').write('thread ')\n"
                 "threading.Thread(target=work).start()\n")
  cases = (["-c", "raise SystemExit(3)"], ["-c", "import sys; sys.exit('bad flag')"],
           ["-c", "1 / 0"], ["-c", late_writer])
  codes = []
  for args in cases:
    hot, cold = _both(warm, tmp_path, args)
    assert hot.returncode == cold.returncode, args
    assert hot.stderr.strip().splitlines()[-1:] == cold.stderr.strip().splitlines()[-1:], args
    codes.append(hot.returncode)
  assert codes == [3, 1, 1, 0]
  # The non-daemon thread finished before atexit ran, in both processes.
  assert done.read_text() == "thread atexit " * 2


def test_a_command_past_its_limit_is_killed_and_the_server_goes_on(warm, tmp_path):
  server, env = warm
  with pytest.raises(subprocess.TimeoutExpired):
    server.run(["-c", "import time; time.sleep(60)"], str(tmp_path), env, timeout=1,
               out_dir=str(tmp_path))
  ok = server.run(["-c", "print('after')"], str(tmp_path), env, timeout=60,
                  out_dir=str(tmp_path))
  assert (ok.returncode, ok.stdout) == (0, "after\n")


def test_a_fast_commands_two_replies_read_together_are_both_used(warm, tmp_path, monkeypatch):
  """Its pid and exit code reach the pipe before the first read: the second reply is
  taken from what was read, not waited for until the timeout."""
  server, env = warm
  real_select = warm_python.select.select

  def late_select(*args):
    time.sleep(1.0)  # the command has finished and both replies are in the pipe
    return real_select(*args)

  monkeypatch.setattr(warm_python.select, "select", late_select)
  ok = server.run(["-c", "print('fast')"], str(tmp_path), env, timeout=5, out_dir=str(tmp_path))
  assert (ok.returncode, ok.stdout) == (0, "fast\n")


def test_another_environment_or_interpreter_options_are_refused(warm, tmp_path):
  server, env = warm
  with pytest.raises(ValueError, match="environment"):
    server.run(["-c", "pass"], str(tmp_path), {**env, "JAX_ENABLE_X64": "1"}, timeout=60,
               out_dir=str(tmp_path))
  with pytest.raises(ValueError, match="interpreter options"):
    server.run(["-X", "importtime", "-c", "pass"], str(tmp_path), env, timeout=60,
               out_dir=str(tmp_path))
  assert [WarmPython.runs(a) for a in (["-m", "x"], ["-c", "1"], ["s.py"], ["-u", "s.py"], [])
          ] == [True, True, True, False, False]
