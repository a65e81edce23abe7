"""swapagent.mindspore: the MindSpore (>= 2.8, PyNative) companion. Per wrapped Cell it registers a forward
pre-hook with kwargs (region enter with positional and keyword input pointers), the Cell's saved-tensor
hooks (each saved storage reported with swapagent_save) and a forward hook (region exit with output
pointers). Backward enter and exit come from gradient hooks on the tensors crossing the Cell and from the
unpacks of what it saved (the rule is core.Layer's, shared with torch); the agent releases and restores
saved storages through Tensor.untyped_storage().resize_().

    import swapagent.mindspore as sa
    h = sa.layer_swap(model.layers, swap=range(11))
"""

import inspect
import operator

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
    tensor_type = _ms.Tensor

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

    def saved(self, t):
        # Framework.saved, inlined: it runs for every saved tensor.
        if not isinstance(t, _ms.Tensor) or (not self.include_cpu and _is_cpu(t)):
            return None
        try:
            s = t.untyped_storage()
        except (RuntimeError, TypeError, ValueError):
            return None
        return s, s.data_ptr(), s.nbytes()

    def param_ptrs(self, module, cache=None):
        """The parameters' and buffers' storage pointers. With a cache: the Cell tree is walked again only
        when a Cell of it got another child Cell (cells_and_names is most of the cost), and the pointer set
        is rebuilt only when a parameter or buffer was replaced or its data moved (set_data, ...): every
        call still reads the current _params and _buffers of every Cell."""
        if cache is None:
            return self.storage_ptrs(_param_tensors([module], expand=True))
        cells = cache.get("cells")
        shape = None
        if cells is not None:
            shape = tuple(id(c) for cell in cells for c in cell._cells.values())  # pylint: disable=protected-access
        if cells is None or shape != cache.get("shape"):
            cells = cache["cells"] = [c for _, c in module.cells_and_names()]
            cache["shape"] = tuple(id(c) for cell in cells for c in cell._cells.values())  # pylint: disable=protected-access
            cache.pop("key", None)
        ts = _param_tensors(cells)
        try:
            key = tuple([t.data_ptr() for t in ts])
        except (RuntimeError, TypeError, ValueError):
            return self.storage_ptrs(ts)
        if key != cache.get("key"):
            cache["key"], cache["ptrs"] = key, self.storage_ptrs(ts)
        return cache["ptrs"]

    # Framework.alias. MindSpore 2.10 has no Tensor.detach. Tensor.data is a tensor on the same storage (a
    # release or restore through one is seen by the other) without autograd history, as ops.stop_gradient's
    # result, at a fraction of its cost (no operator dispatch: 0.5 us against 18 us on CPU); read by
    # attrgetter, so the pack hook calls into MindSpore directly.
    alias = staticmethod(operator.attrgetter("data"))

    def takes_grad(self, x):
        if not isinstance(x, _ms.Tensor):
            return False
        # Parameter.requires_grad; a computed tensor carries _requires_grad (False for one that depends on
        # nothing differentiable: MindSpore accepts a hook on it, which then never fires).
        rg = getattr(x, "requires_grad", None)
        if not isinstance(rg, bool):
            rg = getattr(x, "_requires_grad", True)
        return bool(rg)

    def grad_hook(self, t, fn):
        return t.register_hook(fn).remove

    def at_backward_end(self, fn):
        # MindSpore 2.10 has it on the PyNative executor (private); without it the exit rule's other
        # triggers apply (core.Layer).
        queue = getattr(_executor(), "queue_backward_final_callback", None)
        if queue is None:
            return False
        try:
            queue(fn)
        except (RuntimeError, TypeError, ValueError):  # "can only be installed during backward pass"
            return False
        return True


def _param_tensors(cells, expand=False):
    """The parameters (their initialised tensors, as Cell.parameters_and_names gives them) and buffers
    of the given Cells (and of all their sub-Cells when expand)."""
    if expand:
        cells = [c for cell in cells for _, c in cell.cells_and_names()]
    ts = []
    for cell in cells:
        for p in cell._params.values():  # pylint: disable=protected-access
            if p is not None and getattr(p, "inited_param", None) is not None:
                p = p.inited_param
            if p is not None:
                ts.append(p)
        ts.extend(b for b in getattr(cell, "_buffers", {}).values() if b is not None)  # pylint: disable=protected-access
    return ts


def _executor():
    try:
        from mindspore.common.api import _pynative_executor  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return _pynative_executor


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

    # Backward enter and exit come from gradient hooks on the tensors crossing the Cell (core.Layer), not
    # from Cell.register_backward_pre_hook/register_backward_hook: in MindSpore 2.10 a Cell backward hook
    # wraps the tensors crossing the Cell, and every save of such a tensor becomes a copy, so inputs would
    # no longer be recognised as inputs (and each would be stored again).
    handles = [
        cell.register_forward_pre_hook(pre, with_kwargs=True),
        cell.register_forward_hook(post),
    ]
    # The Cell runs construct inside these hooks itself (and pops them on an exception).
    cell.register_saved_tensors_hooks(layer._pack, layer._unpack)  # pylint: disable=protected-access

    def drop_saved_hooks():
        if cell._saved_tensors_pack_hook is layer._pack:  # pylint: disable=protected-access
            object.__setattr__(cell, "_saved_tensors_pack_hook", None)
            object.__setattr__(cell, "_saved_tensors_unpack_hook", None)

    return [h.remove for h in handles] + [drop_saved_hooks]
