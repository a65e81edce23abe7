"""hyper_parallel.core.activation_memory.checkpoint (stand-in): hyper-parallel's own non-reentrant checkpoint.

hyper-parallel carries its own copy of torch's non-reentrant checkpoint (a frame whose input saver, an
autograd node, saves the region's tensor inputs for the recompute: the saved-tensor hooks around the call,
async_save_on_cpu under swap_inputs, pack them). The stand-in runs torch's, which saves its inputs the same
way (_CheckpointFrame.save_inputs)."""

import torch.utils.checkpoint as _tc


def checkpoint(function, *args, context_fn=None, early_stop=True, **kwargs):
    kwargs.pop("use_reentrant", None)
    extra = {} if context_fn is None else {"context_fn": context_fn}
    return _tc.checkpoint(function, *args, use_reentrant=False, early_stop=early_stop, **extra, **kwargs)
