"""swapagent.core owns what both framework companions share: the ctypes binding to the agent's C ABI v1,
storage-pointer collection over nested arguments, the storage-ops registry the agent calls to release and
restore storages, the per-layer reporter that turns framework hooks into ABI calls, and the rule that
finds each layer's backward enter and exit from gradient hooks on the tensors crossing it (no module or
Cell backward hook: those add autograd nodes, see Layer).

The companion decides nothing: it reports region boundaries (input and output storage pointers, plain
integers only), every storage saved for backward, and backward boundaries; the agent decides what stays on
the device and calls back into the registry to release (resize to 0) or restore (resize back) a storage.
"""

import collections
import ctypes
import dataclasses
import json
import logging
import os
import shutil
import threading
import warnings
import weakref

ABI_VERSION = 1

# Stable error codes and enums of swapagent.h.
OK = 0
EINVAL, EGROUP, EHANDLE, EORDER, ESTATE, ENOOPS, ERUNTIME, EDISABLED = -1, -2, -3, -4, -5, -6, -7, -8
ERROR_NAMES = {
    EINVAL: "EINVAL", EGROUP: "EGROUP", EHANDLE: "EHANDLE", EORDER: "EORDER",
    ESTATE: "ESTATE", ENOOPS: "ENOOPS", ERUNTIME: "ERUNTIME", EDISABLED: "EDISABLED",
}
SAVE_PARAM = 1
STATES = ("device", "d2h", "host", "h2d")
KEEP_REASONS = ("internal", "input", "output", "protected", "param", "shared", "small", "duplicate")

log = logging.getLogger("swapagent")

_uintptr = ctypes.c_size_t  # uintptr_t: pointer-sized on every platform the agent supports
RELEASE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, _uintptr, ctypes.c_size_t)
RESTORE_FN = ctypes.CFUNCTYPE(_uintptr, ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t)


class AgentError(RuntimeError):
    """The agent library cannot be found or loaded, or speaks another ABI."""


def version_tuple(version):
    """(major, minor) of a framework's version string such as "2.10.0" or "2.15.0+cpu"."""
    parts = []
    for p in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def group_name(index):
    """The group of the index-th wrapped layer (the same names the emulator workload uses)."""
    return "layer.%d" % index


LIB_NAME = "libswapagent.so"


