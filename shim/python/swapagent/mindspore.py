"""swapagent.mindspore: the MindSpore (>= 2.8, PyNative) companion. Per wrapped Cell it registers a forward
pre-hook with kwargs (region enter with positional and keyword input pointers), the Cell's saved-tensor
hooks (each saved storage reported with swapagent_save), a forward hook (region exit with output
pointers), and backward pre/post hooks (backward enter/exit); the agent releases and restores saved
storages through Tensor.untyped_storage().resize_().

    import swapagent.mindspore as sa
    h = sa.layer_swap(model.layers, swap=range(11))
"""

import inspect

import mindspore as _ms

from . import core

stats = core.stats
group_name = core.group_name

MIN_VERSION = (2, 8)


def _version():
    parts = []
    for p in _ms.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _check_version():
    cell = _ms.nn.Cell
    ok = _version() >= MIN_VERSION
    ok = ok and "with_kwargs" in inspect.signature(cell.register_forward_pre_hook).parameters
    ok = ok and all(hasattr(cell, n) for n in ("register_saved_tensors_hooks", "register_backward_pre_hook",
                                                "register_backward_hook"))
    ok = ok and hasattr(_ms.Tensor, "untyped_storage")
    if not ok:
        raise RuntimeError("swapagent.mindspore needs MindSpore >= 2.8 (Cell.register_forward_pre_hook("
                           "with_kwargs=True), Cell.register_saved_tensors_hooks, Tensor.untyped_storage); "
                           "found MindSpore %s" % _ms.__version__)


def _is_cpu(t):
    dev = getattr(t, "device", None)
    if dev is None:
        return _ms.get_context("device_target") == "CPU"
    return str(dev).upper().startswith("CPU")


class MindSpore(core.Framework):
    name = "mindspore"

    def __init__(self, include_cpu):
        self.include_cpu = include_cpu

    def storage(self, t):
        if not isinstance(t, _ms.Tensor):
            return None
        if not self.include_cpu and _is_cpu(t):
            return None
        try:
            return t.untyped_storage()
        except (RuntimeError, TypeError, ValueError):  # a tensor without device data (e.g. not yet init)
            return None

    def storage_ptr(self, s):
        return s.data_ptr()

    def storage_nbytes(self, s):
        return s.nbytes()

    def resize(self, s, nbytes):
        s.resize_(nbytes)

    def param_ptrs(self, module):
        ptrs = set()
        tensors = [p for _, p in module.parameters_and_names()]
        if hasattr(module, "buffers"):
            tensors += list(module.buffers())
        for t in tensors:
            s = self.storage(t)
            if s is not None and s.nbytes() > 0:
                ptrs.add(s.data_ptr())
        return ptrs


def layer_swap(layers, swap=None, prefetch=1, include_cpu=False):
    """Reports the given Cells (swap: the indices to wrap, all when None) to the agent as groups layer.<i>;
    returns a handle whose remove() takes every hook off. PyNative mode only (hooks do not run in graphs)."""
    _check_version()
    agent = core.start(prefetch)
    fw = MindSpore(include_cpu)
    removers, wrapped = [], []
    try:
        for i, cell in core.select(layers, swap):
            if not isinstance(cell, _ms.nn.Cell):
                raise TypeError("swapagent.mindspore.layer_swap: layer %d is a %s, not a mindspore.nn.Cell"
                                % (i, type(cell).__name__))
            layer = core.Layer(agent, fw, cell, core.group_name(i), include_cpu)
            wrapped.append(layer)
            removers.extend(_install(cell, layer))
    except BaseException:
        while removers:
            removers.pop()()
        raise
    return core.Handle(wrapped, removers)


def _install(cell, layer):
    if cell._saved_tensors_pack_hook is not None:  # pylint: disable=protected-access
        raise ValueError("swapagent.mindspore.layer_swap: %s already has saved-tensor hooks"
                         % type(cell).__name__)

    def pre(_cell, args, kwargs):
        layer.forward_pre(args, kwargs)
        return None

    def post(_cell, _args, output):
        layer.forward_post(output)
        return None

    def bwd_pre(_cell, _grad_output):
        layer.backward_enter()
        return None

    def bwd_post(_cell, _grad_input, _grad_output):
        layer.backward_exit()
        return None

    handles = [
        cell.register_forward_pre_hook(pre, with_kwargs=True),
        cell.register_forward_hook(post),
        cell.register_backward_pre_hook(bwd_pre),
        cell.register_backward_hook(bwd_post),
    ]
    # The Cell runs construct inside these hooks itself (and pops them on an exception).
    cell.register_saved_tensors_hooks(layer.pack, layer.unpack)

    def drop_saved_hooks():
        if cell._saved_tensors_pack_hook == layer.pack:  # pylint: disable=protected-access
            object.__setattr__(cell, "_saved_tensors_pack_hook", None)
            object.__setattr__(cell, "_saved_tensors_unpack_hook", None)

    return [h.remove for h in handles] + [drop_saved_hooks]
