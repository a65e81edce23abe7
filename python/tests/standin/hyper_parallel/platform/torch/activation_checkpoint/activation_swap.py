"""hyper_parallel.platform.torch.activation_checkpoint.activation_swap (stand-in): the torch wrapper.

SwapWrapper runs its layer under AsyncSaveOnCpu, a saved_tensors_hooks whose pack makes a SwapTensor of
each eligible saved tensor (on device, not a parameter, not empty, not MUST_SAVE by the policy) and
returns its index (the older versions' shape); unpack returns SwapTensor.get_val(). Backward loads come
from full backward pre-hooks on the chained layers, as hyper-parallel registers them."""

import torch

from hyper_parallel.core.activation_checkpoint import swap


def tensors_in(obj):
    return swap.tensors_in(obj, torch.Tensor)


def host_buffer(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8)  # pinned on a device; plain on CPU


class AsyncSaveOnCpu(swap.SaveOnCpu, torch.autograd.graph.saved_tensors_hooks):
    parameter_type = torch.nn.Parameter

    def __init__(self, wrapper):
        swap.SaveOnCpu.__init__(self, wrapper)
        torch.autograd.graph.saved_tensors_hooks.__init__(self, self.pack, self.unpack)


class AsyncSaveOnCurrentGroup(swap.SaveOnCpu, torch.autograd.graph.saved_tensors_hooks):
    """async_save_on_cpu(): checkpoint(..., swap_inputs=True)'s hooks, outside any swap wrapper: each
    eligible saved tensor becomes a SwapTensor of the current group (the layer whose forward runs)."""
    parameter_type = torch.nn.Parameter

    def __init__(self):
        swap.SaveOnCpu.__init__(self, None)
        torch.autograd.graph.saved_tensors_hooks.__init__(self, self.pack, self.unpack)


def async_save_on_cpu():
    return AsyncSaveOnCurrentGroup()


class SwapWrapper(torch.nn.Module):
    def __init__(self, module, policy_fn=None):
        super().__init__()
        self.module = module
        self.policy_fn = policy_fn

    def param_ptrs(self):
        return {p.untyped_storage().data_ptr() for p in self.module.parameters()}

    def forward(self, *args, **kwargs):
        with AsyncSaveOnCpu(self):
            return self.module(*args, **kwargs)


def swap_wrapper(module, policy_fn=None):
    return SwapWrapper(module, policy_fn)


set_attr = setattr


def backward_pre_hook(layer, fn):
    """fn() before the layer's backward: a full backward pre-hook, first in line, as hyper-parallel's torch
    platform registers its load schedule."""
    layer.register_full_backward_pre_hook(lambda _m, _grad_output: fn(), prepend=True)


def on_grad(outputs, fn):
    """fn() when the gradient of the first output tensor arrives (the layer's backward is next)."""
    def hook(_grad):
        fn()
    for t in tensors_in(outputs):
        if t.requires_grad:
            t.register_hook(hook)
        return
