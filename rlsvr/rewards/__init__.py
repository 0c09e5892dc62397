"""Reward functions for the `reward_fn` environment, with TRL's calling convention.

A reward function is called once per step with keyword arguments only:

  f(prompts=..., completions=..., completion_ids=..., trainer_state=...,
    log_extra=..., log_metric=..., **columns) -> list[float | None]

as TRL 1.16's `GRPOTrainer` calls it (see `rlsvr.envs.reward_fn.rewards`), so a
function written for TRL works unchanged, and one written here works in TRL.
Declare the arguments you use and end with `**kwargs`.
"""
