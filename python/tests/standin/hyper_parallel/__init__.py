"""A stand-in for hyper-parallel (tests only): the public shape of its layer swap, with its issue-294 bug.

The real package is not on the package index, and its code cannot live in this repository. This one has
what swapagent's guard and its tests meet in an unmodified job: the module paths of every version
(hyper_parallel.core.activation_checkpoint.swap with the platform wrappers, and the newest
hyper_parallel.core.activation_memory.swap), swap_wrapper, SwapManager with set_forward_prefetch_layer,
SwapTensor whose wait_offload releases with untyped_storage().resize_(0), protect_alias_tensors(group,
output), hooks registered without kwargs, and the bug: only the wrapped layer's output is protected, so a
keyword input saved by a layer (RoPE's rotary_cos_sin) is released under every later layer.

Like hyper-parallel, it swaps only tensors it takes for device tensors (str(device) != "cpu"); the test
switch HYPER_PARALLEL_STANDIN_DEVICE=1 makes CPU tensors count, so the swap runs on CPU.

Names the stand-in does not model (DTensor and the like, which MindFormers imports) are import-only
placeholders: classes no object is an instance of."""


def placeholders(module_name, namespace):
    """A module __getattr__ that answers every other public name with a placeholder class, kept in
    namespace (the module's globals) so that the same name gives the same class."""
    def getattr_(name):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = namespace[name] = type(name, (), {"__module__": module_name})
        return cls
    return getattr_


__getattr__ = placeholders(__name__, globals())
