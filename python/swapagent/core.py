"""swapagent.core owns what both framework companions share: the per-layer reporter that turns framework
hooks into control calls, and the rule that finds each layer's backward enter and exit from gradient hooks
on the tensors crossing it (no module or Cell backward hook: those add autograd nodes, see Layer). The
binding to the agent is swapagent.binding, the walk of nested arguments swapagent.walk, the storages' registry
swapagent.storage, the gradient hooks swapagent.grads; core re-exports their names.

The companion decides nothing: it reports region boundaries (input and output storage pointers, plain
integers only), every storage saved for backward, and backward boundaries; the agent decides what stays on
the device and calls back into the registry to release (resize to 0) or restore (resize back) a storage.
"""

import itertools
import json
import logging
import threading
import warnings

# Stable error codes and enums of swapagent.h, generated from it (_abi.py).
from ._abi import (  # noqa: F401
    ABI_VERSION, EDISABLED, EGROUP, EHANDLE, EINVAL, ENOOPS, EORDER, ERROR_NAMES, ERUNTIME, ESTATE,
    KEEP_REASONS, OK, OWN_PACKED, OWN_VIEW_BASE, POLICIES, POLICY_OFF, POLICY_OUTPUTS_ONLY,
    POLICY_SAFE, RELEASE_ALLOW, RELEASE_KEEP, SAVE_PARAM, STATES,
)

from .binding import (  # noqa: F401
    LIB_NAME, RELEASE_FN, RESTORE_FN, Agent, AgentError, library_candidates, load, stats,
)
from .walk import (  # noqa: F401
    _ATOMS, _MAX_DEPTH, _described, _saved_descs, describe_line, describe_tail, saved_desc, walk_named,
)
from .storage import (  # noqa: F401
    Framework, Packed, Registry, _entries, agent_op, count_holders, freed_layers, registry)
from .grads import INPUT, OUTPUT, _Call, _Chain, _chains, unhook_removed  # noqa: F401
from . import grads

log = logging.getLogger("swapagent")


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


# Set by swapagent.guard when it is installed (watch): the saves of a companion's region (saves_hook(layer,
# ptrs)) and the start of its forward (forward_hook(layer)), so that a release other code attempts of a
# storage a companion's region saved is asked of the agent too. None: no guard.
saves_hook = None
forward_hook = None


def watch(saves, forward):
    """Installs the guard's hooks (saves_hook, forward_hook; None, None: none)."""
    global saves_hook, forward_hook
    saves_hook, forward_hook = saves, forward


# ---- the per-layer reporter -----------------------------------------------------------------------

_flat = itertools.chain.from_iterable


def note_control_calls(agent):
    """Notes in agent's trace how the companion reaches it (control_calls: queued or plain)."""
    agent.note("control_calls", "queued" if getattr(agent, "queued", False) else "plain")


def is_packed(x):
    """Whether x is what a pack hook returned for a saved storage."""
    return type(x) is Packed  # pylint: disable=unidiomatic-typecheck


class Pass:
    """One forward of a layer, from its region enter until its backward exit. Plain state, no tensor: per
    storage the forward saved (its slot), the saved tensors still alive (refs) and, once the region
    reported its saves, the agent's handle or refusal code (handles)."""
    __slots__ = ("layer", "entered", "exited", "inputs_left", "ended", "refs", "handles", "__weakref__")

    def __init__(self, layer):
        self.layer = layer
        self.entered = self.exited = self.ended = False
        self.inputs_left = 0  # positional inputs whose gradient has not arrived yet
        self.refs, self.handles = [], []


