"""swapagent.storage: what the companions hold of the storages a layer saved: the registry the agent's
release and restore reach them through, the Packed a pack hook hands the framework, the Framework a
companion's part supplies (its tensors, storages and hooks), and when the holders of a layer's inputs are
counted. Shared by both companions through swapagent.core."""

import logging
import threading

from .binding import RELEASE_FN, RESTORE_FN

log = logging.getLogger("swapagent")

class Registry:
    """handle -> storage of every saved tensor the agent may ask to release or restore.

    Holds storage objects (never the tensors) from the save until the group's backward_exit, or until the
    framework freed every saved tensor of the handle (the forward's Pass counts them per storage). A plain
    dict whose single operations are atomic under the GIL (the hooks take no lock), one entry per saved
    storage: _entries maps a handle to its storage. The agent's release and restore use the framework
    part's resize(storage, nbytes) and storage_ptr(storage) (ops: the part of the latest Layer; every
    framework part shares them today)."""

    def __init__(self):
        self._entries = {}  # handle -> storage
        self.ops = Framework()
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

    def add(self, handle, storage):
        """handle's storage, saved."""
        self._entries[handle] = storage

    def discard(self, handle):
        """The framework dropped every saved tensor of handle (their graph was freed): there is nothing
        left to release or restore."""
        self._entries.pop(handle, None)

    def forget(self, handles):
        """The group's backward exit: the agent forgot these handles."""
        pop = self._entries.pop
        for h in handles:
            pop(h, None)

    def __len__(self):
        return len(self._entries)

    def _fail(self, msg):
        self.errors.append(msg)
        log.error(msg)
        return msg

    def _release(self, _ctx, handle, ptr, nbytes):
        # Called by the agent (any thread): an exception must never cross back into C. The resize is the
        # agent's own: the guard lets it through (agent_op), it must not ask the agent that called it.
        agent_op.active = True
        try:
            storage = self._entries.get(handle)
            if storage is None:
                self._fail("swapagent: release of unknown handle %d" % handle)
                return -1
            ops = self.ops
            cur = ops.storage_ptr(storage)
            if cur != ptr:
                self._fail("swapagent: release of handle %d at %#x, but its storage is at %#x" % (handle, ptr, cur))
                return -1
            ops.resize(storage, 0)
            return 0
        except BaseException as ex:  # noqa: BLE001 - reported to the agent as a failed op
            self._fail("swapagent: release of handle %d failed: %s" % (handle, ex))
            return -1
        finally:
            agent_op.active = False

    def _restore(self, _ctx, handle, nbytes):
        agent_op.active = True
        try:
            storage = self._entries.get(handle)
            if storage is None:
                self._fail("swapagent: restore of unknown handle %d" % handle)
                return 0
            ops = self.ops
            ops.resize(storage, nbytes)
            return ops.storage_ptr(storage)
        except BaseException as ex:  # noqa: BLE001
            self._fail("swapagent: restore of handle %d failed: %s" % (handle, ex))
            return 0
        finally:
            agent_op.active = False


# The agent's own storage op is running on this thread (Registry._release/_restore): the guard's resize_
# wrapper passes it through.
agent_op = threading.local()
agent_op.active = False


class Packed:
    """What the saved-tensor pack hook returns: the forward (Pass) that saved it, the index of its storage
    among that forward's saved storages (slot: the agent's handle is pass_.handles[slot] once the region
    reported its saves, at its exit) and the saved tensor as an alias on its storage without autograd
    history (Framework.alias; the release resizes that storage in place, so holding it costs no device
    memory once released)."""
    __slots__ = ("slot", "tensor", "pass_")

    def __init__(self, slot, tensor, pass_):
        self.slot, self.tensor, self.pass_ = slot, tensor, pass_

    @property
    def handle(self):
        """The agent's handle (0 before the region reported its saves, or when the save was refused)."""
        hs = self.pass_.handles
        return max(hs[self.slot], 0) if self.slot < len(hs) else 0

    def __del__(self):
        # Autograd frees saved tensors after their backward (or with a discarded graph): so does the
        # registry once the storage's last one went, so no storage outlives the graph that saved it; a freed
        # tensor is never unpacked (Layer.freed: no agent call from here, this may run inside one, from the
        # garbage collector). Registry.discard inline: plain list, dict and set operations under the GIL, no
        # lock.
        try:
            p, i = self.pass_, self.slot
            refs = p.refs
            refs[i] -= 1
            if not refs[i]:
                hs = p.handles
                if i < len(hs):
                    _entries.pop(hs[i], None)
            p.layer.freed(self)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# The layers whose last saved tensor waiting for its unpack the framework freed (Packed.__del__): the next
