"""swapagent.guard: makes the job's own layer swap safe without a change to its code.

hyper-parallel's swap (driven by MindFormers' YAML `swap:` section, or called directly) releases every
storage its layers saved with untyped_storage().resize_(0), the RoPE tables every layer receives as a
keyword input included (issue 294). Installed by `swapagent run`'s bootstrap (swapagent/_bootstrap), the
guard waits for the job to import hyper-parallel's swap (any module path in WATCHED) and then:

- reports every wrapped layer to the agent as a group named as hyper-parallel names it (swap_group_<n>):
  its region, positional and keyword inputs with their argument paths, its outputs, its parameters and each
  storage hyper-parallel saves (a SwapTensor), and its backward, through core.Layer as the companions do;
  the group is declared guarded (SWAPAGENT_CALL_GUARD): the agent moves none of its storages itself;
- asks the agent before each storage release the framework attempts (UntypedStorage.resize_(0), torch's
  and MindSpore's) of a storage a guarded layer saved, and obeys: a storage the tracker holds external
  (input, output, parameter, shared with another live group) keeps its memory, every other release goes
  ahead and is recorded as an offload with its bytes;
- never lets a later copy back (UntypedStorage.copy_, hyper-parallel's load) overwrite a kept storage with
  the stale bytes copied out of it, nor resizes it again;
- where the agent asks it (under safe: the stats' asks.keep_inputs), also hands hyper-parallel's
  protect_alias_tensors the layer's inputs, where it has that method, so hyper-parallel does not even copy
  them out.

The decision is the agent's (tracker/ and offload/guard.go): this module only reports and obeys. It never
imports a framework or hyper-parallel itself. A failure inside it is logged once and turns it into pass-
through: the job then runs as it would without swapagent. docs/guard.md has the details and the limits."""

import fnmatch
import importlib.abc
import logging
import os
import re
import sys
import threading
import warnings
import weakref

from . import core

log = logging.getLogger("swapagent")

# hyper-parallel's swap modules, in every version read (reference: hyper-parallel-swap.md).
WATCHED = frozenset((
    "hyper_parallel.core.activation_checkpoint",
    "hyper_parallel.core.activation_checkpoint.swap",
    "hyper_parallel.core.activation_memory.api",
    "hyper_parallel.core.activation_memory.swap",
    "hyper_parallel.core.activation_memory.wrapper",
    "hyper_parallel.platform.torch.activation_checkpoint.activation_swap",
    "hyper_parallel.platform.mindspore.activation_checkpoint.activation_swap",
))

_PATCHED = "_swapagent_guarded"  # marks a class, function or module the guard has patched