def _repo_library():
    """<repo>/build/lib/libswapagent.so when this package is the source tree's shim/python/swapagent, else
    None (an installed wheel has no build tree beside it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    python = os.path.dirname(here)
    if os.path.basename(python) != "python" or os.path.basename(os.path.dirname(python)) != "shim":
        return None
    return os.path.normpath(os.path.join(python, "..", "..", "build", "lib", LIB_NAME))


def _path_library():
    """<dir>/../lib/libswapagent.so beside the `swapagent` command found on PATH (symbolic links followed):
    the layout of the release archive (bin/swapagent, lib/libswapagent.so), or None."""
    cli = shutil.which("swapagent")
    if cli is None:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(cli)), "..", "lib", LIB_NAME))


def library_candidates():
    """(origin, path) of every place load() looks for the agent when it is not preloaded, in order:
    $SWAPAGENT_LIB, $SWAPAGENT_HOME/lib, the source tree's build (only when this package is the source
    tree's), then beside the `swapagent` on PATH. An explicit setting (the first two) is never skipped:
    a missing file there is an error, not a reason to look further."""
    out = []
    if os.environ.get("SWAPAGENT_LIB"):
        out.append(("SWAPAGENT_LIB", os.environ["SWAPAGENT_LIB"]))
    if os.environ.get("SWAPAGENT_HOME"):
        out.append(("SWAPAGENT_HOME", os.path.join(os.environ["SWAPAGENT_HOME"], "lib", LIB_NAME)))
    for origin, path in (("source tree", _repo_library()), ("swapagent on PATH", _path_library())):
        if path is not None:
            out.append((origin, path))
    return out


def _find_library():
    cands = library_candidates()
    for origin, path in cands:
        if os.path.exists(path) or origin in ("SWAPAGENT_LIB", "SWAPAGENT_HOME"):
            return path
    tried = "; ".join("%s: %s" % c for c in cands) or "nothing to try"
    raise AgentError("swapagent: libswapagent.so is not preloaded and was not found (tried %s). Run the job "
                     "under `swapagent run`, or set SWAPAGENT_LIB to the library or SWAPAGENT_HOME to the "
                     "unpacked release (or `make build` in the source tree)" % tried)


class Agent:
    """The ABI of one loaded libswapagent.so; every method returns the agent's own result."""

    def __init__(self, lib, path, preloaded):
        self.lib, self.path, self.preloaded = lib, path, preloaded
        c = ctypes
        sig = {
            "swapagent_abi_version": (c.c_int, []),
            "swapagent_set_storage_ops": (c.c_int, [RELEASE_FN, RESTORE_FN, c.c_void_p]),
            "swapagent_region_enter": (c.c_int, [c.c_char_p, c.POINTER(_uintptr), c.c_size_t]),
            "swapagent_save": (c.c_int64, [c.c_char_p, _uintptr, c.c_size_t, c.c_uint32]),
            "swapagent_region_exit": (c.c_int, [c.c_char_p, c.POINTER(_uintptr), c.c_size_t]),
            "swapagent_protect": (c.c_int, [c.c_char_p, c.POINTER(_uintptr), c.c_size_t]),
            "swapagent_backward_enter": (c.c_int, [c.c_char_p]),
            "swapagent_unpack": (_uintptr, [c.c_int64]),
            "swapagent_backward_exit": (c.c_int, [c.c_char_p]),
            "swapagent_state": (c.c_int, [c.c_int64]),
            "swapagent_keep_reason": (c.c_int, [c.c_int64]),
            "swapagent_stats_json": (c.c_int, [c.c_char_p, c.c_size_t]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)  # AttributeError: not a swapagent library (checked by load())
            fn.restype, fn.argtypes = res, args
        # The keyword-aware region_enter is an additive extension: older libraries lack it.
        self._enter_kw = getattr(lib, "swapagent_region_enter_kw", None)
        if self._enter_kw is not None:
            self._enter_kw.restype = c.c_int
            self._enter_kw.argtypes = [c.c_char_p, c.POINTER(_uintptr), c.c_size_t, c.c_size_t]
        self._group_streams = getattr(lib, "swapagent_group_streams", None)  # additive, like the above
        if self._group_streams is not None:
            self._group_streams.restype = c.c_int
            self._group_streams.argtypes = [c.c_char_p, c.POINTER(_uintptr), c.c_size_t]
        self._warned = set()
        self._warn_lock = threading.Lock()

    @staticmethod
    def _array(ptrs):
        return (_uintptr * len(ptrs))(*ptrs) if ptrs else None

    def check(self, call, rc):
        """Logs a failed call once per (call, code); the job goes on, as the agent itself does."""
        if rc < 0:
            with self._warn_lock:
                key = (call, rc)
                if key in self._warned:
                    return rc
                self._warned.add(key)
            msg = "swapagent: %s returned %s (%d)" % (call, ERROR_NAMES.get(rc, "error"), rc)
            if rc == EDISABLED:
                msg += ": the agent is inert (init failed, forked child, or no offload engine); nothing is swapped"
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            log.warning(msg)
        return rc

    def abi_version(self):
        return self.lib.swapagent_abi_version()

    def set_storage_ops(self, release, restore):
        return self.check("set_storage_ops", self.lib.swapagent_set_storage_ops(release, restore, None))

    def region_enter(self, group, ptrs, n_positional):
        g = group.encode()
        if self._enter_kw is not None:
            rc = self._enter_kw(g, self._array(ptrs), len(ptrs), n_positional)
        else:
            rc = self.lib.swapagent_region_enter(g, self._array(ptrs), len(ptrs))
        return self.check("region_enter(%s)" % group, rc)

    def save(self, group, ptr, nbytes, flags):
        return self.check("save", self.lib.swapagent_save(group.encode(), ptr, nbytes, flags))

    def region_exit(self, group, ptrs):
        return self.check("region_exit(%s)" % group,
                          self.lib.swapagent_region_exit(group.encode(), self._array(ptrs), len(ptrs)))

    def protect(self, group, ptrs):
        return self.check("protect", self.lib.swapagent_protect(group.encode(), self._array(ptrs), len(ptrs)))

    def group_streams(self, group, streams):
        """Names the runtime streams (aclrtStream handles as integers) the group's kernels run on, for a
        framework that launches through paths the agent does not intercept. The agent orders its copies
        after them (docs/design.md, "Stream ordering"). A library without the call: a warning, no effect."""
        if self._group_streams is None:
            return self.check("group_streams(%s)" % group, EINVAL)
        return self.check("group_streams(%s)" % group,
                          self._group_streams(group.encode(), self._array(list(streams)), len(streams)))

    def backward_enter(self, group):
        return self.check("backward_enter(%s)" % group, self.lib.swapagent_backward_enter(group.encode()))

    def unpack(self, handle):
        return self.lib.swapagent_unpack(handle)

    def backward_exit(self, group):
        return self.check("backward_exit(%s)" % group, self.lib.swapagent_backward_exit(group.encode()))

    def state(self, handle):
        return self.lib.swapagent_state(handle)

    def keep_reason(self, handle):
        return self.lib.swapagent_keep_reason(handle)

    def stats_json(self):
        cap = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = self.lib.swapagent_stats_json(buf, cap)
            if n < 0:
                raise AgentError("swapagent_stats_json returned %d" % n)
            if n < cap:
                return buf.raw[:n].decode()
            cap = n + 1


_agent = None
_agent_lock = threading.Lock()


def load():
    """The agent: preloaded if it is, else the first of library_candidates(): $SWAPAGENT_LIB,
    $SWAPAGENT_HOME/lib/libswapagent.so, <repo>/build/lib/libswapagent.so (source tree only), or
    ../lib/libswapagent.so beside the `swapagent` command on PATH (the release archive's layout).

    Loading it here (not preloaded) is fine for tests and dry runs with include_cpu=True, but only a
    preloaded agent intercepts the runtime's calls."""
    global _agent
    with _agent_lock:
        if _agent is not None:
            return _agent
        lib, path, preloaded = None, None, False
        try:
            proc = ctypes.CDLL(None)
            if hasattr(proc, "swapagent_abi_version"):
                lib, path, preloaded = proc, "(preloaded)", True
        except OSError:
            pass
        if lib is None:
            path = _find_library()
            if not os.path.exists(path):
                raise AgentError("swapagent: libswapagent.so is not preloaded and %s does not exist "
                                 "(set SWAPAGENT_LIB or SWAPAGENT_HOME, or run `make build`)" % path)
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise AgentError("swapagent: cannot load %s: %s" % (path, e)) from None
        try:
            agent = Agent(lib, path, preloaded)
        except AttributeError as e:
            raise AgentError("swapagent: %s is not a swapagent library (%s)" % (path, e)) from None
        v = agent.abi_version()
        if v != ABI_VERSION:
            raise AgentError("swapagent: %s speaks ABI %d, this companion ABI %d" % (path, v, ABI_VERSION))
        _agent = agent
        return agent


def stats():
    """The agent's stats JSON as a dict (see architecture.md, "Stats JSON")."""
    return json.loads(load().stats_json())


# ---- storage pointers over nested arguments -------------------------------------------------------

def collect(obj, ptr_of, out=None, _depth=0, _seen=None):
    """Appends to out the storage pointer (a plain int, 0 for an empty storage) of every tensor found in
    obj, however nested in tuples, lists, namedtuples, dicts and dataclasses. ptr_of(x) returns the
    pointer of a tensor or None when x is not a tensor (or not one this companion reports).
    No reference to any tensor is kept."""
    if out is None:
        out = []
    p = ptr_of(obj)
    if p is not None:
        out.append(p)
        return out
    if _depth > 64 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return out
    if _seen is None:
        _seen = set()
    if id(obj) in _seen:
        return out
    if isinstance(obj, (tuple, list, dict)) or dataclasses.is_dataclass(obj):
        _seen.add(id(obj))
    if isinstance(obj, (tuple, list)):  # namedtuples are tuples
        for v in obj:
            collect(v, ptr_of, out, _depth + 1, _seen)
    elif isinstance(obj, dict):
        for v in obj.values():
            collect(v, ptr_of, out, _depth + 1, _seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            collect(getattr(obj, f.name, None), ptr_of, out, _depth + 1, _seen)
    return out


def tensors(obj, is_tensor):
    """The distinct tensors found in obj (same traversal as collect), in order; for the caller to hook
    right away (the list itself is not kept)."""
    out, ids = [], set()

    def keep(x):
        if not is_tensor(x):
            return None
        if id(x) not in ids:
            ids.add(id(x))
            out.append(x)
        return 0
    collect(obj, keep)
    return out


# ---- storage ops registry -------------------------------------------------------------------------

class Registry:
    """handle -> storage of every saved tensor the agent may ask to release or restore.

    Holds storage objects (never the tensors) from swapagent_save until the group's backward_exit. The
    framework part supplies resize(storage, nbytes) and data_ptr(storage)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}  # handle -> (storage, resize, data_ptr)
        self._by_group = collections.defaultdict(list)
        self.errors = []  # one line per failed release/restore, for diagnosis and tests
        # Kept alive for as long as the agent may call them: the process lifetime.
        self._release_cb = RELEASE_FN(self._release)
        self._restore_cb = RESTORE_FN(self._restore)
        self._installed = False

    def install(self, agent):
        if self._installed:
            return
        agent.set_storage_ops(self._release_cb, self._restore_cb)
        self._installed = True

    def add(self, group, handle, storage, resize, data_ptr):
        with self._lock:
            self._entries[handle] = (storage, resize, data_ptr)
            self._by_group[group].append(handle)

    def discard(self, handle):
        """The framework dropped the saved tensor (its graph was freed): nothing left to release or restore."""
        with self._lock:
            self._entries.pop(handle, None)

    def forget_group(self, group):
        with self._lock:
            for h in self._by_group.pop(group, ()):
                self._entries.pop(h, None)

    def __len__(self):
        with self._lock:
            return len(self._entries)

    def _get(self, handle):
        with self._lock:
            return self._entries.get(handle)

    def _fail(self, msg):
        self.errors.append(msg)
        log.error(msg)
        return msg

    def _release(self, _ctx, handle, ptr, nbytes):
        # Called by the agent (any thread): an exception must never cross back into C.
        try:
            e = self._get(handle)
            if e is None:
                self._fail("swapagent: release of unknown handle %d" % handle)
                return -1
            storage, resize, data_ptr = e
            cur = data_ptr(storage)
            if cur != ptr:
                self._fail("swapagent: release of handle %d at %#x, but its storage is at %#x" % (handle, ptr, cur))
                return -1
            resize(storage, 0)
            return 0
        except BaseException as ex:  # noqa: BLE001 - reported to the agent as a failed op
            self._fail("swapagent: release of handle %d failed: %s" % (handle, ex))
            return -1

    def _restore(self, _ctx, handle, nbytes):
        try:
            e = self._get(handle)
            if e is None:
                self._fail("swapagent: restore of unknown handle %d" % handle)
                return 0
            storage, resize, data_ptr = e
            resize(storage, nbytes)
            return data_ptr(storage)
        except BaseException as ex:  # noqa: BLE001
            self._fail("swapagent: restore of handle %d failed: %s" % (handle, ex))
            return 0


registry = Registry()


# ---- the per-layer reporter -----------------------------------------------------------------------

class Packed:
    """What the saved-tensor pack hook returns: the agent's handle, the saved tensor as an alias on its
    storage without autograd history (Framework.alias; the release resizes that storage in place, so
    holding it costs no device memory once released) and the forward (Pass) that saved it."""
    __slots__ = ("handle", "tensor", "pass_")

    def __init__(self, handle, tensor, pass_=None):
        self.handle, self.tensor, self.pass_ = handle, tensor, pass_

    def __del__(self):
        # Autograd frees saved tensors after their backward (or with a discarded graph): so does the
        # registry, so no storage outlives the graph that saved it; a freed tensor is never unpacked.
        try:
            registry.discard(self.handle)
            if self.pass_ is not None:
                self.pass_.layer.freed(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Framework:
    """What a framework part supplies to Layer; every method takes or returns plain values."""
    name = "?"

    def storage(self, t):
        """The storage of tensor t, or None when t is not a tensor this companion reports."""
        raise NotImplementedError

    # torch and MindSpore (>= 2.8) storages share this API: untyped_storage() objects with data_ptr(),
    # nbytes() and resize_(n). A framework part overrides these only where its storages differ.
    def storage_ptr(self, s):
        return s.data_ptr()

    def storage_nbytes(self, s):
        return s.nbytes()

    def resize(self, s, nbytes):
        s.resize_(nbytes)

    def param_ptrs(self, module):
        raise NotImplementedError

    def alias(self, t):
        """A tensor on t's storage without t's autograd history, for Packed to hold: holding t itself
        makes a reference cycle (t -> its grad_fn -> the saved tensor -> Packed -> t) when an operation
        saves its own output, which nothing breaks if that node never runs (a graph dropped without
        backward, a backward that does not need it): the graph, its storages and the agent's handles
        would stay forever. The unpacked tensor gets its autograd history back from the framework."""
        return t

    # Backward boundaries (see Layer): gradient hooks on tensors, never module/Cell backward hooks.
    def takes_grad(self, x):
        """True when x is a tensor of this framework whose gradient is computed (its hook can fire)."""
        raise NotImplementedError

    def grad_hook(self, t, fn):
        """Registers fn(grad) (returns None: the gradient is unchanged) as a gradient hook of tensor t and
        returns a function that removes it, or None when t takes no hook. Must add no autograd node."""
        raise NotImplementedError

    def at_backward_end(self, fn):
        """Queues fn() to run once the backward pass running now is over; False when none is running (or
        the framework cannot tell)."""
        return False


# ---- gradient hooks on the tensors crossing a region ----------------------------------------------

INPUT, OUTPUT = 0, 1


class _Call:
    """One forward's callback on a boundary tensor's gradient: fires at most once."""
    __slots__ = ("pass_", "kind", "fired")

    def __init__(self, pass_, kind):
        self.pass_, self.kind, self.fired = pass_, kind, False

    def dead(self):
        p = self.pass_
        if self.fired or p.layer.removed or p.exited:
            return True
        # An output call only matters until its forward entered backward; an input call only while its
        # forward is the group's latest (an older forward never reports its exit, see Layer).
        return p.entered if self.kind == OUTPUT else p is not p.layer.latest

    def fire(self):
        if self.fired:
            return
        self.fired = True
        layer = self.pass_.layer
        if self.kind == INPUT:
            layer.input_grad(self.pass_)
        else:
            layer.output_grad(self.pass_)


class _Chain:
    """The one gradient hook the companion puts on a tensor, whatever number of layers it crosses. A
    tensor that leaves layer g-1 and enters layer g runs layer g's input calls (backward exit) before
    layer g-1's output calls (backward enter): the order in which the two backwards really follow each
    other, whatever order the calls were added in. Holds no tensor (only plain state of the forwards)."""
    __slots__ = ("inputs", "outputs", "remove", "__weakref__")

    def __init__(self):
        self.inputs, self.outputs, self.remove = [], [], None

    def __call__(self, _grad):
        for calls in (self.inputs, self.outputs):
            for c in list(calls):
                try:
                    c.fire()
                except Exception:  # noqa: BLE001 - a hook must never break the training step
                    log.exception("swapagent: gradient hook failed")
        self.prune()
        return None

    def add(self, call):
        self.prune()
        (self.inputs if call.kind == INPUT else self.outputs).append(call)

    def prune(self):
        self.inputs[:] = [c for c in self.inputs if not c.dead()]
        self.outputs[:] = [c for c in self.outputs if not c.dead()]

    def empty(self):
        return not self.inputs and not self.outputs


_chains = {}  # id(tensor) -> (weak reference to the tensor, _Chain); the entry goes with the tensor
_chains_lock = threading.RLock()


def chain(fw, t):
    """The _Chain hooked on tensor t (registered once per tensor), or None when t takes no hook."""
    key = id(t)
    with _chains_lock:
        e = _chains.get(key)
        if e is not None and e[0]() is t:
            return e[1]

    def gone(ref, key=key):
        with _chains_lock:
            e = _chains.get(key)
            if e is not None and e[0] is ref:
                del _chains[key]
    try:
        ref = weakref.ref(t, gone)
    except TypeError:
        return None
    ch = _Chain()
    try:
        ch.remove = fw.grad_hook(t, ch)
    except (RuntimeError, TypeError, ValueError):  # a tensor that takes no gradient
        ch.remove = None
    if ch.remove is None:
        return None
    with _chains_lock:
        _chains[key] = (ref, ch)
    return ch


def unhook_removed():
    """Drops the calls of removed layers from every live tensor, and the hooks left without calls."""
    with _chains_lock:
        entries = list(_chains.items())
    for key, (ref, ch) in entries:
        ch.prune()
        if ch.empty():
            try:
                ch.remove()
            except Exception:  # noqa: BLE001 - the tensor is going away
                pass
            with _chains_lock:
                if _chains.get(key, (None,))[0] is ref:
                    del _chains[key]


class Pass:
    """One forward of a layer, from its region enter until its backward exit. Plain state, no tensor."""
    __slots__ = ("layer", "entered", "exited", "inputs_left", "ended", "__weakref__")

    def __init__(self, layer):
        self.layer = layer
        self.entered = self.exited = self.ended = False
        self.inputs_left = 0  # positional inputs whose gradient has not arrived yet


class Layer:
    """Reports one wrapped module (group) to the agent. The framework part registers the forward and
    saved-tensor hooks and forwards them here.

    Backward enter and exit come from gradient hooks on the tensors that cross the region (the
    framework's Tensor.register_hook, which adds no autograd node), never from module backward hooks:
    torch's full backward hooks wrap a module's inputs and outputs in extra autograd nodes
    (BackwardHookFunction), which changes the order in which the gradients of a tensor used by several
    consumers are summed, so the gradients change in their last bits; MindSpore's Cell backward hooks
    make every save of a crossing tensor a copy. Per forward of the group:

    - backward enter: at the first of (a) the gradient of any output tensor arrives (outputs found
      however nested: tuples, lists, dicts, dataclasses), (b) the first unpack of a tensor it saved;
    - backward exit: once it entered, as soon as no tensor the group saved is still waiting for its
      unpack (each one was unpacked, or freed by the framework) and the gradient of every positional
      input tensor that takes one has arrived. A layer none of whose positional inputs takes a gradient
      exits at its last unpack. If an input's gradient never comes (the layer does not differentiate
      through it, the backward asks for other gradients only), the exit comes at the end of the
      backward pass (the framework's final callback, queued at enter) once nothing waits for an unpack;
      at the latest the group's next forward ends it (the agent's implicit exit on region_enter).
    An exit never precedes an unpack of the group: after it the agent forgets the group's handles.
    Only the group's latest forward reports its exit: the agent tracks one forward per group.
    """

    def __init__(self, agent, fw, module, group, include_cpu):
        self.agent, self.fw, self.module, self.group = agent, fw, module, group
        self.include_cpu = include_cpu
        self._params = frozenset()
        self._ptr_of = self._make_ptr_of()
        # (handle, storage ptr, nbytes, flags) of every save of the latest forward: plain ints, for
        # inspection (keep reasons, states) and tests.
        self.saved = []
        self.removed = False  # set by Handle.remove(): hooks still attached to in-flight tensors go quiet
        self.latest = None  # the Pass of the latest forward
        self._waiting = set()  # handles saved (by any forward) neither unpacked nor freed yet
        self._lock = threading.RLock()  # re-entrant: Packed.__del__ may run inside a locked section

    def _make_ptr_of(self):
        fw = self.fw

        def ptr_of(x):
            s = fw.storage(x)
            if s is None:
                return None
            # An empty storage has no usable address whatever the framework still stores: report 0 so
            # the agent sees a released storage being passed in.
            return fw.storage_ptr(s) if fw.storage_nbytes(s) > 0 else 0
        return ptr_of

    def pointers(self, obj):
        return collect(obj, self._ptr_of)

    def forward_pre(self, args, kwargs):
        self.maybe_exit()  # a previous forward that only waited for a freed tensor ends now
        self._params = frozenset(self.fw.param_ptrs(self.module))
        self.saved = []
        p = Pass(self)
        with self._lock:
            self.latest = p
        # Backward exit waits for the gradient of each positional input that takes one.
        for t in tensors(args, self.fw.takes_grad):
            ch = chain(self.fw, t)
            if ch is not None:
                with self._lock:
                    p.inputs_left += 1
                ch.add(_Call(p, INPUT))
        ptrs = collect(args, self._ptr_of)
        n_pos = len(ptrs)
        collect(kwargs or {}, self._ptr_of, ptrs)
        self.agent.region_enter(self.group, ptrs, n_pos)

    def forward_post(self, output):
        self.agent.region_exit(self.group, collect(output, self._ptr_of))
        self._params = frozenset()
        p = self.latest
        if p is None:
            return
        # Backward enter: the first gradient of an output (however nested) to arrive.
        for t in tensors(output, self.fw.takes_grad):
            ch = chain(self.fw, t)
            if ch is not None:
                ch.add(_Call(p, OUTPUT))

    def pack(self, t):
        fw = self.fw
        s = fw.storage(t)
        if s is None:
            return t
        nbytes = fw.storage_nbytes(s)
        ptr = fw.storage_ptr(s)
        if nbytes == 0 or ptr == 0:  # nothing to move (hyper-parallel skips empty storages too)
            return t
        flags = SAVE_PARAM if ptr in self._params else 0
        h = self.agent.save(self.group, ptr, nbytes, flags)
        if h < 0:
            return t
        registry.add(self.group, h, s, fw.resize, fw.storage_ptr)
        self.saved.append((h, ptr, nbytes, flags))
        with self._lock:
            self._waiting.add(h)
        return Packed(h, fw.alias(t), self.latest)

    def unpack(self, p):
        if not isinstance(p, Packed):
            return p
        if p.pass_ is not None:
            self.enter(p.pass_)  # the first unpack of a forward not yet entered enters it (and prefetches)
        base = self.agent.unpack(p.handle)
        if base == 0:
            self.agent.check("unpack(%d)" % p.handle, ERUNTIME)
        with self._lock:
            self._waiting.discard(p.handle)
        self.maybe_exit()
        return p.tensor

    def freed(self, handle):
        """The framework freed a saved tensor (Packed.__del__): it will never be unpacked. No agent call
        from here (it may run inside one, from the garbage collector): the next hook reports the exit."""
        with self._lock:
            self._waiting.discard(handle)

    # gradient hook calls (_Call.fire) and the framework's end-of-backward callback
    def output_grad(self, p):
        self.enter(p)

    def input_grad(self, p):
        with self._lock:
            p.inputs_left -= 1
        self.maybe_exit()

    def backward_end(self, p):
        with self._lock:
            p.ended = True
        self.maybe_exit()

    def enter(self, p):
        with self._lock:
            if p.entered or p.exited or self.removed:
                return
            p.entered = True
        self.agent.backward_enter(self.group)

        def end():
            try:
                self.backward_end(p)
            except Exception:  # noqa: BLE001 - never break the framework's backward
                log.exception("swapagent: end-of-backward callback failed")
        try:
            self.fw.at_backward_end(end)
        except Exception:  # noqa: BLE001 - not in a backward pass (an unpack outside one)
            pass
        self.maybe_exit()

    def maybe_exit(self):
        """Reports the backward exit of the latest forward once the rule in the class comment holds."""
        with self._lock:
            p = self.latest
            if p is None or self.removed or not p.entered or p.exited or self._waiting:
                return
            if p.inputs_left > 0 and not p.ended:
                return
            p.exited = True
        self.agent.backward_exit(self.group)
        registry.forget_group(self.group)


class Handle:
    """What layer_swap returns: remove() takes every hook off again (also the gradient hooks still on
    live tensors)."""

    def __init__(self, layers, removers):
        self.layers = layers
        self._removers = removers

    @property
    def groups(self):
        return [l.group for l in self.layers]

    def remove(self):
        for l in self.layers:
            l.removed = True
        while self._removers:
            self._removers.pop()()
        unhook_removed()


def select(layers, swap):
    """(index, module) pairs to wrap: all when swap is None, else the given indices (checked)."""
    layers = list(layers)
    if swap is None:
        idx = range(len(layers))
    else:
        idx = sorted(set(int(i) for i in swap))
        bad = [i for i in idx if i < 0 or i >= len(layers)]
        if bad:
            raise ValueError("swapagent: swap indices %s out of range for %d layers" % (bad, len(layers)))
    return [(i, layers[i]) for i in idx]


def start(prefetch):
    """Loads the agent, installs the storage ops once, and checks prefetch against the agent's."""
    agent = load()
    registry.install(agent)
    if prefetch is not None:
        try:
            have = json.loads(agent.stats_json()).get("prefetch")
        except (AgentError, ValueError):
            have = None
        if have is not None and int(have) != int(prefetch):
            warnings.warn("swapagent: prefetch=%d asked, but the agent prefetches %d groups: the agent reads "
                          "SWAPAGENT_PREFETCH at load" % (prefetch, have), RuntimeWarning, stacklevel=3)
    return agent
