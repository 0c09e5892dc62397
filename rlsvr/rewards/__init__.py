"""Reward functions for the `reward_fn` environment, with TRL's calling convention.

The home of everything about reward functions: how they are named, called and
checked (`calling`), and ready-made ones (`math:accuracy`, `math:format`). The
environment that plays prompts through them is `rlsvr.envs.reward_fn`.

A reward function is called once per step with keyword arguments only:

  f(prompts=..., completions=..., completion_ids=..., trainer_state=...,
    log_extra=..., log_metric=..., **columns) -> list[float | None]

as TRL 1.16's `GRPOTrainer` calls it (see `rlsvr.rewards.calling`), so a
function written for TRL works unchanged, and one written here works in TRL.
Declare the arguments you use and end with `**kwargs`.
"""
