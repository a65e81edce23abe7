"""swapagent.torch: the torch (>= 2.0) companion. It registers, per wrapped module, a forward pre-hook with
kwargs (region enter with positional and keyword input pointers, saved-tensor hooks pushed) and a forward
hook (region exit with output pointers, hooks popped). Backward enter and exit come from gradient hooks on
the tensors crossing the module (Tensor.register_hook on its outputs and positional inputs) and from the
first and last unpack of what it saved (core.Layer), never from module backward hooks: those wrap the
module's inputs and outputs in extra autograd nodes and change the gradients of a tensor that feeds more
than one consumer in their last bits. The agent releases and restores saved storages through
untyped_storage().resize_().

    import swapagent.torch as sa
    h = sa.layer_swap(model.layers, swap=range(11))
    ...
    h.remove()
"""

import inspect
import sys

import torch as _torch

from . import core

stats = core.stats
group_name = core.group_name

MIN_VERSION = (2, 0)


def _check_version():
    sig = inspect.signature(_torch.nn.Module.register_forward_pre_hook).parameters
    if core.version_tuple(_torch.__version__) < MIN_VERSION or "with_kwargs" not in sig or \
            not hasattr(_torch.autograd.graph, "saved_tensors_hooks"):
        raise RuntimeError("swapagent.torch needs torch >= 2.0 (register_forward_pre_hook(with_kwargs=True), "
                           "torch.autograd.graph.saved_tensors_hooks); found torch %s" % _torch.__version__)


class Torch(core.Framework):
    name = "torch"
    tensor_type = _torch.Tensor

    def __init__(self, include_cpu):
        self.include_cpu = include_cpu

    def storage(self, t):
        if not isinstance(t, _torch.Tensor):
            return None
        if not self.include_cpu and t.is_cpu:
            return None
        if t.is_meta:
            return None
        try:
            return t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse layouts, functional wrappers: no storage
            return None

    def saved(self, t):
        # Framework.saved, inlined: it runs for every saved tensor (a meta tensor's storage has pointer 0:
        # not reported).
        if not isinstance(t, _torch.Tensor) or (not self.include_cpu and t.is_cpu):
            return None
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        return s, s.data_ptr(), s.nbytes()

    counts_holders = True

    def holders(self, storage, aliases):
        # The storage's other tensors and storage objects: the job's, another layer's or an autograd node's.
        if storage is None:
            return None
        extra = _storage_extra(storage, aliases)
        return extra if extra >= 0 else None  # fewer than its own: a count this code misreads

    def saved_holders(self, storage, saved):
        # Three counts: the storage's other tensors and storage objects (a view or alias the job or another
        # layer holds), each saved tensor's use count (a C++ holder: an autograd node that saved it without
        # hooks) and its Python references (a variable or list of the job's, another layer's SwapTensor).
        vals, aliases = {}, 0
        for st in saved:
            v = st.__dict__.get("val")
            if v is None:
                return None
            e = vals.get(id(v))
            vals[id(v)] = (v, 1 if e is None else e[1] + 1)
            aliases += core.is_packed(st.__dict__.get("_swapagent_packed"))
        c = _calibration()
        extra = _storage_extra(storage, len(vals) + aliases)
        for v, held in vals.values():
            extra += (v._use_count() - c[1]) + (sys.getrefcount(v) - c[2] - held)  # pylint: disable=protected-access
        if extra < 0:
            return None  # fewer than its own: a count this code misreads
        if not extra:
            return 0, 0, 0
        # the layer's own among them: the bases its backward hooks' views keep, and the values hyper-parallel's
        # pack hook handed autograd (one reference each, the guard marks them)
        bases = _own_bases(vals)
        handed = sum(1 for st in saved if st.__dict__.get("_swapagent_handed"))
        return extra, bases + handed, (core.OWN_VIEW_BASE if bases else 0) | (core.OWN_PACKED if handed else 0)

    def param_ptrs(self, module, cache=None):
        """The parameters' and buffers' storage pointers. With a cache: the submodules are walked again
        only after a module was registered anywhere (module.modules() is most of the cost; torch's module
        registration hook counts them), and the pointer set is rebuilt only when a parameter or buffer was
        added, replaced or moved (module.to(), FSDP's flat parameters, p.data = ...): every call reads the
        current _parameters and _buffers of every submodule and their data_ptr."""
        if cache is None:
            return self.storage_ptrs(list(module.parameters()) + list(module.buffers()))
        if cache.get("gen") != _modules_registered[0] or _register is None:
            mods = list(module.modules())
            cache["gen"] = _modules_registered[0]
            cache["dicts"] = [d for m in mods for d in (m._parameters, m._buffers)]  # pylint: disable=protected-access
        ts = [t for d in cache["dicts"] for t in d.values() if t is not None]
        try:
            key = tuple([t.data_ptr() for t in ts])
        except (RuntimeError, NotImplementedError):
            return self.storage_ptrs(ts)
        if key != cache.get("key"):
            cache["key"], cache["ptrs"] = key, self.storage_ptrs(ts)
        return cache["ptrs"]

    # Framework.alias: t.detach(), the same storage and version counter without grad_fn; the method itself,
    # so the pack hook calls into torch directly.
    alias = staticmethod(_torch.Tensor.detach)

    # Tensor.register_hook puts the hook on the tensor's grad_fn (or, for a leaf, its gradient
    # accumulator) as a pre-hook that sees the fully summed gradient: no node is added, so the order in
    # which autograd sums gradients is the one of the unhooked model.
    def takes_grad(self, x):
        return isinstance(x, _torch.Tensor) and x.requires_grad

    def grad_hook(self, t, fn):
        return t.register_hook(fn).remove

    def at_backward_end(self, fn):
        try:
            _queue_callback(fn)
        except RuntimeError:  # "Final callbacks can only be installed during backward pass"
            return False
        return True


