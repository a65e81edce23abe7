"""hyper_parallel.platform.mindspore.activation_checkpoint.activation_swap (stand-in): the MindSpore wrapper.

SwapWrapper (a Cell) runs its layer under AsyncSaveOnCpu, a mindspore.saved_tensors_hooks whose pack
makes a SwapTensor of each eligible saved tensor and returns its index; unpack returns
SwapTensor.get_val(). Backward loads come from gradient hooks on the layers' outputs: on MindSpore 2.10's
CPU backend a Cell backward hook copies every tensor crossing the Cell, which would hide the bug."""

import mindspore as ms
from mindspore import nn

from hyper_parallel.core.activation_checkpoint import swap


def tensors_in(obj):
    return swap.tensors_in(obj, ms.Tensor)


def host_buffer(nbytes):
    return ms.mint.empty(nbytes, dtype=ms.uint8)


class AsyncSaveOnCpu(swap.SaveOnCpu, ms.saved_tensors_hooks):
    parameter_type = ms.Parameter

    def __init__(self, wrapper):
        swap.SaveOnCpu.__init__(self, wrapper)
        ms.saved_tensors_hooks.__init__(self, self.pack, self.unpack)


class SwapWrapper(nn.Cell):
    def __init__(self, module, policy_fn=None):
        super().__init__()
        self.module = module
        self.policy_fn = policy_fn

    def param_ptrs(self):
        return {p.untyped_storage().data_ptr() for p in self.module.get_parameters()}

    def construct(self, *args, **kwargs):
        with AsyncSaveOnCpu(self):
            return self.module(*args, **kwargs)


def swap_wrapper(module, policy_fn=None):
    return SwapWrapper(module, policy_fn)


set_attr = object.__setattr__


def on_grad(outputs, fn):
    """fn() when the gradient of the first output tensor arrives (the layer's backward is next)."""
    def hook(_grad):
        fn()
    for t in tensors_in(outputs):
        t.register_hook(hook)
        return
