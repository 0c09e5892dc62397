"""Command line: `python -m rlsvr.eval --config=configs/eval_<suite>.py[:variant] [--config.k=v]`.

  python -m rlsvr.eval --config=configs/eval_math.py --config.model=runs/spy_math
  python -m rlsvr.eval --config=configs/eval_summ.py:smoke --workdir=/tmp/eval

Writes results.json and results.md (and, with --config.baseline, comparison.md
and comparison.png) into --workdir, else config.workdir, else runs/eval_<suite>.
Rerunning with the same settings resumes: finished items are read from the cache.

The flags live in their own `FlagValues`, not absl's global FLAGS, so this
module can be imported next to `rlsvr.train` (which defines its own --config).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from absl import flags
from ml_collections import config_flags


def parse_flags(argv: Sequence[str]) -> flags.FlagValues:
  """--config (with its --config.key=value overrides) and --workdir, parsed from `argv`."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "Evaluation config file[:variant].",
                                  flag_values=values, lock_config=True, sys_argv=list(argv))
  flags.DEFINE_string("workdir", None,
                      "Output folder (default: config.workdir or runs/eval_<suite>).",
                      flag_values=values)
  values(list(argv))
  if values.config is None:
    raise flags.IllegalFlagValueError("--config=configs/eval_<suite>.py is required")
  return values


def main(argv: Sequence[str]) -> dict[str, Any]:
  """Runs the evaluation `argv` describes; prints the table; returns the results."""
  from rlsvr.eval import runner  # noqa: PLC0415

  values = parse_flags(argv)
  c = values.config
  workdir = values.workdir or c.workdir or os.path.join("runs", f"eval_{c.suite}")
  results = runner.run(c, workdir)
  print(runner.markdown_table(results))
  print(f"results in {os.path.abspath(workdir)}")
  return results


if __name__ == "__main__":
  main(sys.argv)