# ---- counting holders: each count is read against the same count of a fresh tensor ----------------------

_calibrated = []


def _calibration():
    """What the holder counts read for a fresh tensor held once by a dict entry, as saved_holders holds a
    saved tensor: the storage's count less its one tensor, the tensor's use count, its Python references
    (the dict entry's, the loop's name and getrefcount's own argument)."""
    if not _calibrated:
        t = _torch.empty(1)
        vals = {id(t): (t, 1)}
        del t
        for v, _ in vals.values():
            py = sys.getrefcount(v)
            s = v.untyped_storage()
            _calibrated.append((_torch._C._storage_Use_Count(s._cdata) - 1,  # pylint: disable=protected-access
                                v._use_count(), py))  # pylint: disable=protected-access
    return _calibrated[0]


_calibrated_base = []


def _base_calibration():
    """What the counts of a view's base read when nothing but that one view holds it (its Python object made
    once and dropped, as a layer input's is): its use count and its Python references, held as _own_bases
    holds one."""
    if not _calibrated_base:
        t = _torch.empty(1)
        view = t.view_as(t)
        del t
        bases = {id(view._base): (view._base, 1)}  # pylint: disable=protected-access
        for b, _ in bases.values():
            _calibrated_base.append((b._use_count(), sys.getrefcount(b)))  # pylint: disable=protected-access
    return _calibrated_base[0]


def _own_bases(vals):
    """How many tensors on the storage are bases of the saved tensors (vals: id -> (tensor, count)) that
    nothing but those views holds: a backward hook's view of a layer input (the module's full backward hooks
    hand the layer a view of each input) keeps its base alive only to be that view. A base anything else
    holds (a variable, another view) reads above the calibration and is no own holder."""
    bases = {}
    for v, _ in vals.values():
        base = v._base  # pylint: disable=protected-access
        if base is not None and id(base) not in vals:
            e = bases.get(id(base))
            bases[id(base)] = (base, 1 if e is None else e[1] + 1)
        del base
    if not bases:
        return 0
    c, own = _base_calibration(), 0
    for b, views in bases.values():
        if b._use_count() - c[0] == views - 1 and sys.getrefcount(b) == c[1]:  # pylint: disable=protected-access
            own += 1
    return own


