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


def checkpoint(function, *args, swap_inputs=False, policy_fn=None, **kwargs):
    """torch: function(*args, **kwargs) under a non-reentrant checkpoint with a selective policy (policy_fn:
    op -> CheckpointPolicy; MUST_SWAP is kept as torch's MUST_SAVE: the stand-in does not swap op
    outputs), inside the platform's async_save_on_cpu when swap_inputs: the inputs the checkpoint saves
    for its recompute (the hidden states entering the layer) become SwapTensors of the current group."""
    import contextlib
    import torch
    from torch.utils import checkpoint as tc
    from hyper_parallel.platform import get_platform

    def context_fn():
        def policy(_ctx, op, *_a, **_k):
            got = CheckpointPolicy.MUST_RECOMPUTE if policy_fn is None else policy_fn(op)
            return {CheckpointPolicy.MUST_SAVE: tc.CheckpointPolicy.MUST_SAVE,
                    CheckpointPolicy.PREFER_SAVE: tc.CheckpointPolicy.PREFER_SAVE,
                    CheckpointPolicy.MUST_SWAP: tc.CheckpointPolicy.MUST_SAVE,
                    CheckpointPolicy.PREFER_RECOMPUTE: tc.CheckpointPolicy.PREFER_RECOMPUTE,
                    }.get(got, tc.CheckpointPolicy.MUST_RECOMPUTE)
        return tc.create_selective_checkpoint_contexts(policy)

    ctx = get_platform().async_save_on_cpu() if swap_inputs else contextlib.nullcontext()
    with ctx:
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, context_fn=context_fn,
                                                 **kwargs)


def checkpoint_wrapper(module, policy_fn=None, swap_inputs=False, **kwargs):
    """A torch module wrapped by torch's own CheckpointWrapper with checkpoint() as its checkpoint_fn, as
    hyper-parallel's torch platform wraps it (its ckpt_wrapper); anything else (MindSpore: recompute is not
    modelled) is returned as it is."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(module, torch.nn.Module):
        return module
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper as torch_wrapper
    return torch_wrapper(module, checkpoint_fn=checkpoint, policy_fn=policy_fn, swap_inputs=swap_inputs, **kwargs)


def checkpoint_exclude_wrapper(module, *args, **kwargs):
    return module
