package timeline

import "swapagent/trace"

// Handle is one swap handle: the storage a group saved, what the agent decided about it and what
// happened to it.
type Handle struct {
	ID     int64
	Group  uint32       // the group that saved it (KindSave, KindClassify)
	Base   uint64       // the storage's device base: the save's pointer, then the classification's base
	Nbytes uint64       // the storage's size (from the save, the classification, else its first state)
	Gen    uint64       // the storage's generation, when the trace gave one
	Flags  uint64       // the save's flags (trace.SaveParam)
	Reason uint64       // keep reason (trace.Keep*) of its last classification; KeepInternal when none
	Tensor trace.Tensor // what the companion said of it (region_enter's inputs, describe)

	Classified bool   // a KindClassify named it
	State      uint64 // its last state (trace.State*)
	Releases   int    // how often its device memory was released (a transition into host)
	ReleaseSeq int    // its place in Timeline.Released (the first release; 0 if the fold retires); -1 while never released
	Restored   bool   // back on device after a release
	// Unheld: the job's own swap released it with the agent's consent, or the agent's engine swapped it,
	// although its role (an input, an output; still in Reason) would have kept it, because the framework
	// showed nothing but its group's saved tensors held it (tracker.Releasable). Held is the most
	// references outside those the framework counted at a refused release of it, or at the engine's
	// question (0: none counted). Own: the kinds (trace.Own* bits) of the references the framework counted
	// as the layer's own machinery when it asked to release it, which keep nothing (tracker.Outside).
	Unheld bool
	Held   int64
	Own    uint64
}

// counted is the reason the handle is counted under in Timeline.Reasons: internal once its holders'
// evidence let it go.
func (h *Handle) counted() uint64 {
	if h.Unheld {
		return trace.KeepInternal
	}
	return h.Reason
}

// Released says whether the handle's storage was ever released.
func (h *Handle) Released() bool { return h.ReleaseSeq >= 0 }

// External says whether the ownership model would have kept the storage: any keep reason but internal,
// unless its holders' evidence let it go.
func (h *Handle) External() bool { return h.Reason != trace.KeepInternal && !h.Unheld }

// Param says whether the framework saved it as a parameter or buffer of the wrapped module.
func (h *Handle) Param() bool { return h.Flags&trace.SaveParam != 0 }

// Transition is one KindState event: a handle's storage moving between the offload states.
type Transition struct {
	Event    int    // index of the event in the trace
	TS       int64  // nanoseconds since the trace start
	Handle   int64  // the handle the agent moved the storage under
	Group    uint32 // the handle's group when it moved
	From, To uint64 // trace.State* values
	Base     uint64 // the device base after the change (0 while released)
	Nbytes   uint64
}

// Release says whether the storage's device memory was released here: copied out, now on host.
func (tr Transition) Release() bool { return tr.To == trace.StateHost && tr.From != trace.StateHost }

// Restore says whether the storage is back on device here.
func (tr Transition) Restore() bool {
	return tr.To == trace.StateDevice && tr.From != trace.StateDevice
}

// RestoreBegins says whether a released storage takes device memory again here (its copy back starts).
func (tr Transition) RestoreBegins() bool {
	return tr.From == trace.StateHost && tr.To == trace.StateH2D
}

// CopyStarts says whether a copy starts here (out to host, or back to device).
func (tr Transition) CopyStarts() bool { return tr.To == trace.StateD2H || tr.To == trace.StateH2D }

// Change is a state change, from one trace.State* value to another.
type Change struct{ From, To uint64 }

// Moved sums the state changes as they are folded: what Transitions gives, without keeping it.
type Moved struct {
	Changes       map[Change]uint64 // state changes by kind
	Releases      uint64            // changes into host: device memory released
	ReleasedBytes uint64
	RestoredBytes uint64 // changes back to device
}

func (m *Moved) add(tr Transition) {
	m.Changes[Change{tr.From, tr.To}]++
	switch {
	case tr.Release():
		m.Releases++
		m.ReleasedBytes += tr.Nbytes
	case tr.Restore():
		m.RestoredBytes += tr.Nbytes
	}
}

// handle returns the handle with id h, made on first mention.
func (t *Timeline) handle(id int64) *Handle {
	h := t.Handles[id]
	if h == nil {
		h = &Handle{ID: id, ReleaseSeq: -1}
		t.Handles[id] = h
	}
	return h
}

// save records a KindSave. A refused save (no handle) names no storage.
func (t *Timeline) save(ev *trace.Event) {
	if ev.Handle == 0 {
		return
	}
	h := t.handle(ev.Handle)
	h.Group, h.Base, h.Nbytes, h.Flags = ev.Group, ev.Args[0], ev.Args[1], ev.Args[2] // the generation: classify
	t.tensor.saved(ev.Group, h)
}

