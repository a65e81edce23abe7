"""hyper_parallel.core.activation_memory.policy (stand-in): what a checkpoint or swap policy_fn says."""

import enum


class CheckpointPolicy(enum.Enum):
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_SWAP = 4
