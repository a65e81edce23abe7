"""hyper_parallel.platform.torch.activation_checkpoint.activation_swap (stand-in): the torch wrapper.

SwapWrapper runs its layer under AsyncSaveOnCpu, a saved_tensors_hooks whose pack makes a SwapTensor of
each eligible saved tensor (on device, not a parameter, not empty, not MUST_SAVE by the policy) and
returns its index (the older versions' shape); unpack returns SwapTensor.get_val(). Backward loads come
from gradient hooks on the layers' outputs, the moments hyper-parallel's backward pre-hooks run at."""

import torch

from hyper_parallel.core.activation_checkpoint.swap import SwapManager, SwapTensor, on_device


def tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in tensors_in(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_in(x)]
    return []


def host_buffer(nbytes):
    return torch.empty(nbytes, dtype=torch.uint8)  # pinned on a device; plain on CPU


def must_save(policy_fn, t):
    return policy_fn is not None and getattr(policy_fn(t), "name", "") == "MUST_SAVE"


class AsyncSaveOnCpu(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, wrapper):
        self.wrapper = wrapper
        super().__init__(self.pack, self.unpack)

    def pack(self, t):
        w = self.wrapper
        group = getattr(w, "_swap_group_name", None)
        s = t.untyped_storage()
        if group is None or not on_device(t) or isinstance(t, torch.nn.Parameter) or s.nbytes() == 0 or \
                s.data_ptr() in w.param_ptrs() or must_save(w.policy_fn, t):
            return t
        return (group, SwapManager().add_storage(group, SwapTensor(t, group)))

    def unpack(self, packed):
        if isinstance(packed, tuple):
            return SwapManager().get(*packed).get_val()
        return packed


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


def _grad_hook(outputs, fn):
    """fn() when the gradient of the first output tensor arrives (the layer's backward is next)."""
    def hook(_grad):
        fn()
    for t in tensors_in(outputs):
        if t.requires_grad:
            t.register_hook(hook)
            return


def wire(manager, first, second):
    name = getattr(first, "_swap_group_name", None)
    if name is None:
        name = "swap_group_%d" % len(manager.order)
        setattr(first, "_swap_group_name", name)
        manager.order.append(name)
    manager.ensure_group(name)
    setattr(second, "_swap_prev_group", name)
    _install(manager, first)
    _install(manager, second)


def _install(manager, layer):
    """One pre-hook and one forward hook per layer, whatever it was wired as: the forward hook launches the
    layer's own offload, then waits for the offload of the group it prefetches with (hyper-parallel's
    order), and hooks the output's gradient to load them back in backward."""
    if getattr(layer, "_swap_hooked", False):
        return
    setattr(layer, "_swap_hooked", True)

    def pre(_module, _args):
        name = getattr(layer, "_swap_group_name", None)
        if name is not None:
            manager.start_forward(name)

    def post(_module, _args, output):
        name = getattr(layer, "_swap_group_name", None)
        prev = getattr(layer, "_swap_prev_group", None)
        if name is not None:
            protect = getattr(manager, "protect_alias_tensors", None)  # absent in older versions
            if protect is not None:
                protect(name, output)
            manager.launch_offload(name)
            _grad_hook(output, lambda: (manager.launch_load(name), manager.wait_load(name)))
        if prev is not None:
            manager.wait_offload(prev)
            _grad_hook(output, lambda: manager.launch_load(prev))

    layer.register_forward_pre_hook(pre, prepend=True)
    layer.register_forward_hook(post)