class Guard:
    """The process's guard: its agent, what the agent asks of it, the layers it reports and the storages it
    answered for."""

    def __init__(self):
        self.agent = None
        self.failed = False
        self.keep_inputs = False  # the agent asks that the job's swap be told to keep a layer's inputs
        self.layers = {}  # id(wrapper module) -> GuardLayer
        self.tls = threading.local()  # .open: the stack of guarded layers inside their forward
        self.saved_by = {}  # storage pointer -> GuardLayer that saved it (this step)
        # storage pointer -> {GuardLayer: a weak reference to the input tensor it received there}
        self.input_of = {}
        # storage key -> [GuardLayer, storage object, refused releases]: kept on device after a refused
        # release; as many later copies into it (the framework's loads of what it believes it released: one
        # per group that saved it) are skipped.
        self.kept = {}
        # storage key -> (GuardLayer, storage object, the agent's token): released with the agent's consent;
        # its resize back is reported (SWAPAGENT_CALL_GUARD_RESTORE).
        self.released = {}
        self.tails = set()  # the groups that end a prefetch chain: never offloaded (_patch_manager)
        self.lock = threading.RLock()

    # ---- failure containment ----
    def fail(self, what, ex):
        """Turns the guard into pass-through after an internal error: said once, never raised to the job."""
        if not self.failed:
            self.failed = True
            msg = "swapagent: guard disabled after an internal error in %s: %s: %s; the job's swap now runs " \
                  "unguarded" % (what, type(ex).__name__, ex)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            log.error(msg)

    def start(self):
        """The agent, loaded on first use; None (the guard off) when there is none."""
        if self.agent is not None or self.failed:
            return self.agent
        try:
            self.agent = core.load()
            self.keep_inputs = self.agent.asks().get("keep_inputs", False)
            core.note_control_calls(self.agent)
        except core.AgentError as ex:
            self.fail("loading the agent", ex)
        return self.agent

    # ---- layers ----
    def attach(self, module, path=None):
        """Reports module (a hyper-parallel wrapper, or the layer at module path `path` named by
        SWAPAGENT_GUARD_LAYERS) as a guarded group from its next forward on."""
        if self.failed or id(module) in self.layers:
            return
        fw = framework_of(module)
        if fw is None or self.start() is None:
            return
        gl = GuardLayer(self, fw, module, len(self.layers), path)
        self.layers[id(module)] = gl
        _hook_layer(fw, module, gl)

    def open_layer(self):
        st = getattr(self.tls, "open", None)
        return st[-1] if st else None

    def forget_storages(self, gl):
        """gl's previous step is over (its next forward begins): what it answered for is done with."""
        gl.swaps = {}
        with self.lock:
            for p, layers in list(self.input_of.items()):
                layers.pop(gl, None)
                if not layers:
                    del self.input_of[p]
            for d in (self.kept, self.released):
                for k in [k for k, v in d.items() if v[0] is gl]:
                    del d[k]
            for p in [p for p, g in self.saved_by.items() if g is gl]:
                del self.saved_by[p]

    # ---- storage releases and restores (UntypedStorage.resize_ / copy_) ----
    def on_resize(self, storage, n, key, orig):
        """The framework resizes storage to n bytes; returns what resize_ returns."""
        if getattr(core.agent_op, "active", False):  # the agent's own release or restore (a companion's region)
            return orig(storage, n)
        if n == 0:
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            gl = self.saved_by.get(ptr) if ptr and nbytes else None
            if gl is not None:
                # a companion's region (core.Layer) counts no holders: its storages decide by their role
                held = gl.holders(storage, ptr) if isinstance(gl, GuardLayer) else UNCOUNTED
                answer, token = self.agent.guard_release(None, ptr, nbytes, *held)
                if answer == core.RELEASE_KEEP:
                    with self.lock:
                        e = self.kept.get(key)
                        if e is None:
                            self.kept[key] = [gl, storage, 1]
                        else:
                            e[0], e[2] = gl, e[2] + 1
                    return storage
                out = orig(storage, 0)
                if answer == core.RELEASE_ALLOW and token:
                    with self.lock:
                        self.released[key] = (gl, storage, token)
                return out
        elif key in self.kept and storage.nbytes() == n:
            return storage  # it never lost its memory: nothing to give back
        else:
            ent = self.released.get(key)
            if ent is not None:
                out = orig(storage, n)
                with self.lock:
                    self.released.pop(key, None)
                self.agent.guard_restore(ent[2], storage.data_ptr(), n)
                return out
        return orig(storage, n)

    def on_copy(self, storage, key):
        """True when a copy into storage must be skipped: it is a kept storage, and the copy would bring back
        the bytes copied out of it before a release the guard refused."""
        with self.lock:
            e = self.kept.get(key)
            if e is None:
                return False
            e[2] -= 1
            if e[2] <= 0:
                del self.kept[key]
            return True


