"""The newest layout's torch wrapper: pack returns tensor.detach() and unpack finds its SwapTensor."""

from hyper_parallel.platform.torch.activation_checkpoint import activation_swap as _torch
from ._backend import SwapManager, SwapTensor


class AsyncSaveOnCpu(_torch.AsyncSaveOnCpu):
    def pack(self, t):
        got = super().pack(t)
        if not isinstance(got, tuple):
            return got
        d = t.detach()
        self.wrapper.packed[id(d)] = SwapManager().get(*got)
        return d

    def unpack(self, packed):
        st = self.wrapper.packed.pop(id(packed), None)
        return packed if st is None else st.get_val()


class SwapWrapper(_torch.SwapWrapper):
    def __init__(self, module, policy_fn=None):
        super().__init__(module, policy_fn)
        self.packed = {}

    def forward(self, *args, **kwargs):
        with AsyncSaveOnCpu(self):
            return self.module(*args, **kwargs)


def swap_wrapper(module, policy_fn=None):
    return SwapWrapper(module, policy_fn)

