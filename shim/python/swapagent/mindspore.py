"""swapagent.mindspore: the MindSpore (>= 2.8, PyNative) companion. Per wrapped Cell it registers a forward
pre-hook with kwargs (region enter with positional and keyword input pointers), the Cell's saved-tensor
hooks (each saved storage reported with swapagent_save), a forward hook (region exit with output
pointers), and gradient hooks on the tensors crossing the Cell for backward enter (first output gradient)
and exit (all positional input gradients); the agent releases and restores saved storages through
Tensor.untyped_storage().resize_().

    import swapagent.mindspore as sa
    h = sa.layer_swap(model.layers, swap=range(11))
"""

import inspect
import weakref

import mindspore as _ms

from . import core

stats = core.stats
group_name = core.group_name

MIN_VERSION = (2, 8)


def _check_version():
    cell = _ms.nn.Cell
    ok = core.version_tuple(_ms.__version__) >= MIN_VERSION
    ok = ok and "with_kwargs" in inspect.signature(cell.register_forward_pre_hook).parameters
    ok = ok and hasattr(cell, "register_saved_tensors_hooks")
    ok = ok and hasattr(_ms.Tensor, "untyped_storage") and hasattr(_ms.Tensor, "register_hook")
    if not ok:
        raise RuntimeError("swapagent.mindspore needs MindSpore >= 2.8 (Cell.register_forward_pre_hook("
                           "with_kwargs=True), Cell.register_saved_tensors_hooks, Tensor.untyped_storage, "
                           "Tensor.register_hook); found MindSpore %s" % _ms.__version__)


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


def _tensors(obj, out):
    if isinstance(obj, _ms.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            _tensors(v, out)
    return out


class _Chain:
    """The one gradient hook this companion puts on a tensor, running callbacks in order. A tensor that
    leaves layer g-1 and enters layer g carries layer g's backward exit first, then layer g-1's backward
    enter: the order torch's module hooks give, whatever order the hooks were registered in."""
    __slots__ = ("calls", "__weakref__")

    def __init__(self):
        self.calls = []

    def __call__(self, _grad):
        for c in list(self.calls):
            c()


_chains = {}  # id(tensor) -> (weakref to the tensor, _Chain); the entry goes when the tensor does


def _chain(t):
    key = id(t)
    e = _chains.get(key)
    if e is not None and e[0]() is t:
        return e[1]
    ch = _Chain()
    try:
        ref = weakref.ref(t, lambda _r, key=key: _chains.pop(key, None))
        t.register_hook(ch)
    except (RuntimeError, TypeError, ValueError):  # a tensor that takes no gradient
        return None
    _chains[key] = (ref, ch)
    return ch


def _on_grads(tensors, fn, all_of):
    """Calls fn once: when the gradient of every tensor (all_of; the call goes first on each tensor) or
    of the first one has arrived. Nothing here holds a tensor."""
    pending = [0 if all_of else 1]

    def call():
        if pending[0] > 0:
            pending[0] -= 1
            if pending[0] == 0:
                fn()
    for t in tensors:
        ch = _chain(t)
        if ch is None:
            continue
        if all_of:
            pending[0] += 1
            ch.calls.insert(0, call)
        else:
            ch.calls.append(call)


def _install(cell, layer):
    if cell._saved_tensors_pack_hook is not None:  # pylint: disable=protected-access
        raise ValueError("swapagent.mindspore.layer_swap: %s already has saved-tensor hooks"
                         % type(cell).__name__)

    def pre(_cell, args, kwargs):
        layer.forward_pre(args, kwargs)
        # Backward exit: once the gradients of all positional tensor inputs are done.
        _on_grads(_tensors(args, []), layer.backward_exit, all_of=True)
        return None

    def post(_cell, _args, output):
        layer.forward_post(output)
        # Backward enter: when the first gradient of an output arrives, before the Cell's backward.
        _on_grads(_tensors(output, []), layer.backward_enter, all_of=False)
        return None

    # Tensor gradient hooks, not Cell.register_backward_pre_hook/register_backward_hook: in MindSpore 2.10
    # a Cell backward hook wraps the tensors crossing the Cell, and every save of such a tensor becomes a
    # copy, so inputs would no longer be recognised as inputs (and each would be stored again).
    handles = [
        cell.register_forward_pre_hook(pre, with_kwargs=True),
        cell.register_forward_hook(post),
    ]
    # The Cell runs construct inside these hooks itself (and pops them on an exception).
    cell.register_saved_tensors_hooks(layer.pack, layer.unpack)

    def drop_saved_hooks():
        if cell._saved_tensors_pack_hook == layer.pack:  # pylint: disable=protected-access
            object.__setattr__(cell, "_saved_tensors_pack_hook", None)
            object.__setattr__(cell, "_saved_tensors_unpack_hook", None)

    return [h.remove for h in handles] + [drop_saved_hooks]
