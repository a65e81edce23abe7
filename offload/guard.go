// guard.go owns the guard's half of the engine: groups whose framework moves their storages itself
// (hyper-parallel's own swap, run unmodified) and the answer to each release it attempts. The ownership
// rule stays the tracker's: a guarded group is classified at region exit exactly like any other, and a
// release is allowed only when the policy would have let the engine itself release that storage.
package offload

import (
	"fmt"
	"slices"

	"swapagent/tracker"
)

// Guard marks group as moved by its framework: its region exit classifies but launches no copy, its
// backward restores nothing, and its storages leave the device only through GuardRelease.
func (e *Engine) Guard(name string) error {
	if name == "" {
		return fmt.Errorf("%w: guard of an empty group name", ErrInvalid)
	}
	e.lock()
	defer e.unlock()
	e.groupNamed(name).guarded = true
	return nil
}

// Decision is the engine's answer to a release the framework attempts.
type Decision struct {
	Allow   bool
	Known   bool           // some live group saved the storage (else Allow, and nothing else is set)
	Reason  tracker.Reason // what the ownership model says of it (the first deciding group's)
	Group   string         // the group the decision was made for
	Handle  int64
	Storage uint64
	Size    uint64
	// Why says in words why a kept storage stays: its reason and the groups it matters to.
	Why string
	// ByHolders: the storage's role (an input, an output) would have kept it, and the framework's evidence
	// that nothing else holds it let it go (tracker.Releasable).
	ByHolders bool
}

// GuardRelease decides whether the framework may release the storage based at ptr (nbytes long) that
// group saved ("": whichever live group saved it; every live group's verdict counts either way, the name
// only says whose release it is), with the framework's evidence of its other holders. safe allows a
// storage unless, for some live group that saved it, the ownership rule keeps it (tracker.Releasable: a
// protected storage, a parameter, another group's save, or an input or output still held outside the
// group's saved tensors, or with no evidence) or the engine moves it itself; outputs-only allows
// everything the engine does not move (it is the job's own swap, unguarded); off allows nothing. An
// allowed release is recorded as an offload of its bytes, so the job's own swap shows in the same figures
// as the engine's.
func (e *Engine) GuardRelease(name string, ptr, nbytes uint64, held tracker.Holders) (Decision, error) {
	return e.atStorageBase(ptr, func(si tracker.StorageInfo) (Decision, error) {
		return e.guardReleaseLocked(name, si, nbytes, e.handlesOf(si.ID), held)
	})
}

// Releasable is GuardRelease's answer for the storage based at ptr with nothing recorded or changed: the
// decision a framework may ask for before it spends work on a release (SWAPAGENT_CALL_RELEASABLE).
func (e *Engine) Releasable(name string, ptr uint64, held tracker.Holders) (Decision, error) {
	return e.atStorageBase(ptr, func(si tracker.StorageInfo) (Decision, error) {
		d, _ := e.decideRelease(name, si, 0, e.handlesOf(si.ID), held)
		return d, nil
	})
}

// atStorageBase runs decide under the engine's lock on the storage based at ptr; a pointer that is no
// tracked storage's base is none of the agent's business (allowed), and address 0 is refused.
func (e *Engine) atStorageBase(ptr uint64, decide func(tracker.StorageInfo) (Decision, error)) (Decision, error) {
	if ptr == 0 {
		return Decision{}, fmt.Errorf("%w: release of address 0", ErrInvalid)
	}
	e.lock()
	defer e.unlock()
	si, ok := e.tr.LookupStorage(ptr)
	if !ok || si.Base != ptr {
		return Decision{Allow: true}, nil
	}
	return decide(si)
}

// handlesOf returns the first handle of storage sid in every live group.
func (e *Engine) handlesOf(sid uint64) []*handle {
	var hs []*handle
	for _, g := range e.groups {
		if h := g.first[sid]; h != nil && e.handles[h.id] == h {
			hs = append(hs, h)
		}
	}
	return hs
}