def _storage_extra(storage, own):
    """The tensor and storage objects on storage (its use count) beyond own of them, less what a fresh
    tensor's storage object reads; negative when the count is misread."""
    return _torch._C._storage_Use_Count(storage._cdata) - _calibration()[0] - own  # pylint: disable=protected-access


# Modules registered (assigned as an attribute, add_module, register_module) anywhere since import: a
# wrapped layer's cached list of submodules is made again when this moved. The global hook stays for the
# process (it only counts). Without it (older torch) every forward walks the submodules again.
_modules_registered = [0]


def _module_registered(_module, _name, _submodule):
    _modules_registered[0] += 1


_register = getattr(_torch.nn.modules.module, "register_module_module_registration_hook", None)
if _register is not None:
    _register(_module_registered)


def layer_swap(layers, swap=None, prefetch=1, include_cpu=False):
    """Reports the given modules (swap: the indices to wrap, all when None) to the agent as groups
    layer.<i>; returns a handle whose remove() takes every hook off."""
    _check_version()
    agent = core.start(prefetch)
    fw = Torch(include_cpu)
    removers, wrapped = [], []
    always = "always_call" in inspect.signature(_torch.nn.Module.register_forward_hook).parameters
    count = agent.asks().get("holders", False)
    try:
        for i, module in core.select(layers, swap):
            if not isinstance(module, _torch.nn.Module):
                raise TypeError("swapagent.torch.layer_swap: layer %d is a %s, not a torch.nn.Module"
                                % (i, type(module).__name__))
            layer = core.Layer(agent, fw, module, core.group_name(i), include_cpu)
            wrapped.append(layer)
            if count:
                removers.append(module.register_forward_pre_hook(
                    lambda _m, args, kwargs, layer=layer: core.count_holders(layer, args, kwargs),
                    with_kwargs=True).remove)
            removers.extend(_install(module, layer, always))
    except BaseException:
        while removers:
            removers.pop()()
        raise
    return core.Handle(wrapped, removers)


# fn runs once the current backward pass ends (RuntimeError outside one): Torch.at_backward_end.
_queue_callback = _torch.autograd.Variable._execution_engine.queue_callback  # pylint: disable=protected-access
# torch's own push and pop of the default saved-tensor hooks, what saved_tensors_hooks' __enter__ and __exit__
# call: the region hooks call them without a context object each forward. None where this torch lacks them.
_autograd = _torch._C._autograd  # pylint: disable=protected-access
_push_hooks = getattr(_autograd, "_push_saved_tensors_default_hooks", None)
_pop_hooks = getattr(_autograd, "_pop_saved_tensors_default_hooks", None)


def _install(module, layer, always):
    kw = {"always_call": True} if always else {}
    forward_pre, forward_post = layer.forward_pre, layer.forward_post
    pack, unpack = layer._pack, layer._unpack  # pylint: disable=protected-access
    if _push_hooks is not None and _pop_hooks is not None:
        push, pop = _push_hooks, _pop_hooks
    else:
        contexts = []

        def push(pk, up):
            ctx = _torch.autograd.graph.saved_tensors_hooks(pk, up)
            ctx.__enter__()
            contexts.append(ctx)

        def pop():
            contexts.pop().__exit__(None, None, None)
    pushed = [0]  # saved-tensor hooks pushed by the pre-hook and not yet popped by the forward hook

    def pre(_mod, args, kwargs):
        forward_pre(args, kwargs)
        push(pack, unpack)
        pushed[0] += 1
        return None

    def post(_mod, _args, output):
        try:
            if pushed[0]:
                pushed[0] -= 1
                pop()
        finally:
            forward_post(output)
        return None

    # No register_full_backward_pre_hook / register_full_backward_hook: see core.Layer.
    handles = [
        module.register_forward_pre_hook(pre, with_kwargs=True),
        module.register_forward_hook(post, **kw),
    ]
    return [h.remove for h in handles]
