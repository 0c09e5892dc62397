"""The spy game (SpyRL): masking, roles, prompts, votes, rewards and records.

Players are numbered 1..n in prompts and votes, and `spy` arguments are
1-based to match the votes. The public helpers below are a stable API (the
notebooks use them); `SpyGame` is the `Environment` the trainer drives.
"""
from rlsvr.envs.spy.config import SpyGameConfig
from rlsvr.envs.spy.game import SpyGame
from rlsvr.envs.spy.mechanics import (
    ABSTAIN,
    MaskedText,
    RoleBaselines,
    detection_reward,
    mask_span,
    most_voted,
    parse_vote,
    performance_rewards,
    phase_at,
    public_output,
    truncate_words,
)

__all__ = [
    "ABSTAIN",
    "MaskedText",
    "RoleBaselines",
    "SpyGame",
    "SpyGameConfig",
    "detection_reward",
    "mask_span",
    "most_voted",
    "parse_vote",
    "performance_rewards",
    "phase_at",
    "public_output",
    "truncate_words",
]