// classify records a KindClassify: the keep reason, and the storage's base and size as the agent knew
// them (a zero says nothing new).
func (t *Timeline) classify(ev *trace.Event) {
	h := t.handle(ev.Handle)
	if h.Classified { // a reclassification moves the handle's count
		t.Reasons[h.counted()]--
	}
	t.Reasons[ev.Args[2]]++
	reason := ev.Args[2]
	if ev.Args[4] != 0 { // the holders' evidence (offload.Engine.Holders)
		held := trace.Holders(ev.Args[4])
		role := h.Reason == trace.KeepInput || h.Reason == trace.KeepOutput
		if held == 0 && h.Classified && role && (reason == trace.KeepInternal || reason == trace.KeepSmall) {
			h.Unheld, reason = true, h.Reason // the role stays in Reason, as for the guard's releases
		}
		h.Held = max(h.Held, held)
	}
	h.Group, h.Reason, h.Classified = ev.Group, reason, true
	if ev.Args[0] != 0 {
		h.Base = ev.Args[0]
	}
	if ev.Args[1] != 0 {
		h.Nbytes = ev.Args[1]
	}
	if ev.Args[3] != 0 {
		h.Gen = ev.Args[3]
	}
}

// state records a KindState: the transition, the handle's release and restore, the bases released now
// and the device footprint.
func (t *Timeline) state(ev *trace.Event) {
	h := t.handle(ev.Handle)
	tr := Transition{Event: t.NumEvents - 1, TS: ev.TS, Handle: ev.Handle, Group: h.Group, From: ev.Args[0],
		To: ev.Args[1], Base: ev.Args[2], Nbytes: ev.Args[3]}
	t.Moved.add(tr)
	if t.retire == nil {
		t.Transitions = append(t.Transitions, tr)
	}
	if h.Nbytes == 0 {
		h.Nbytes = tr.Nbytes
	}
	h.State = tr.To
	switch {
	case tr.Release():
		h.Releases++
		if h.ReleaseSeq < 0 {
			h.ReleaseSeq = len(t.Released)
			if t.retire == nil {
				t.Released = append(t.Released, h)
			}
		}
		if h.Base != 0 {
			t.bases[h.Base]++
		}
	case tr.RestoreBegins():
		if n := t.bases[h.Base]; n > 1 {
			t.bases[h.Base]--
		} else if n == 1 {
			delete(t.bases, h.Base)
		}
	case tr.Restore() && h.Released():
		h.Restored = true
	}
	t.Foot.State(tr, h.Base)
}

// backwardExit retires the handles of a group whose backward_exit succeeded, when the fold retires.
func (t *Timeline) backwardExit(ev *trace.Event) {
	if t.retire == nil || ev.Ret != 0 {
		return
	}
	for id, h := range t.Handles {
		if h.Group == ev.Group {
			t.retire(h)
			delete(t.Handles, id)
		}
	}
}

// ReleasedAt says whether the recording holds a storage based at base released now (a release not yet
// followed by the start of its copy back).
func (t *Timeline) ReleasedAt(base uint64) bool { return t.bases[base] > 0 }

// groupPtr is a pointer in one group's open region: descriptions are matched to saves through it.
type groupPtr struct {
	group uint32
	ptr   uint64
}

// tensors attaches the companion's descriptions to the handles saved in a group's open region.
// described: the descriptions of the open regions' pointers (region_enter's, describe's); saves: the
// handle each group saved at a pointer in its open region. Both are cleared at the group's exit.
type tensors struct {
	described map[groupPtr]trace.Tensor
	saves     map[groupPtr]*Handle
}

// describe records what the companion said of pointer p in group g's open region; a description
// without an argument path keeps the path an earlier one gave (a saved input keeps its argument's name).
func (ts *tensors) describe(g uint32, p uint64, d trace.Tensor) {
	if p == 0 || (!d.Known() && d.Path == "") {
		return
	}
	k := groupPtr{g, p}
	if old := ts.described[k]; d.Path == "" {
		d.Path = old.Path
	}
	ts.described[k] = d
	if h := ts.saves[k]; h != nil && d.Known() {
		h.Tensor = d
	}
}

func (ts *tensors) describeAll(g uint32, ptrs []uint64, ds []trace.Tensor) {
	for i, p := range ptrs {
		ts.describe(g, p, ds[i])
	}
}

// saved notes that g saved h in its open region, taking what was said of that pointer.
func (ts *tensors) saved(g uint32, h *Handle) {
	k := groupPtr{g, h.Base}
	ts.saves[k] = h
	if d := ts.described[k]; d.Known() {
		h.Tensor = d
	}
}

// exit forgets group g's open region.
func (ts *tensors) exit(g uint32) {
	for k := range ts.described {
		if k.group == g {
			delete(ts.described, k)
		}
	}
	for k := range ts.saves {
		if k.group == g {
			delete(ts.saves, k)
		}
	}
}
