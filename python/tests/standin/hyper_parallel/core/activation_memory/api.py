"""hyper_parallel.core.activation_memory.api (stand-in): the newest layout's entry points, torch only:
checkpoint (swap_inputs: the checkpoint's saved inputs are swapped), swap(fn, ...), swap_wrapper,
swap_tensor_wrapper, checkpoint_wrapper, async_save_on_cpu. A policy_fn's MUST_SWAP ops are kept as
MUST_SAVE: the stand-in does not swap op outputs."""

import contextlib

from .policy import CheckpointPolicy


def async_save_on_cpu(policy_fn=None, group_swap=False, cpu_pool=None):
    from .wrapper import AsyncSaveOnCpu  # pylint: disable=import-outside-toplevel
    return AsyncSaveOnCpu(policy_fn=policy_fn, group_swap=group_swap, cpu_pool=cpu_pool)


def _selective(policy_fn):
    from torch.utils import checkpoint as tc  # pylint: disable=import-outside-toplevel
    to_torch = {CheckpointPolicy.MUST_SAVE: tc.CheckpointPolicy.MUST_SAVE,
                CheckpointPolicy.PREFER_SAVE: tc.CheckpointPolicy.PREFER_SAVE,
                CheckpointPolicy.MUST_SWAP: tc.CheckpointPolicy.MUST_SAVE,
                CheckpointPolicy.PREFER_RECOMPUTE: tc.CheckpointPolicy.PREFER_RECOMPUTE}

    def context_fn():
        return tc.create_selective_checkpoint_contexts(
            lambda _ctx, op, *_a, **_k: to_torch.get(policy_fn(op), tc.CheckpointPolicy.MUST_RECOMPUTE))
    return context_fn


def checkpoint(function, *args, swap_inputs=False, policy_fn=None, context_fn=None, group_swap=False,
               cpu_pool=None, early_stop=True, **kwargs):
    from .checkpoint import checkpoint as hyper_checkpoint  # pylint: disable=import-outside-toplevel
    if policy_fn is not None and context_fn is None:
        context_fn = _selective(policy_fn)
    ctx = async_save_on_cpu(group_swap=group_swap, cpu_pool=cpu_pool) if swap_inputs else contextlib.nullcontext()
    with ctx:
        return hyper_checkpoint(function, *args, context_fn=context_fn, early_stop=early_stop, **kwargs)


def swap(function, *args, policy_fn=None, group_swap=False, cpu_pool=None, **kwargs):
    with async_save_on_cpu(policy_fn=policy_fn, group_swap=group_swap, cpu_pool=cpu_pool):
        return function(*args, **kwargs)


def swap_wrapper(module, policy_fn=None, group_swap=False, cpu_pool=None):
    from .wrapper import swap_wrapper as _swap_wrapper  # pylint: disable=import-outside-toplevel
    return _swap_wrapper(module, policy_fn=policy_fn, group_swap=group_swap, cpu_pool=cpu_pool)


def swap_tensor_wrapper(target, tag=None, group_swap=False, cpu_pool=None):
    from .wrapper import swap_tensor_wrapper as _swap_tensor_wrapper  # pylint: disable=import-outside-toplevel
    return _swap_tensor_wrapper(target, tag=tag, group_swap=group_swap, cpu_pool=cpu_pool)


def checkpoint_wrapper(module, **checkpoint_kwargs):
    from .wrapper import ckpt_wrapper  # pylint: disable=import-outside-toplevel
    return ckpt_wrapper(module, **checkpoint_kwargs)