func (e *Engine) guardReleaseLocked(name string, si tracker.StorageInfo, nbytes uint64, hs []*handle,
	held tracker.Holders) (Decision, error) {
	d, pick := e.decideRelease(name, si, nbytes, hs, held)
	if !d.Known {
		return d, nil
	}
	if !d.Allow {
		e.st.GuardKept++
		e.st.GuardKeptBytes += d.Size
		e.emit(Event{Kind: EvGuardKeep, Group: d.Group, Handle: d.Handle, Storage: si.ID, Base: si.Base, Size: d.Size,
			Reason: d.Reason, Detail: d.Why})
		return d, nil
	}
	e.guardRelease(pick, hs, si, d.Size, d.ByHolders)
	return d, nil
}

// decideRelease is the answer to a release of storage si (nbytes; hs: its handles in the live groups) by the
// policy, with nothing recorded or changed, and the handle it is decided for (nil when no live group saved
// the storage: allowed, not the agent's to decide).
func (e *Engine) decideRelease(name string, si tracker.StorageInfo, nbytes uint64, hs []*handle,
	held tracker.Holders) (Decision, *handle) {
	if len(hs) == 0 {
		return Decision{Allow: true}, nil
	}
	// The deciding handle: the first that keeps the storage (else the named group's, else any).
	d := Decision{Known: true, Storage: si.ID, Size: max(nbytes, si.Size)}
	pick := hs[0]
	for _, h := range hs {
		if h.g.name == name {
			pick = h
			break
		}
	}
	var keeper *handle
	for _, h := range hs {
		if !h.classified {
			keeper = h // its region is still open: its outputs are not known yet
			break
		}
		if keeper == nil && !tracker.Releasable(h.match, h.reason, held) {
			keeper = h
		}
	}
	engineMoves := false
	if u := e.units[si.ID]; u != nil && !u.guard {
		engineMoves = true
	}
	if keeper != nil {
		pick = keeper
	}
	switch e.cfg.Policy {
	case PolicyOff:
		d.Allow, d.Why = false, "policy off releases nothing"
	case PolicyOutputsOnly:
		d.Allow = !engineMoves
	default:
		d.Allow = keeper == nil && !engineMoves
	}
	d.Group, d.Handle, d.Reason = pick.g.name, pick.id, pick.truth
	if !pick.classified {
		d.Reason = tracker.Output
	}
	if !d.Allow && d.Why == "" {
		d.Why = e.keepWhy(pick, si, engineMoves, held)
	}
	d.ByHolders = d.Allow && e.cfg.Policy == PolicySafe && tracker.ByHolders(pick.reason, held)
	return d, pick
}

// guardKeeps tells the observer, at a guarded group's region exit, which of the storages its framework
// saved to swap the policy keeps on device whatever their holders do: protected, a parameter, another
// group's. An input or output is decided when its release is asked, by the holders then (GuardRelease).
func (e *Engine) guardKeeps(g *group) {
	if e.cfg.Policy == PolicyOutputsOnly {
		return
	}
	for _, h := range g.region {
		if h.dup || tracker.Releasable(h.match, h.truth, 0) {
			continue
		}
		si, _ := e.tr.Storage(h.sid)
		e.emit(Event{Kind: EvGuardKeep, Group: g.name, Handle: h.id, Storage: h.sid, Base: si.Base, Size: h.size,
			Reason: h.truth, Detail: e.keepWhy(h, si, false, tracker.HoldersUnknown)})
	}
}

// keepWhy says why a storage stays, for the stderr line and the trace: who else needs it, and for an input
// or output how many references the framework counted outside its saved tensors (held).
func (e *Engine) keepWhy(h *handle, si tracker.StorageInfo, engineMoves bool, held tracker.Holders) string {
	switch {
	case engineMoves:
		return "the agent moves this storage itself"
	case !h.classified:
		return fmt.Sprintf("the region of %s is still open: it may become one of its outputs", h.g.name)
	}
	switch h.reason {
	case tracker.Input:
		var gs []string
		for _, in := range si.Inputs {
			if !slices.Contains(gs, in.Group) {
				gs = append(gs, in.Group)
			}
		}
		return "it is an input of " + tracker.GroupList(gs) + ", owned outside the layer" + stillHeld(held)
	case tracker.Output:
		return "it is an output of " + h.g.name + ", which later layers read" + stillHeld(held)
	case tracker.Param:
		return "it is a parameter of " + h.g.name
	case tracker.Shared:
		return tracker.GroupList(si.Holders) + " saved it"
	case tracker.Protected:
		return "it is protected for " + h.g.name
	}
	return h.reason.String() + " in " + h.g.name
}