class GuardLayer:
    """One guarded layer: the companions' per-layer reporter (core.Layer) on hyper-parallel's saves, or, for
    a layer named by SWAPAGENT_GUARD_LAYERS (path: its module path), on the tensors crossing its boundary:
    swap code the guard does not know saves nothing it can see, so the storages that must never be
    released (inputs, outputs) are what it reports, each kept until the layer's next forward."""

    def __init__(self, guard, fw, module, index, path=None):
        self.guard, self.fw, self.module, self.index, self.path = guard, fw, module, index, path
        self.layer = None  # core.Layer, made at the first forward (the group name is wired by then)
        self.inputs = None
        self.boundary = []  # path layers: the Packed of the boundary tensors reported as saves
        self.swaps = {}  # storage pointer -> weak references to the SwapTensors hyper-parallel made on it
        self.nested = False  # this forward runs inside another guarded layer's, in its group (pre)

    def group(self):
        if self.path is not None:
            return self.path
        name = getattr(self.module, "_swap_group_name", None)
        if not isinstance(name, str) or not name:
            name = "swap_group_%d" % self.index  # not wired by hyper-parallel: its scheme, our count
        return name

    def pre(self, args, kwargs):
        g = self.guard
        if g.failed:
            return
        try:
            # A wrapper hyper-parallel named no group of its own (its swap_wrapper inside a block that the
            # prefetch chain names) saves into the group of the layer around it: one agent group per
            # hyper-parallel group, the region left to that layer.
            self.nested = (self.path is None and not getattr(self.module, "_swap_group_name", None)
                           and g.open_layer() is not None)
            if self.nested:
                return
            name = self.group()
            if self.layer is None or self.layer.group != name:
                if g.agent.guard(name) == core.EDISABLED:  # an inert agent (msrun's scheduler): stay out
                    g.failed = True
                    return
                self.layer = core.Layer(g.agent, self.fw, self.module, name, True)
                self.layer.st.guarded = True
            g.forget_storages(self)
            self.boundary = []  # the previous forward's: its backward is over
            self.layer.forward_pre(args, kwargs)
            self.inputs = (args, kwargs) if g.keep_inputs or self.path is not None else None
            st = getattr(g.tls, "open", None)
            if st is None:
                st = g.tls.open = []
            st.append(self)
        except Exception as ex:  # noqa: BLE001 - never break the job's forward
            g.fail("the forward pre-hook of %s" % self.group(), ex)

    def post(self, output):
        g = self.guard
        st = getattr(g.tls, "open", None)
        if st and st[-1] is self:
            st.pop()
        if g.failed or self.layer is None or self.nested:
            return
        try:
            if self.path is not None:
                for _, t in core.walk_named((self.inputs, output), self.fw.is_tensor, "", []):
                    self.saved(None, t)
                self.inputs = None
            self.layer.forward_post(output)
            if self.inputs is not None:
                protect = getattr(_manager(), "protect_alias_tensors", None)
                if protect is not None:
                    protect(self.layer.group, self.shared_inputs())
            self.inputs = None
        except Exception as ex:  # noqa: BLE001
            g.fail("the forward hook of %s" % self.layer.group, ex)

    def saved(self, swap_tensor, tensor):
        """hyper-parallel made a SwapTensor of tensor inside this layer's forward (None: a boundary tensor of
        a path layer)."""
        pk = self.layer._pack(tensor)  # pylint: disable=protected-access
        if core.is_packed(pk):
            if swap_tensor is None:
                self.boundary.append(pk)
            else:
                swap_tensor._swapagent_packed = pk  # pylint: disable=protected-access
            ptr = self.fw.ptr(tensor)
            if ptr:
                self.guard.saved_by[ptr] = self
                if swap_tensor is not None:
                    self.swaps.setdefault(ptr, []).append(weakref.ref(swap_tensor))

    def shared_inputs(self):
        """The inputs hyper-parallel need not even copy: those another guarded layer of this step also
        received (RoPE's tables, a mask), held beyond this layer. Every other input is left to its swap and
        its release decided by its holders then (an input nothing else holds any more may go); where the
        framework counts no holders, the role keeps every input, so all of them."""
        counted = self.fw.counts_holders
        seen, out, ptr_of = self.guard.input_of, [], self.fw.ptr
        for _, t in core.walk_named(self.inputs, self.fw.is_tensor, "", []):
            ptr = ptr_of(t)
            layers = seen.setdefault(ptr, {}) if ptr else {}
            # Another layer's entry counts while its tensor is still on this storage: a previous step's input
            # released (resized to 0) may have left its address to a new tensor before that layer's next
            # forward forgot it.
            shared = any(gl is not self and (r is None or (r() is not None and ptr_of(r()) == ptr))
                         for gl, r in layers.items())
            if shared or not counted:
                out.append(t)
            try:
                layers[self] = weakref.ref(t)
            except TypeError:  # a tensor type without weak references: taken as still there
                layers[self] = None
        return out

    def holders(self, storage, ptr):
        """(the references to storage outside this layer's saved tensors, how many of them are the layer's
        own machinery, their kinds) as its framework counts them, UNCOUNTED where it cannot:
        the evidence SWAPAGENT_CALL_GUARD_RELEASE takes (tracker.Outside and Releasable decide)."""
        sts = [st for st in (r() for r in self.swaps.get(ptr, ())) if st is not None]
        n = self.fw.saved_holders(storage, sts) if sts else None
        return UNCOUNTED if n is None else n


