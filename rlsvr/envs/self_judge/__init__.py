"""RLSR (self reward): Countdown and integration with an LLM judge.

Modules: `tasks` (the task protocol and registry; a task is one module),
`countdown` (problems, prompt, formal check, the Countdown task),
`integration` (LaTeX problems, formal verifier) and `integration_task` (the
integration task), `safe_math` (whitelist parser for untrusted math),
`workers` (killable SymPy worker processes), `ladder` (variant generator,
solved-problem filter), `templates` (judge prompts as data, `prompts/*.txt`),
`judge` (verdicts, weight schedules), `config` and `env` (the Environment,
`SelfJudgeEnv`), `experiment` (the trainer-facing `rlsr` environment).
Submodules are imported on demand: this package stays light so worker
processes start fast.
"""