// stillHeld is keepWhy's clause for an input or output the framework counted other holders of.
func stillHeld(held tracker.Holders) string {
	if held <= 0 {
		return ""
	}
	return fmt.Sprintf(", and %d references outside its saved tensors still hold it", held)
}

// guardRelease records an allowed release: the storage's unit goes device -> d2h -> host (the job's swap
// copied it out), owned by h's group, and every handle of the storage rides on it. unheld: the evidence
// showed nothing but the group's saved tensors holds it, so its role does not make it external.
func (e *Engine) guardRelease(h *handle, hs []*handle, si tracker.StorageInfo, size uint64, unheld bool) {
	u := &unit{sid: si.ID, size: size, state: Device, owner: h.g, rel: h.id, base: si.Base, guard: true}
	for _, o := range hs {
		o.u = u
		u.refs++
		u.external = u.external || (o.truth.Owned() && !unheld)
		e.unresident(o)
	}
	e.units[si.ID] = u
	_ = e.move(u, D2H, h.g.name)
	_ = e.move(u, Host, h.g.name)
	_ = e.tr.Released(si.ID, h.g.name)
	u.released = true
	e.st.OffloadedStorages++
	e.st.OffloadedBytes += size
	e.st.GuardReleased++
	e.st.GuardReleasedBytes += size
	if u.external {
		e.st.ReleasedExternal++
	}
	e.st.SavedBytes += size
	e.st.SavedBytesPeak = max(e.st.SavedBytesPeak, e.st.SavedBytes)
	gs := e.gs(h.g.name)
	gs.Offloaded++
	gs.OffloadedBytes += size
	e.emit(Event{Kind: EvRelease, Group: h.g.name, Handle: h.id, Storage: si.ID, Base: si.Base, Size: size,
		External: u.external})
}

// GuardRestore records that the framework gave a storage it released (GuardRelease allowed it under the
// handle token) memory again, now based at newPtr; it returns the group that released it. A token whose
// storage is not released by the framework is ErrState.
func (e *Engine) GuardRestore(token int64, newPtr, nbytes uint64) (string, error) {
	if newPtr == 0 {
		return "", fmt.Errorf("%w: restore to address 0", ErrInvalid)
	}
	e.lock()
	defer e.unlock()
	h := e.handles[token]
	if h == nil {
		return "", fmt.Errorf("%w: %d", ErrHandle, token)
	}
	u := h.u
	if u == nil || !u.guard || !u.released {
		return h.g.name, fmt.Errorf("%w: handle %d: its storage was not released by the framework", ErrState, token)
	}
	_ = e.move(u, H2D, u.owner.name)
	if err := e.tr.RestoredByFramework(u.sid, newPtr); err != nil {
		e.emit(Event{Kind: EvError, Group: u.owner.name, Storage: u.sid, Size: u.size, Detail: "guard restore: " + err.Error()})
	}
	_ = e.move(u, Device, u.owner.name)
	u.released, u.base = false, newPtr
	e.st.SavedBytes -= u.size
	e.st.RestoredStorages++
	e.st.RestoredBytes += u.size
	e.gs(u.owner.name).Restored++
	e.emit(Event{Kind: EvRestore, Group: u.owner.name, Handle: u.rel, Storage: u.sid, Base: newPtr, Size: u.size})
	// Back on device for good: its handles no longer ride on a unit, and a later release decides anew.
	for _, o := range e.handlesOf(u.sid) {
		if o.u == u {
			o.u = nil
		}
	}
	h.u = nil
	u.dead = true
	delete(e.units, u.sid)
	return u.owner.name, nil
}