_guard = Guard()


def _companion_saves(layer, ptrs):
    """A companion's region saved these storages: a release other code attempts of one of them is asked of
    the agent too (the engine keeps what it moves or what is owned outside)."""
    g = _guard
    if g.failed or g.start() is None:
        return
    if layer.fw.name not in _POST_HOOK:
        return
    _part(layer.fw.name)  # the framework's UntypedStorage, patched
    for p in ptrs:
        g.saved_by[p] = layer


# ---- the holders' evidence ---------------------------------------------------------------------------

# SWAPAGENT_CALL_GUARD_RELEASE's "the framework cannot tell" (any negative count), and the whole evidence of a
# storage whose holders are not counted: (holders, the layer's own among them, their kinds).
HOLDERS_UNKNOWN = -1
UNCOUNTED = (HOLDERS_UNKNOWN, 0, 0)


# ---- framework parts ---------------------------------------------------------------------------------

def framework_of(module):
    """The companion's framework part for module (torch or MindSpore), or None."""
    torch, ms = sys.modules.get("torch"), sys.modules.get("mindspore")  # None: a job that blocked the import
    if torch is not None and isinstance(module, torch.nn.Module):
        return _part("torch")
    if ms is not None and isinstance(module, ms.nn.Cell):
        return _part("mindspore")
    return None


_parts = {}  # framework name -> its guard part (the companion's core.Framework)
_manager_class = []  # hyper-parallel's SwapManager class, once patched


def _part(name):
    """The guard's framework part (the companion's, CPU tensors counting: hyper-parallel decided what is a
    device tensor), made once; making it patches that framework's UntypedStorage."""
    p = _parts.get(name)
    if p is None:
        if name == "torch":
            from . import torch as sat  # pylint: disable=import-outside-toplevel
            p, storage = sat.Torch(True), sys.modules["torch"].UntypedStorage
            key = lambda s: s._cdata  # noqa: E731 pylint: disable=protected-access
        else:
            from . import mindspore as sam  # pylint: disable=import-outside-toplevel
            from mindspore.common.storage import UntypedStorage as storage  # pylint: disable=import-outside-toplevel
            p, key = sam.MindSpore(True), id  # MindSpore hands out one storage object per tensor
        _parts[name] = p
        _patch_storage(storage, key)
    return p


# The forward hook's options per framework: torch runs it on an exception too (the region always exits).
_POST_HOOK = {"torch": {"always_call": True}, "mindspore": {}}


def _hook_layer(fw, module, gl):
    """The guard's hooks on a layer, before the job's own (prepend): region enter with the inputs, kwargs
    included; region exit with the outputs, before hyper-parallel's forward hook releases anything."""
    def pre(_m, args, kwargs):
        gl.pre(args, kwargs)

    def post(_m, _args, output):
        gl.post(output)
    module.register_forward_pre_hook(pre, with_kwargs=True, prepend=True)
    module.register_forward_hook(post, prepend=True, **_POST_HOOK[fw.name])


def _manager():
    """hyper-parallel's SwapManager (a singleton), or None before its module was imported."""
    return _manager_class[-1]() if _manager_class else None


