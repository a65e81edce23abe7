"""hyper_parallel.core.activation_memory.wrapper (stand-in): the newest layout's wrappers (torch only).

AsyncSaveOnCpu's pack hook hands autograd tensor.detach() and keeps a SwapTensor of that same detached
tensor in the current group's Storage (no index: the detached value is what autograd holds for the
layer's backward); a tensor on the host, a parameter, an empty storage, one the policy says MUST_SAVE, or
one saved outside any group or in the last group of the chain stays as it is. swap_tensor_wrapper registers
tensors the caller names into the current group. CheckpointWrapper sets its group current before the
checkpoint saves its inputs."""

import warnings

import torch

from hyper_parallel.core.activation_checkpoint.swap import on_device

from .policy import CheckpointPolicy
from .swap import Storage, SwapManager, SwapTensor


def base_check_fn(t):
    return on_device(t) and not isinstance(t, torch.nn.Parameter) and t.untyped_storage().nbytes() > 0


class AsyncSaveOnCpu(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, policy_fn=None, group_swap=False, cpu_pool=None):
        self.storage, self.count_idx, self.added = Storage(), 0, False
        manager = SwapManager()

        def pack_to_cpu(t):
            if not base_check_fn(t):
                return t.detach()
            if policy_fn is not None and policy_fn(t) == CheckpointPolicy.MUST_SAVE:
                return t.detach()
            group = manager.get_current_group_name()
            if not group or manager.is_last_group(group):
                return t.detach()
            if not self.added:
                manager.add_storage(group, self.storage)
                self.added = True
            detached = t.detach()
            self.storage[self.count_idx].append(SwapTensor(detached, "%s::%s" % (group, tuple(t.shape)),
                                                           group_swap=group_swap, cpu_pool=cpu_pool))
            self.count_idx += 1
            return detached

        def unpack_from_cpu(t):
            return t

        super().__init__(pack_to_cpu, unpack_from_cpu)


class SwapWrapper(torch.nn.Module):
    def __init__(self, module, policy_fn=None, group_swap=False, cpu_pool=None):
        super().__init__()
        self._swap_wrapped_module = module
        self.policy_fn, self.group_swap, self.cpu_pool = policy_fn, group_swap, cpu_pool

    def forward(self, *args, **kwargs):
        with AsyncSaveOnCpu(self.policy_fn, self.group_swap, self.cpu_pool):
            return self._swap_wrapped_module(*args, **kwargs)


def swap_wrapper(module, policy_fn=None, group_swap=False, cpu_pool=None):
    return SwapWrapper(module, policy_fn, group_swap, cpu_pool)


def swap_tensor_wrapper(target, tag=None, group_swap=False, cpu_pool=None):
    manager = SwapManager()
    group = manager.get_current_group_name()
    if not group:
        warnings.warn("Tensor %s cannot be swapped, for its group is unregistered." % tag)
        return target
    if manager.is_last_group(group):
        return target
    storage = Storage()
    for i, t in enumerate(x for x in torch.utils._pytree.tree_leaves(target)  # pylint: disable=protected-access
                          if isinstance(x, torch.Tensor) and base_check_fn(x)):
        storage[i].append(SwapTensor(t, "%s::%s" % (tag or group, tuple(t.shape)), group_swap=group_swap,
                                     cpu_pool=cpu_pool))
    if storage:
        manager.add_storage(group, storage)
    return target


class CheckpointWrapper(torch.nn.Module):
    def __init__(self, module, **checkpoint_kwargs):
        super().__init__()
        self._checkpoint_wrapped_module = module
        self.checkpoint_kwargs = checkpoint_kwargs

    def forward(self, *args, **kwargs):
        group = getattr(self, "_swap_group_name", None)
        if group is not None:  # the checkpoint saves the inputs before the wrapped module runs
            SwapManager().set_current_group_name(group)
        from .api import checkpoint  # pylint: disable=import-outside-toplevel
        return checkpoint(self._checkpoint_wrapped_module, *args, **self.checkpoint_kwargs, **kwargs)


def ckpt_wrapper(module, **checkpoint_kwargs):
    return CheckpointWrapper(module, **checkpoint_kwargs)
