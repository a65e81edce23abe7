// deferred.go owns the agent's side of the deferred control calls (swapagent.h, "Deferred calls"): the C
// side answered them at once and put a copy of their arguments into the ring; the drain runs each one in
// its place, as the plain call would have run then, stamped with the call's own time and thread. Deferred
// calls run one at a time (replayMu), outside mu, because a call takes the engine's lock and then mu.
package agent

import "swapagent/trace"

// DeferredCall says which call a Deferred is.
type DeferredCall int

// The deferred calls (shim/c/sa_go.h's SA_DEFER_*).
const (
	DeferRegionEnter DeferredCall = iota + 1
	DeferRegionEnd
	DeferBackwardEnter
	DeferBackwardExit
)

// deferredNames are the calls' names in misuse lines and counts.
var deferredNames = map[DeferredCall]string{DeferRegionEnter: "region_enter_deferred",
	DeferRegionEnd: "region_end_deferred", DeferBackwardEnter: "backward_enter_deferred",
	DeferBackwardExit: "backward_exit_deferred"}

// Deferred is one deferred call's arguments as the C side copied them.
type Deferred struct {
	Call  DeferredCall
	Group string
	Ptrs  []uint64 // the inputs (region enter) or outputs (region end)
	NPos  int      // region enter: how many inputs are positional
	// Region end: the saves (Flags all 0 when none were given), the handle the first one was given (the
	// others follow it) and the described pointers.
	Saves, Sizes []uint64
	Flags        []uint32
	First        int64
	DescPtrs     []uint64
	// Descs is one description per input (region enter) or described pointer (region end); nil when none
	// were given. Bad, when not "", is why the description text could not be split into lines.
	Descs []string
	Bad   string
}

// origin says how a control call reaches the agent: from its caller now (the ring is drained first) or
// deferred, run by the drain in its place (everything before it was drained already).
type origin bool

const (
	live     origin = false
	replayed origin = true
)

// Deferrable says how the C side answers the deferred calls (swapagent_deferred): 1 under policy off (every
// one is deferred), 2 under safe (deferred while nothing has moved, a region end only when each save is
// below minBytes, which keeps it on device; else run at once: RunDeferred), 0 otherwise (refused).
func (a *Agent) Deferrable() (mode int, minBytes uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engine == nil {
		return 0, 0
	}
	switch a.cfg.Policy {
	case trace.PolicyOff:
		return 1, 0
	case trace.PolicySafe:
		return 2, a.cfg.MinBytes
	}
	return 0, 0
}

// mayMove comes before a live call that may make the engine move a storage (a region exit, a guarded
// release): under safe it ends the deferred calls for good, so that none runs after a storage moved (the
// drain must never call the framework's storage ops); the call's drain then runs those already queued.
func (a *Agent) mayMove() {
	if !a.deferClosed.Load() && a.cfg.Policy == trace.PolicySafe {
		a.native.DeferClose()
		a.deferClosed.Store(true)
	}
}

// RunDeferred runs a deferred call now, as the plain call (the C side found that under safe it may move a
// storage), and returns what the deferred call returns: a region end its first handle (0 with no saves)
// or the code that refused it whole, the others their code.
func (a *Agent) RunDeferred(d *Deferred) int64 {
	if d.Bad != "" {
		return int64(a.Invalid(deferredNames[d.Call], d.Bad))
	}
	return a.run(live, d)
}

// lockDrained drains the ring, running every deferred call it finds in its place, and returns with mu held
// (a closed agent: at once).
func (a *Agent) lockDrained() {
	a.replayMu.Lock()
	defer a.replayMu.Unlock()
	for {
		a.mu.Lock()
		a.replayAt = nil
		if a.closed {
			return
		}
		d, at := a.drainLocked()
		if d == nil {
			return
		}
		at.by = a.native.ThreadID()
		a.replayAt = &at
		a.mu.Unlock()
		a.replay(d)
	}
}

// stampLocked is the time and thread of the call being recorded: the calling thread now, or, on the thread
// running a deferred call (the drainer's, or a live caller's whose drain found it; a goroutine that runs
// one stays on its OS thread), that call's own. Another thread's call meanwhile keeps its own stamp.
func (a *Agent) stampLocked() (int64, uint32) {
	tid := a.native.ThreadID()
	if at := a.replayAt; at != nil && at.by == tid {
		return at.TS, at.TID
	}
	return a.ts(), tid
}

// stamp is a deferred call's time (on the trace's clock) and thread, and the thread running it (by).
type stamp struct {
	TS      int64
	TID, by uint32
}

// replay runs a deferred call as its plain call, and takes a refused save's handle back out of the C side's
// resident table (it answered the save's unpacks until now).
func (a *Agent) replay(d *Deferred) {
	if d.Bad != "" {
		a.Invalid(deferredNames[d.Call], d.Bad)
		a.unresident(d.First, len(d.Saves), nil)
		return
	}
	a.run(replayed, d)
}

// run runs d as its plain call (see RunDeferred for what it returns).
func (a *Agent) run(o origin, d *Deferred) int64 {
	switch d.Call {
	case DeferRegionEnter:
		return int64(a.regionEnterDesc(o, d.Group, d.Ptrs, d.NPos, d.Descs))
	case DeferRegionEnd:
		out := make([]int64, len(d.Saves))
		for i := range out {
			out[i] = d.First + int64(i)
		}
		rc, whole := a.regionEnd(o, d.Group, d.Ptrs, d.Saves, d.Sizes, d.Flags, out, true, d.DescPtrs, d.Descs)
		if o == replayed {
			if whole {
				out = nil
			}
			a.unresident(d.First, len(d.Saves), out)
		}
		if whole {
			return int64(rc)
		}
		return d.First
	case DeferBackwardEnter:
		return int64(a.backwardEnter(o, d.Group))
	case DeferBackwardExit:
		return int64(a.backwardExit(o, d.Group))
	}
	return int64(a.Invalid("deferred", "unknown deferred call"))
}

// unresident withdraws the deferred handles first..first+n-1 that were not saved: every one when out is
// nil (the call was refused whole), else those whose entry in out is a code.
func (a *Agent) unresident(first int64, n int, out []int64) {
	for i := 0; i < n; i++ {
		if out == nil || out[i] <= 0 {
			a.native.SetResident(first+int64(i), 0)
		}
	}
}