def _patch_storage(cls, key_of):
    """Wraps the framework's UntypedStorage.resize_ and copy_ (class attributes: every call from Python,
    hyper-parallel's included, goes through them). With nothing guarded yet each costs one dict lookup."""
    if getattr(cls, _PATCHED, False):
        return
    resize, copy = cls.resize_, cls.copy_
    g = _guard

    def resize_(self, n, *args, **kwargs):
        if args or kwargs or g.failed or (not g.saved_by and not g.kept and not g.released):
            return resize(self, n, *args, **kwargs)
        try:
            key = key_of(self)
        except Exception:  # noqa: BLE001 - not a storage the guard can follow
            return resize(self, n)
        try:
            return g.on_resize(self, int(n), key, resize)
        except Exception as ex:  # noqa: BLE001 - the guard goes pass-through, the job goes on
            g.fail("UntypedStorage.resize_", ex)
            return resize(self, n)

    def copy_(self, src, *args, **kwargs):
        if g.kept and not g.failed:
            try:
                if g.on_copy(self, key_of(self)):
                    return self
            except Exception as ex:  # noqa: BLE001
                g.fail("UntypedStorage.copy_", ex)
        return copy(self, src, *args, **kwargs)

    cls.resize_, cls.copy_ = resize_, copy_
    setattr(cls, _PATCHED, True)


# ---- hyper-parallel's classes and functions ----------------------------------------------------------

def _then(fn, what, action):
    """fn, followed by action(fn's result, fn's arguments...), contained: an exception in action turns the
    guard into pass-through, and fn's result is returned whatever happens."""
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        if not _guard.failed:
            try:
                action(out, *args, **kwargs)
            except Exception as ex:  # noqa: BLE001 - never break the job
                _guard.fail(what, ex)
        return out
    wrapped.__wrapped__, wrapped.__doc__, wrapped.__name__ = fn, fn.__doc__, getattr(fn, "__name__", what)
    setattr(wrapped, _PATCHED, True)
    return wrapped


def _saved(_out, swap_tensor, *args, **kwargs):
    """SwapTensor(tensor, ...) is made by hyper-parallel's pack hook for each tensor it will swap: the
    tensor's storage is a save of the open layer. Handed to AsyncSaveOnCpu's pack hook (tls.made) only
    inside it: a reference kept past it would keep the tensor and its graph alive after hyper-parallel."""
    if getattr(_guard.tls, "packing", False):
        _guard.tls.made = swap_tensor
    gl = _guard.open_layer()
    if gl is not None and gl.layer is not None:
        t = next((a for a in list(args) + list(kwargs.values()) if gl.fw.is_tensor(a)), None)
        if t is not None:
            gl.saved(swap_tensor, t)
    elif gl is None and _guard.layers and not _in_tail():
        say_unguarded("SwapTensor", "a tensor saved outside every layer it reports (swap(fn, ...) of a plain "
                                    "function, swap_tensor_wrapper outside a wrapped or chained layer)")


def _in_tail():
    m = _manager()  # hyper-parallel's current group ends a chain (Guard.tails): it never offloads it
    return m is not None and getattr(m, "get_current_group_name", lambda: None)() in _guard.tails


def _unpacked(_val, swap_tensor, *_args, **_kwargs):
    """SwapTensor.get_val() is hyper-parallel's unpack: the layer's backward bookkeeping (core.Layer)."""
    pk = swap_tensor.__dict__.get("_swapagent_packed")
    if pk is not None:
        pk.pass_.layer._unpack(pk)  # pylint: disable=protected-access


def _patch_swap_tensor(cls):
    if getattr(cls, _PATCHED, False):
        return
    cls.__init__ = _then(cls.__init__, "SwapTensor.__init__", _saved)
    if getattr(cls, "get_val", None) is not None:
        cls.get_val = _then(cls.get_val, "SwapTensor.get_val", _unpacked)
    setattr(cls, _PATCHED, True)


