"""swapagent.binding owns the companions' one way to the agent library: finding and loading it, and the
ctypes binding to its control calls. Every call beyond the fixed v1 functions is one record (struct
swapagent_call, whose fields _abi.py has from swapagent.h) given to swapagent_call; Agent's methods build it.
"""

import array
import ctypes
import json
import os
import shutil
import threading
import warnings
import logging

from ._abi import (
    ABI_VERSION, CALL_BACKWARD_ENTER, CALL_BACKWARD_EXIT, CALL_DESCRIBE, CALL_FIELDS, CALL_GROUP_STREAMS, CALL_GUARD,
    CALL_GUARD_RELEASE, CALL_GUARD_RESTORE, CALL_HOLDERS, CALL_NOTE, CALL_PROTECT, CALL_QUEUEING, CALL_REGION_ENTER,
    CALL_REGION_EXIT, CALL_SAVE, EDISABLED, EINVAL, ERROR_NAMES, OK, OPT_OWN_MEMORY, OPT_QUEUE,
    RELEASE_ALLOW,
)

log = logging.getLogger("swapagent")

_uintptr = ctypes.c_size_t  # uintptr_t: pointer-sized on every platform the agent supports
# The arrays the ABI takes (pointers, sizes, flags, handles) are passed as array.array buffers, whose items
# are C integers already: one conversion per array instead of a ctypes object per item (a region passes
# dozens). Their typecodes on the LP64 platforms the agent is built for (x86-64 and aarch64 Linux).
_U64, _I64, _U32 = "Q", "q", "I"  # uintptr_t and size_t, int64_t, uint32_t
if (array.array(_U64).itemsize, array.array(_I64).itemsize, array.array(_U32).itemsize,
        ctypes.sizeof(_uintptr)) != (8, 8, 4, 8):
    raise ImportError("swapagent: needs an LP64 platform (x86-64 or aarch64 Linux)")
RELEASE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, _uintptr, ctypes.c_size_t)
RESTORE_FN = ctypes.CFUNCTYPE(_uintptr, ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t)


class AgentError(RuntimeError):
    """The agent library cannot be found or loaded, or speaks another ABI."""


class Call(ctypes.Structure):
    """struct swapagent_call (swapagent.h): one control call's kind and arguments."""
    _fields_ = [(name, getattr(ctypes, t)) for name, t in CALL_FIELDS]


_CALL_SIZE = ctypes.sizeof(Call)


LIB_NAME = "libswapagent.so"


