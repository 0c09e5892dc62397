"""RLSR (self reward): Countdown and integration with an LLM judge.

Modules: `countdown` (problems, prompt, formal check), `integration`
(LaTeX problems, formal verifier), `safe_math` (whitelist parser for
untrusted math), `workers` (killable SymPy worker processes), `ladder`
(variant generator, solved-problem filter), `judge` (judge prompts, verdicts,
weight schedules), `config` and `env` (the Environment, `SelfJudgeEnv`).
Submodules are imported on demand: this package stays light so worker
processes start fast.
"""
