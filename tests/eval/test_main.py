"""The command line: `python -m rlsvr.eval --config=configs/eval_summ.py:smoke`, resumed."""
import json

from rlsvr.eval import __main__ as cli
from rlsvr.eval import generation

from .conftest import write_jsonl


def test_cli_runs_the_summ_suite_and_resumes(tmp_path, monkeypatch, capsys):
  samsum = write_jsonl(tmp_path / "samsum.jsonl", [
      {"id": "1", "dialogue": "Ann: lunch?\nBob: sure, at noon", "summary": "Lunch at noon."},
      {"id": "2", "dialogue": "Cy: late again\nDee: ok", "summary": "Cy is late."}])
  vcsum = write_jsonl(tmp_path / "vcsum.jsonl", [
      {"id": "0_0", "context": [["我们开会。", "讨论预算。"]], "speaker": [1],
       "discussion": "讨论了预算。"}])
  argv = ["rlsvr.eval", "--config=configs/eval_summ.py:smoke", f"--workdir={tmp_path / 'out'}",
          "--config.datasets=samsum,vcsum", f"--config.data.samsum={samsum}",
          f"--config.data.vcsum={vcsum}"]
  cli.main(argv)
  results = json.loads((tmp_path / "out" / "results.json").read_text())
  assert results["datasets"]["samsum"]["metrics"]["n"] == 2
  assert results["datasets"]["vcsum"]["metrics"]["n"] == 1
  assert "| samsum | rougeL |" in capsys.readouterr().out
  cache = results["datasets"]["samsum"]["records"]
  before = open(cache).read()

  def no_model(*args, **kwargs):
    raise AssertionError("a resumed run with every item cached must not load the model")

  monkeypatch.setattr(generation, "build", no_model)
  cli.main(argv)
  assert open(cache).read() == before


def test_cli_needs_a_config():
  import pytest
  from absl import flags as absl_flags

  with pytest.raises(absl_flags.IllegalFlagValueError, match="--config"):
    cli.parse_flags(["rlsvr.eval"])
  values = cli.parse_flags(["rlsvr.eval", "--config=configs/eval_rlsr.py:smoke",
                            "--config.gap_limit=7"])
  assert values.config.suite == "rlsr" and values.config.gap_limit == 7