def _repo_library():
    """<repo>/build/lib/libswapagent.so when this package is the source tree's python/swapagent, else
    None (an installed wheel has no build tree beside it)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(repo, "shim", "c", "swapagent.h")):
        return None
    return os.path.join(repo, "build", "lib", LIB_NAME)


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
    """The control calls of one loaded libswapagent.so; every method returns the agent's own result."""

    def __init__(self, lib, path, preloaded):
        self.lib, self.path, self.preloaded = lib, path, preloaded
        c = ctypes
        sig = {
            "swapagent_abi_version": (c.c_int, []),
            "swapagent_set_storage_ops": (c.c_int, [RELEASE_FN, RESTORE_FN, c.c_void_p]),
            "swapagent_save": (c.c_int64, [c.c_char_p, _uintptr, c.c_size_t, c.c_uint32]),
            "swapagent_unpack": (_uintptr, [c.c_int64]),
            "swapagent_state": (c.c_int, [c.c_int64]),
            "swapagent_keep_reason": (c.c_int, [c.c_int64]),
            "swapagent_stats_json": (c.c_int, [c.c_char_p, c.c_size_t]),
            "swapagent_call": (c.c_int64, [c.c_void_p, c.c_uint32]),
            "swapagent_unpack_resident": (_uintptr, [c.c_int64]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)  # AttributeError: not this release's library (load() says so)
            fn.restype, fn.argtypes = res, args
        self._call = lib.swapagent_call
        self._warned = set()
        self._warn_lock = threading.Lock()
        self._names = {}  # group name -> its bytes (the C string every call takes)
        self._text_cache = {}  # description lines -> their text (_text)
        # The C functions of the hot path (Layer), bound once: a saved tensor costs its share of one region
        # exit and one swapagent_unpack per saved storage; everything around them is Python and must stay
        # small.
        self.save_c = lib.swapagent_save
        self._unpack_c = lib.swapagent_unpack
        # Queued calls: where nothing can move (policy off; safe until something does) the library answers a
        # region's calls at once and the agent runs them later, in their place; a misuse is then logged, not
        # returned (swapagent.h, "Queued calls").
        self.queued = False
        self.set_queued(True)

    def set_queued(self, on):
        """Whether the region and backward calls ask to be queued (on from the start where the agent queues
        them: under policies off and safe). Off: every call runs at once and its misuse code comes back at
        once. Returns the setting."""
        on = bool(on) and self._run(Call(_CALL_SIZE, CALL_QUEUEING), 0) == 1
        self.queued = on
        self._queue = OPT_QUEUE if on else 0
        return on

    def _run(self, call, opts):
        # Every pointer a record of this binding holds is memory the binding made (bytes, array.array and
        # ctypes buffers it keeps alive across the call): the library copies it with plain loads.
        return self._call(ctypes.byref(call), opts | OPT_OWN_MEMORY)

    @staticmethod
    def _array(values, code=_U64):
        """values as a C array: (the buffer, to keep alive across the call; its address, None when empty)."""
        if not values:
            return None, None
        a = array.array(code, values)
        return a, a.buffer_info()[0]

    def _name(self, group):
        b = self._names.get(group)
        if b is None:
            b = self._names[group] = group.encode()
        return b

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

    def _text(self, descs):
        """descs as swapagent_call's text, cached: (the buffer, to keep alive across the call; its address;
        its length), each line ended by a NUL. str items are encoded; bytes (saved_desc's, cached) are
        passed as they are. A layer describes the same arguments and saved shapes every step, so the texts
        are kept by their lines (bounded: a caller whose lines never repeat starts the cache over)."""
        if descs is None:
            return None, None, 0
        key = tuple(descs)
        got = self._text_cache.get(key)
        if got is None:
            blob = b"".join((d if type(d) is bytes else d.encode()) + b"\0" for d in descs)
            buf = ctypes.create_string_buffer(blob, len(blob))
            if len(self._text_cache) >= 1024:
                self._text_cache.clear()
            got = self._text_cache[key] = (buf, ctypes.addressof(buf), len(blob))
        return got

    def region_enter(self, group, ptrs, n_positional, descs=None):
        """descs: one description line per pointer (describe_line), or None."""
        keep, a = self._array(ptrs)
        keep_t, t, t_len = self._text(descs)
        rc = self._run(Call(_CALL_SIZE, CALL_REGION_ENTER, self._name(group), a, len(ptrs), n_positional,
                            text=t, text_len=t_len), self._queue)
        return rc if rc == OK else self.check("region_enter(%s)" % group, rc)

    def describe(self, group, ptrs, descs):
        """Describes tensors of the group's open region by storage pointer (its outputs, what it saved)."""
        if not ptrs:
            return OK
        keep, a = self._array(ptrs)
        keep_t, t, t_len = self._text(descs)
        rc = self._run(Call(_CALL_SIZE, CALL_DESCRIBE, self._name(group), desc_ptrs=a, n_desc=len(ptrs), text=t,
                            text_len=t_len), 0)
        return rc if rc == OK else self.check("describe(%s)" % group, rc)

    def save(self, group, ptr, nbytes, flags):
        return self.check("save", self.save_c(self._name(group), ptr, nbytes, flags))

    def save_n(self, group, ptrs, nbytes, flags):
        """Saves len(ptrs) storages of the group's open region, in order, in one call: a list with each one's
        handle or negative code (each code warned of once, as save's)."""
        return self.region_exit(group, None, ptrs, nbytes, flags)

    def region_exit(self, group, out_ptrs, ptrs=(), nbytes=(), flags=(), desc_ptrs=(), descs=()):
        """Exits the group's open region with its outputs (out_ptrs; None: no exit, only the saves), after
        saving what it saved (ptrs, nbytes, flags) and describing desc_ptrs (descs), in one call. Returns the
        saves' list of handles (each code warned of once, as save's); a failed exit is warned of."""
        n = len(ptrs)
        out = array.array(_I64, bytes(8 * n))
        keep_p, p = self._array(ptrs)
        keep_s, sz = self._array(nbytes)
        keep_f, f = self._array(flags, _U32) if any(flags) else (None, None)
        if out_ptrs is None:
            call, what = Call(_CALL_SIZE, CALL_SAVE, self._name(group)), "save"
            opts = 0
        else:
            keep_o, o = self._array(out_ptrs)
            keep_dp, dp = self._array(desc_ptrs)
            keep_t, t, t_len = self._text(descs) if desc_ptrs else (None, None, 0)
            call = Call(_CALL_SIZE, CALL_REGION_EXIT, self._name(group), o, len(out_ptrs), desc_ptrs=dp,
                        n_desc=len(desc_ptrs), text=t, text_len=t_len)
            what, opts = "region_exit(%s)" % group, self._queue
        call.save_ptrs, call.save_nbytes, call.save_flags, call.n_save = p, sz, f, n
        call.handles = out.buffer_info()[0] if n else None
        rc = self._run(call, opts)
        hs = out.tolist()
        if rc < 0 and not any(hs):  # refused as a whole: nothing saved, the region still open
            self.check(what, rc)
            return [rc] * n
        for h in set(h for h in hs if h < 0):
            self.check("save", h)
        if rc < 0 and out_ptrs is not None:
            self.check(what, rc)
        return hs

    def _group_ptrs(self, kind, what, group, ptrs, **fields):
        keep, a = self._array(list(ptrs))
        return self.check(what, self._run(Call(_CALL_SIZE, kind, self._name(group), a, len(ptrs), **fields), 0))

    def protect(self, group, ptrs):
        return self._group_ptrs(CALL_PROTECT, "protect", group, ptrs)

    def holders(self, group, ptrs, counts):
        """The framework's count of the references to each storage at ptrs outside group's saved tensors
        (negative: unknown), after its region exited: under safe the agent swaps a layer input nothing else
        holds (SWAPAGENT_CALL_HOLDERS)."""
        keep, b = self._array(counts, _I64)
        return self._group_ptrs(CALL_HOLDERS, "holders(%s)" % group, group, ptrs, counts=b)

    def group_streams(self, group, streams):
        """Names the runtime streams (aclrtStream handles as integers) the group's kernels run on, for a
        framework that launches through paths the agent does not intercept. The agent orders its copies
        after them (docs/design.md, "Stream ordering")."""
        return self._group_ptrs(CALL_GROUP_STREAMS, "group_streams(%s)" % group, group, streams)

    def guard(self, group):
        """Declares group moved by its framework (the guard): the agent answers its releases, moves none."""
        rc = self._run(Call(_CALL_SIZE, CALL_GUARD, self._name(group)), 0)
        return rc if rc in (OK, EDISABLED) else self.check("guard(%s)" % group, rc)

    def guard_release(self, group, ptr, nbytes, holders=-1, own=0, own_kinds=0):
        """(RELEASE_ALLOW or RELEASE_KEEP, token) for a release the framework attempts (group None: any live
        group that saved the storage), with the framework's count of references to the storage outside the
        group's saved tensors (negative: unknown) and how many of them are the layer's own machinery, of
        which kinds (OWN_* bits); the token names an allowed release's storage for guard_restore (0: none).
        A refused call answers RELEASE_ALLOW, warned once: the job's swap as it is."""
        tok, counts = ctypes.c_int64(0), (ctypes.c_int64 * 3)(holders, own, own_kinds)
        call = Call(_CALL_SIZE, CALL_GUARD_RELEASE, None if group is None else self._name(group),
                    counts=ctypes.addressof(counts), n=3, ptr=ptr, nbytes=nbytes, token=ctypes.addressof(tok))
        rc = self._run(call, 0)
        if rc < 0:
            self.check("guard_release", rc)
            return RELEASE_ALLOW, 0
        return rc, tok.value

    def guard_restore(self, token, new_ptr, nbytes):
        rc = self._run(Call(_CALL_SIZE, CALL_GUARD_RESTORE, handle=token, ptr=new_ptr, nbytes=nbytes), 0)
        return rc if rc == OK else self.check("guard_restore", rc)

    def note(self, key, value):
        """Records key=value in the process's trace metadata; an inert agent (msrun's scheduler): nothing,
        and nothing said."""
        v = value.encode()
        rc = self._run(Call(_CALL_SIZE, CALL_NOTE, key.encode(), text=v, text_len=len(v)), 0)
        return rc if rc in (OK, EDISABLED) else self.check("note(%s)" % key, rc)

    def asks(self):
        """What the agent's policy asks of the framework's side (the stats' "asks"): "holders", count a layer
        input's other holders and report them; "keep_inputs", tell the job's own swap to keep a layer's inputs
        on device. {} where the agent cannot say (an inert agent asks nothing)."""
        try:
            return json.loads(self.stats_json()).get("asks") or {}
        except (AgentError, ValueError):
            return {}

    def backward_enter(self, group):
        rc = self._run(Call(_CALL_SIZE, CALL_BACKWARD_ENTER, self._name(group)), self._queue)
        return rc if rc == 0 else self.check("backward_enter(%s)" % group, rc)

    def unpack(self, handle):
        return self._unpack_c(handle)

    def backward_exit(self, group):
        rc = self._run(Call(_CALL_SIZE, CALL_BACKWARD_EXIT, self._name(group)), self._queue)
        return rc if rc == 0 else self.check("backward_exit(%s)" % group, rc)

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
            raise AgentError("swapagent: %s is not a swapagent library of this release (%s)" % (path, e)) from None
        v = agent.abi_version()
        if v != ABI_VERSION:
            raise AgentError("swapagent: %s speaks ABI %d, this companion ABI %d" % (path, v, ABI_VERSION))
        _agent = agent
        return agent


def stats():
    """The agent's stats JSON as a dict (see architecture.md, "Stats JSON")."""
    return json.loads(load().stats_json())
