"""hyper_parallel.core.activation_checkpoint (stand-in): what MindFormers 2.1.0 imports from it."""

import enum

from .swap import SwapManager, SwapTensor, swap_wrapper  # noqa: F401


class CheckpointPolicy(enum.Enum):
    """What a swap or checkpoint policy_fn says of a saved tensor."""
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_SWAP = 4


def checkpoint_wrapper(module, *args, **kwargs):  # recompute is not modelled: the module as it is
    return module


def checkpoint_exclude_wrapper(module, *args, **kwargs):
    return module
