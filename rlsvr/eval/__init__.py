"""Evaluation suites: `python -m rlsvr.eval --config=configs/eval_<suite>.py`.

Modules: `generation` (model loading, batched chat generation), `runner` (cache,
progress, results files), `math_suites`, `summ_suites`, `pairwise`, `rlsr_suites`
(one per suite). Datasets are read through `rlsvr.data` (shared folder, local
files, hub), as the environments read theirs.
This package stays light: scoring worker processes import it.
"""
