"""swapagent.grads: the gradient hooks a companion puts on the tensors crossing its layers, from which
core.Layer finds each forward's backward enter and exit (no module or Cell backward hook: see core.Layer).
One hook per tensor (a chain), whatever number of layers it crosses, and its calls."""

import logging
import threading
import weakref

log = logging.getLogger("swapagent")

INPUT, OUTPUT = 0, 1


class _Call:
    """One forward's callback on a boundary tensor's gradient: fires at most once."""
    __slots__ = ("pass_", "kind", "fired")

    def __init__(self, pass_, kind):
        self.pass_, self.kind, self.fired = pass_, kind, False

    def dead(self):
        p = self.pass_
        st = p.layer.st
        if self.fired or st.removed or p.exited:
            return True
        # An output call only matters until its forward entered backward; an input call only while its
        # forward is the group's latest (an older forward never reports its exit, see Layer).
        return p.entered if self.kind == OUTPUT else p is not st.latest

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

    def add(self, p, kind):
        """A kind (INPUT, OUTPUT) call of forward p."""
        self.prune()
        (self.inputs if kind == INPUT else self.outputs).append(_Call(p, kind))

    def prune(self):
        self.inputs[:] = [c for c in self.inputs if not c.dead()]
        self.outputs[:] = [c for c in self.outputs if not c.dead()]

    def empty(self):
        return not self.inputs and not self.outputs


_chains = {}  # id(tensor) -> (weak reference to the tensor, chain); the entry goes with the tensor
_chains_lock = threading.RLock()


def chain(fw, t):
    """The chain hooked on tensor t (registered once per tensor), or None when t takes no hook."""
    key = id(t)
    with _chains_lock:
        e = _chains.get(key)
        if e is not None and e[0]() is t:
            return e[1]

    def gone(ref, key=key, chains=_chains, lock=_chains_lock):  # bound here: it may run at interpreter exit
        with lock:
            e = chains.get(key)
            if e is not None and e[0] is ref:
                del chains[key]
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