class State:
    """The layer's state that its hooks read (Layer.st)."""
    __slots__ = ("latest", "params", "removed", "guarded")

    def __init__(self):
        self.latest = None  # the Pass of the latest forward
        self.params = frozenset()  # the parameters' storage pointers, during a forward
        self.removed = False  # set by Handle.remove(): hooks still attached to in-flight tensors go quiet
        self.guarded = False  # the guard's reporter of a layer the job's own swap moves (swapagent.guard)


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
    - a forward whose backward never began exits too once the framework freed every tensor it saved
      (a graph dropped, or a backward that needs none of its nodes): nothing will unpack them, and the
      agent must not take the next forward's storages at the same addresses for them.
    A forward that waits only for tensors the framework freed exits at the next forward of any layer
    (end_freed).
    An exit never precedes an unpack of the group: after it the agent forgets the group's handles.
    Only the group's latest forward reports its exit: the agent tracks one forward per group.
    """

    def __init__(self, agent, fw, module, group, include_cpu):
        self.agent, self.fw, self.module, self.group = agent, fw, module, group
        self.include_cpu = include_cpu
        self._param_cache = {}  # Framework.param_ptrs's, for this module
        self._is_tensor = fw.is_tensor
        registry.ops = fw
        self._ptr = fw.ptr
        # handle, storage ptr, nbytes, flags of every save the agent took in the latest forward (one per
        # storage it saved), flat: plain ints, for inspection (keep reasons, states) and tests (saved).
        self._saved = []
        # The open region's saved storages, by slot (Packed.slot), collected by pack and reported in one call
        # at the region's exit (flush): pointer, size, flags, storage (held until then).
        self._bptr, self._bsize, self._bflag, self._bstore = [], [], [], []
        self._saved_t = []  # the tensor of each slot, until region exit describes them
        # The saved tensors (ids of their Packed) of any forward neither unpacked nor freed yet. Single set
        # operations are atomic under the GIL: pack, unpack and Packed.__del__ take no lock; maybe_exit
        # reads it under the lock.
        self._waiting = set()
        self._region = {}  # storage ptr -> slot, of what the open region saved
        self._handles = []  # handles in the registry since the group's last backward exit
        self._unpacked = set()  # handles unpacked since then (the agent hears of each one once)
        self._lock = threading.RLock()  # re-entrant: Packed.__del__ may run inside a locked section
        self.st = State()
        self._make_hooks()  # sets _pack and _unpack

    @property
    def saved(self):
        """(handle, storage ptr, nbytes, flags) of every swapagent_save of the latest forward."""
        f = self._saved
        return [tuple(f[i:i + 4]) for i in range(0, len(f), 4)]

    def pointers(self, obj, out=None):
        """The storage pointers of the tensors in obj, as the region calls find them (walk_named: every
        occurrence; 0 for an empty storage), plain integers."""
        if out is None:
            out = []
        ptr = self._ptr
        for _, t in walk_named(obj, self._is_tensor, "", []):
            p = ptr(t)
            if p is not None:
                out.append(p)
        return out

    def forward_pre(self, args, kwargs):
        st = self.st
        if forward_hook is not None and not st.guarded:
            forward_hook(self)
        if freed_layers:
            end_freed()  # forwards whose saved tensors the framework freed end before this one saves
        self.maybe_exit()  # a previous forward that only waited for a freed tensor ends now
        st.params = self.fw.param_ptrs(self.module, self._param_cache)
        self._saved.clear()
        self._clear_region()
        p = Pass(self)
        with self._lock:
            st.latest = p
        named = walk_named(args, self._is_tensor, "args", [])
        ins = [t for _, t in named]
        # Backward exit waits for the gradient of each positional input that takes one.
        n = self._hook_grads(p, ins, INPUT)
        if n:
            with self._lock:
                p.inputs_left += n
        n_named = len(named)
        for k, v in kwargs.items() if kwargs else ():
            walk_named(v, self._is_tensor, k, named)
        ptr, ptrs, descs, n_pos = self._ptr, [], [], 0
        for i, (path, t) in enumerate(named):
            q = ptr(t)
            if q is not None:
                ptrs.append(q)
                descs.append(describe_line(path, t))
                if i < n_named:
                    n_pos += 1
        self.agent.region_enter(self.group, ptrs, n_pos, descs)

    def report_holders(self, ptrs):
        """Tells the agent, for each storage at ptrs (the layer's inputs) that its latest forward saved, how
        many references outside that forward's saved tensors hold it (Framework.holders). Nothing when the
        framework counts none, or the forward is no longer waiting for its backward."""
        p = self.st.latest
        if p is None or not p.handles or p.entered or len(self._bptr):
            return
        saved = self._saved
        at = {saved[i]: saved[i + 1] for i in range(0, len(saved), 4)}  # handle -> storage pointer
        wanted = set(ptrs)
        got_ptrs, counts = [], []
        for slot, h in enumerate(p.handles):
            ptr = at.get(h)
            if ptr is None or ptr not in wanted or slot >= len(p.refs):
                continue
            wanted.discard(ptr)
            n = self.fw.holders(_entries.get(h), p.refs[slot])
            if n is not None:
                got_ptrs.append(ptr)
                counts.append(n)
        if got_ptrs:
            self.agent.holders(self.group, got_ptrs, counts)

    def forward_post(self, output):
        named = walk_named(output, self._is_tensor, "output", [])
        outs = [t for _, t in named]
        ptr, ptrs, descs, out_ptrs = self._ptr, [], [], []
        for path, t in named:
            q = ptr(t)
            if q is not None:
                out_ptrs.append(q)
            if q:
                ptrs.append(q)
                descs.append(describe_line(path, t))
        # What the region saved, by storage: dtype and shape (no path: a saved input keeps its argument's).
        ptrs.extend(self._bptr)
        descs.extend(map(saved_desc, self._saved_t))
        self._saved_t.clear()
        # The saves, the descriptions and the exit in one call.
        self.flush(lambda g, sp, sn, sf: self.agent.region_exit(g, out_ptrs, sp, sn, sf, ptrs, descs))
        self.st.params = frozenset()
        self._clear_region()
        p = self.st.latest
        if p is None:
            return
        # Backward enter: the first gradient of an output (however nested) to arrive.
        self._hook_grads(p, outs, OUTPUT)

    def _hook_grads(self, p, ts, kind):
        """Adds a kind (INPUT, OUTPUT) call of forward p to the gradient chain of each distinct tensor of ts
        that takes a gradient; returns how many were hooked. No gradient fires during the forward."""
        fw, seen, n = self.fw, set(), 0
        for t in ts:
            if id(t) in seen or not fw.takes_grad(t):
                continue
            seen.add(id(t))
            ch = grads.chain(fw, t)
            if ch is not None:
                ch.add(p, kind)
                n += 1
        return n

    # pack and unpack run once per saved tensor each, Packed.__del__ once more: they are closures over what
    # they use (no attribute lookups), made in _make_hooks; these methods are their documented entry points.
    def pack(self, t):
        """The saved-tensor pack hook: collects t's storage for the region's report (once per storage and
        region: a storage the region already saved, such as a layer input read by several operations or a
        tensor and its views, shares the first save's slot and handle, which is all the agent would make of
        the others: duplicates) and returns a Packed holding an alias of t. No agent call: the region's
        saves reach the agent in one call at its exit (flush). Each saved tensor waits for its own unpack."""
        return self._pack(t)

    def unpack(self, p):
        """The saved-tensor unpack hook: enters the forward's backward at its first unpack, tells the agent
        the first unpack of each handle (it brings the storage back if it left; later unpacks of the
        handle find it there), returns the tensor. An unpack inside the region that saved it reports the
        region's saves first."""
        return self._unpack(p)

    def _clear_region(self):
        self._region.clear()
        for b in (self._bptr, self._bsize, self._bflag, self._bstore):
            b.clear()

    def flush(self, report=None):
        """Reports the saves the open region collected since the last report, in one call: a storage whose
        saved tensors were all freed already is left out. The registry takes each saved storage under its handle. report(group, ptrs,
        nbytes, flags), when given, makes the report instead (and is called even with nothing to report):
        the region's exit (forward_post) ends the region in the same call."""
        p = self.st.latest
        hs, refs, bptr = (p.handles, p.refs, self._bptr) if p is not None else ([], [], [])
        start, n = len(hs), len(bptr)
        if start >= n:
            if report is not None:
                report(self.group, [], [], [])
            return
        bsize, bflag, bstore = self._bsize, self._bflag, self._bstore
        if 0 in refs[start:]:  # some storage's saved tensors are all gone already: not reported
            live = [i for i in range(start, n) if refs[i]]
        else:
            live = range(start, n)
        hs.extend([0] * (n - start))
        if start == 0 and len(live) == n:  # the common case: everything the region saved, at its exit
            ptrs, sizes, flags, stores = bptr, bsize, bflag, bstore
        else:
            ptrs, sizes = [bptr[i] for i in live], [bsize[i] for i in live]
            flags, stores = [bflag[i] for i in live], [bstore[i] for i in live]
        if report is not None:
            got = report(self.group, ptrs, sizes, flags)
        elif live:
            got = self.agent.save_n(self.group, ptrs, sizes, flags)
        if live:
            if saves_hook is not None and not self.st.guarded:
                saves_hook(self, ptrs)
            if isinstance(live, range):
                hs[start:] = got
            else:
                for i, h in zip(live, got):
                    hs[i] = h
            if min(got) > 0:
                _entries.update(zip(got, stores))
                self._handles.extend(got)
                self._saved.extend(_flat(zip(got, ptrs, sizes, flags)))
            else:
                for h, s, e in zip(got, stores, zip(got, ptrs, sizes, flags)):
                    if h > 0:
                        _entries[h] = s
                        self._handles.append(h)
                        self._saved.extend(e)
            # A saved tensor freed while the agent was called: its entry goes too (Packed.__del__ found none).
            for i in live:
                if not refs[i]:
                    _entries.pop(hs[i], None)
        bstore[start:] = [None] * (n - start)  # the registry holds what it needs

    def _make_hooks(self):
        fw = self.fw
        saved_of, alias = fw.saved, fw.alias
        waiting, unpacked, region = self._waiting, self._unpacked, self._region
        st = self.st
        bptr, bsize, bflag, bstore, saved_t = self._bptr, self._bsize, self._bflag, self._bstore, self._saved_t
        new = object.__new__

        def pack(t):
            info = saved_of(t)
            if info is None:
                return t
            s, ptr, nbytes = info
            ps = st.latest
            if not nbytes or not ptr or ps is None:  # nothing to move (hyper-parallel skips empty storages too)
                return t
            refs = ps.refs
            i = region.get(ptr)
            if i is not None and refs[i]:
                # The region saved this storage already, and a saved tensor still holds it (so its memory
                # cannot have been handed to another storage since): the same slot.
                refs[i] += 1
            else:
                i = region[ptr] = len(bptr)
                bptr.append(ptr)
                bsize.append(nbytes)
                bflag.append(SAVE_PARAM if ptr in st.params else 0)
                bstore.append(s)
                refs.append(1)
                saved_t.append(t)
            pk = new(Packed)
            pk.slot, pk.tensor, pk.pass_ = i, alias(t), ps
            waiting.add(id(pk))
            return pk

        def unpack(p):
            if type(p) is not Packed:  # pylint: disable=unidiomatic-typecheck
                return p
            ps, i = p.pass_, p.slot
            hs = ps.handles
            if i >= len(hs) and ps is st.latest:
                self.flush()  # an unpack inside the region that saved it: the agent hears of its saves first
            if not ps.entered:
                self.enter(ps)  # the first unpack of a forward not yet entered enters it (and prefetches)
            h = hs[i] if i < len(hs) else 0
            if h > 0 and h not in unpacked:
                unpacked.add(h)
                if not self.agent.unpack(h):  # looked up each time: a wrapper (tests, the bench) may replace it
                    self.agent.check("unpack(%d)" % h, ERUNTIME)
            waiting.discard(id(p))
            if not waiting:
                self.maybe_exit()
            return p.tensor
        self._pack, self._unpack = pack, unpack

    def freed(self, packed):
        """The framework freed a saved tensor (Packed.__del__ calls this): it will never be unpacked.
        No agent call from here (it may run inside one, from the garbage collector): the last one the layer
        waited for notes the layer in freed_layers, and the next forward of any layer asks it (end_freed).
        Plain set and list operations under the GIL, no lock."""
        waiting = self._waiting
        if id(packed) in waiting:
            waiting.discard(id(packed))
            if not waiting:
                freed_layers.append(self)

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
            if p.entered or p.exited or self.st.removed:
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
            p = self.st.latest
            if p is None or self.st.removed or p.exited or self._waiting:
                return
            if p.entered:
                if p.inputs_left > 0 and not p.ended:
                    return
            elif not (self._handles and len(p.handles) == len(p.refs)):
                return  # never entered: only once its region reported its saves, if the agent holds any
            p.exited = True
            handles = self._handles[:]
            self._handles.clear()
            self._unpacked.clear()
        self.agent.backward_exit(self.group)
        registry.forget(handles)


def end_freed():
    """Asks each layer whose saved tensors the framework freed since (freed_layers) whether its latest
    forward ended (Layer.maybe_exit). Every layer's forward runs this before its own: a forward dropped
    without backward, or whose backward left tensors it never unpacked, is forgotten by the agent before
    another forward saves storages at the addresses it held."""
    while freed_layers:
        freed_layers.pop().maybe_exit()


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
            l.st.removed = True
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
    note_control_calls(agent)
    if prefetch is not None:
        try:
            have = json.loads(agent.stats_json()).get("prefetch")
        except (AgentError, ValueError):
            have = None
        if have is not None and int(have) != int(prefetch):
            warnings.warn("swapagent: prefetch=%d asked, but the agent prefetches %d groups: the agent reads "
                          "SWAPAGENT_PREFETCH at load" % (prefetch, have), RuntimeWarning, stacklevel=3)
    return agent