def _patch_save_on_cpu(cls):
    """hyper-parallel's AsyncSaveOnCpu (a saved_tensors_hooks): its pack hook is wrapped to mark the SwapTensor
    whose value it hands autograd (the newest layout returns the swap tensor's detached value, not an index).
    Autograd holds that value for the layer's backward: one reference the holders' count sees, the layer's
    own (Torch.saved_holders)."""
    if getattr(cls, _PATCHED, False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        pack = getattr(self, "pack_hook", None)
        if pack is None or _guard.failed:
            return
        tls = _guard.tls

        def pack_hook(t):
            tls.made, tls.packing = None, True
            try:
                out = pack(t)
            finally:
                tls.packing = False
            st, tls.made = tls.made, None
            if st is not None and st.__dict__.get("val") is out:
                st._swapagent_handed = True  # pylint: disable=protected-access
            return out
        self.pack_hook = pack_hook
    __init__.__wrapped__ = init
    cls.__init__ = __init__
    setattr(cls, _PATCHED, True)


def _patch_manager(cls):
    """set_forward_prefetch_layer(first, second) wires the layers hyper-parallel swaps: first is attached
    (a wrapper made before the guard was installed is found here). The group of a second never a first ends
    the chain: hyper-parallel never offloads it in any layout read, so nothing there goes unasked."""
    if cls not in _manager_class:
        _manager_class.append(cls)
    if getattr(cls, _PATCHED, False):
        return
    cls.set_forward_prefetch_layer = _then(cls.set_forward_prefetch_layer, "SwapManager.set_forward_prefetch_layer",
                                           lambda _out, _self, *a, **k: _chained(a, k))
    setattr(cls, _PATCHED, True)


def _chained(args, kwargs):
    """set_forward_prefetch_layer's layers by position or name (hyper-parallel's first_layer, second_layer)."""
    got = list(args[:2])
    for names in (("first_layer", "first"), ("second_layer", "second"))[len(got):]:
        got.append(next((kwargs[n] for n in names if n in kwargs), None))
    first, second = got
    _guard.attach(first)
    with _guard.lock:
        _guard.tails.discard(getattr(first, "_swap_group_name", None))
        name = getattr(second, "_swap_group_name", None)
        if isinstance(name, str) and id(second) not in _guard.layers:
            _guard.tails.add(name)


def _wrap_swap_wrapper(fn):
    if getattr(fn, _PATCHED, False):
        return fn
    return _then(fn, "swap_wrapper", lambda w, *a, **k: _guard.attach(w))


def _wrap_swap_call(fn):
    """swap(function, *args, ...) (the newest layout) runs function under hyper-parallel's swap without a
    wrapper: a module is attached first, as a swap_wrapper's would be, so its region is reported."""
    if getattr(fn, _PATCHED, False):
        return fn

    def swap(function, *args, **kwargs):
        if not _guard.failed:
            try:
                _guard.attach(function)
            except Exception as ex:  # noqa: BLE001 - never break the job
                _guard.fail("swap", ex)
        return fn(function, *args, **kwargs)
    swap.__wrapped__, swap.__doc__, swap.__name__ = fn, fn.__doc__, "swap"
    setattr(swap, _PATCHED, True)
    return swap


def patch_module(mod):
    """Patches what a watched hyper-parallel module defines or re-exports (idempotent)."""
    cls = getattr(mod, "SwapTensor", None)
    if isinstance(cls, type):
        _patch_swap_tensor(cls)
    cls = getattr(mod, "SwapManager", None)
    if isinstance(cls, type):
        _patch_manager(cls)
    cls = getattr(mod, "AsyncSaveOnCpu", None)
    if isinstance(cls, type):
        _patch_save_on_cpu(cls)
    fn = getattr(mod, "swap_wrapper", None)
    if callable(fn):
        mod.swap_wrapper = _wrap_swap_wrapper(fn)
    fn = getattr(mod, "swap", None)
    if callable(fn) and not isinstance(fn, type(sys)):
        mod.swap = _wrap_swap_call(fn)


# ---- layers named by SWAPAGENT_GUARD_LAYERS (torch) --------------------------------------------------

def layer_patterns(value=None):
    """The module-path patterns of SWAPAGENT_GUARD_LAYERS ("model.layers.*", fnmatch's syntax), split on
    commas and white space."""
    v = os.environ.get(EnvGuardLayers, "") if value is None else value
    return [p for p in re.split(r"[,\s]+", v.strip()) if p]


def _watch_torch_layers(torch, patterns):
    """A global forward pre-hook names every module the first time a module tree is called (its paths
    from the module called first, the model) and attaches the guard to the ones the patterns match."""
    seen = weakref.WeakSet()

    def name_tree(module, _args):
        if module in seen or _guard.failed:
            return
        try:
            for path, m in module.named_modules():
                if m in seen:
                    continue
                seen.add(m)
                if path and any(fnmatch.fnmatchcase(path, p) for p in patterns):
                    _guard.attach(m, path)
        except Exception as ex:  # noqa: BLE001
            _guard.fail("SWAPAGENT_GUARD_LAYERS", ex)
    torch.nn.modules.module.register_module_forward_pre_hook(name_tree)


# ---- the import hook --------------------------------------------------------------------------------

# What hyper-parallel's swap defines in every layout read: a module of hyper_parallel that defines one of
# these itself, outside WATCHED, is swap code in a layout the guard does not know.
SWAP_NAMES = ("SwapTensor", "SwapManager", "swap_wrapper", "swap_tensor_wrapper", "AsyncSaveOnCpu")
_unknown = []  # "module (names)" of each such module, said once


def check_unknown(mod):
    """Says once, on stderr and in the trace (python_guard_unknown), that mod, a hyper_parallel module the
    guard does not watch, defines hyper-parallel's swap: the guard cannot ask before its releases."""
    defined = vars(mod)  # what the module itself defines: a module __getattr__ answers any name
    names = [n for n in SWAP_NAMES if getattr(defined.get(n), "__module__", None) == mod.__name__]
    if names:
        say_unguarded("%s (%s)" % (mod.__name__, ", ".join(names)),
                      "hyper-parallel's swap in a layout the guard does not know")


def say_unguarded(what, why):
    """Once per what: on stderr, and in the trace (python_guard_unknown), which the report prints."""
    entry = "%s: %s" % (what, why)
    if entry in _unknown:
        return
    _unknown.append(entry)
    sys.stderr.write("swapagent: not guarded: %s; its releases go unasked\n" % entry)
    if _guard.start() is not None:
        _guard.agent.note("python_guard_unknown", "; ".join(_unknown))


class _Finder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: finds nothing itself; for a watched module it lets the other finders find
    it and runs patch_module right after the module's own code, before any importer binds its names; any
    other module of hyper_parallel is checked for swap code the guard does not know (check_unknown)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED and fullname not in _after_import and not fullname.startswith("hyper_parallel."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _Loader(loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = self.inner  # reloads and introspection see the real loader
        module.__loader__ = self.inner
        self.inner.exec_module(module)
        try:
            if module.__name__ in _after_import:
                _after_import.pop(module.__name__)(module)
            elif module.__name__ in WATCHED:
                patch_module(module)
            else:
                check_unknown(module)
        except Exception as ex:  # noqa: BLE001
            _guard.fail("patching %s" % module.__name__, ex)


_installed = False
_after_import = {}  # module name -> what to do once it is imported (SWAPAGENT_GUARD_LAYERS: torch)
EnvGuardLayers = "SWAPAGENT_GUARD_LAYERS"


def install():
    """Installs the import hook (idempotent) and patches the watched modules already imported."""
    global _installed
    if _installed:
        return
    _installed = True
    patterns = layer_patterns()
    if patterns:
        def torch_imported(torch):
            _watch_torch_layers(torch, patterns)
        if sys.modules.get("torch") is not None:
            torch_imported(sys.modules["torch"])
        else:
            _after_import["torch"] = torch_imported
    core.watch(_companion_saves, _guard.forget_storages)
    sys.meta_path.insert(0, _Finder())
    for name in WATCHED:
        mod = sys.modules.get(name)
        if mod is not None:
            patch_module(mod)
    for name, mod in list(sys.modules.items()):
        if name.startswith("hyper_parallel.") and name not in WATCHED and mod is not None:
            check_unknown(mod)