# forward of any layer asks each whether its forward ended (core.end_freed), before the agent sees storages
# that may reuse their addresses.
freed_layers = []


class Framework:
    """What a framework part supplies to Layer; every method takes or returns plain values."""
    name = "?"
    tensor_type = None  # the framework's tensor class: what walk_named() looks for in arguments and outputs

    def storage(self, t):
        """The storage of tensor t, or None when t is not a tensor this companion reports."""
        raise NotImplementedError

    def is_tensor(self, x):
        if self.tensor_type is not None:
            return isinstance(x, self.tensor_type)
        return self.storage(x) is not None

    # torch and MindSpore (>= 2.8) storages share this API: untyped_storage() objects with data_ptr(),
    # nbytes() and resize_(n). A framework part overrides these only where its storages differ.
    def storage_ptr(self, s):
        return s.data_ptr()

    def storage_nbytes(self, s):
        return s.nbytes()

    def resize(self, s, nbytes):
        s.resize_(nbytes)

    def saved(self, t):
        """(storage, pointer, nbytes) of a tensor saved for backward, or None when it is not one this
        companion reports: the pack hook's one call into the framework part (it runs for every saved
        tensor, so a framework part may inline it)."""
        s = self.storage(t)
        if s is None:
            return None
        return s, self.storage_ptr(s), self.storage_nbytes(s)

    def ptr(self, t):
        """The storage pointer of tensor t as the region calls report it: 0 for an empty storage (an
        emptied storage has no usable address, whatever the framework still stores, and the agent must see
        a released storage come back in), None when t is not reported."""
        s = self.storage(t)
        if s is None:
            return None
        return self.storage_ptr(s) if self.storage_nbytes(s) > 0 else 0

    def storage_ptrs(self, ts):
        """The storage pointers of the non-empty storages of tensors ts, as a frozenset (param_ptrs's)."""
        out = set()
        for t in ts:
            s = self.storage(t)
            if s is not None and self.storage_nbytes(s) > 0:
                out.add(self.storage_ptr(s))
        return frozenset(out)

    def param_ptrs(self, module, cache=None):
        """The storage pointers of module's parameters and buffers. cache is a dict the caller keeps for
        the module between calls (None: no cache): a framework part may keep there what lets it answer
        without walking the module tree again, as long as what it returns is that of the module now."""
        raise NotImplementedError

    # Whether holders and saved_holders count: the evidence tracker.Releasable decides by. A framework that
    # counts none keeps every input and output by its role.
    counts_holders = False

    def holders(self, storage, aliases):
        """The references to storage (the object the registry holds) beyond those of the saved tensors of one
        forward, which hold aliases of it (Framework.alias), or None where this framework counts none."""
        return None

    def saved_holders(self, storage, saved):
        """(the references to storage beyond the saved tensors of one layer on it (hyper-parallel's
        SwapTensors, their .val, and the guard's Packed aliases of them), how many of those are the layer's
        own machinery, their kinds: OWN_* bits), or None where this framework counts none (the guard's
        evidence)."""
        return None

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


registry = Registry()
_entries = registry._entries  # pylint: disable=protected-access


# ---- the holders of a layer's inputs ----------------------------------------------------------------------

# The layers whose inputs' holders the next layer's entry counts: while a layer's call returns, the job's
# variable still holds its input; once the next layer is entered the job has moved on, and an input that
# nothing but the layer's saved tensors holds may be swapped like the layer's own activations.
_inputs_to_count = []


def count_holders(layer, args, kwargs):
    """A forward pre-hook of the companions' layers under safe and off, before the region's own: reports
    the holders of the inputs of the layer entered before (Layer.report_holders), then notes this one's."""
    while _inputs_to_count:
        before, ptrs = _inputs_to_count.pop()
        before.report_holders(ptrs)
    _inputs_to_count.append((layer, layer.pointers((args, kwargs))))
