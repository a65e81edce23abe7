// queued.go owns the agent's one entry for a control call (Run) and its side of the queued calls
// (swapagent.h, "Queued calls"): the C side copied each call's arguments once (shim/c/calls.c) and either
// runs it here now or answered it at once and put the copy into the ring; the drain then runs it in its
// place, as it would have run then, stamped with the call's own time and thread. Queued calls run one at a
// time (queueMu), outside mu, because a call takes the engine's lock and then mu.
package agent

import (
	"strings"

	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// Call is one control call as the C side copied it (struct swapagent_call: its kind says which fields it
// reads).
type Call struct {
	Kind  int // trace.Call*
	Group string
	Ptrs  []uint64 // inputs (region enter), outputs (region exit), storages, streams
	NPos  int      // region enter: how many inputs are positional
	// Counts: holders, one per pointer; a guard release's own holders and their kinds (Call.own).
	Counts []int64
	// The saves (Flags nil: all 0) and their handles: filled by the call, or given already to a queued one.
	Saves, Sizes []uint64
	Flags        []uint32
	Handles      []int64
	DescPtrs     []uint64
	// Descs is one description per input (region enter) or described pointer; nil when none were given. Bad,
	// when not "", is why the text could not be split into lines. Text is the text as given (a note's value).
	Descs []string
	Bad   string
	Text  string
	// Guard release and restore: the storage's base and size, the holders' count, the release's token
	// (Handle: restore's argument; Token: release's answer).
	Ptr, Nbytes   uint64
	Others        int64
	Handle, Token int64
	// Queued: the C side answered it and the drain runs it (its saves' handles were given in C).
	Queued bool
}

// own is a guard release's count of the layer's own holders among Others: counts[1] and its kinds
// counts[2], where the caller gave them.
func (c *Call) own() tracker.Own {
	var o tracker.Own
	if len(c.Counts) > 1 {
		o.N = c.Counts[1]
	}
	if len(c.Counts) > 2 {
		o.Kinds = uint64(c.Counts[2])
	}
	return o
}

// CallName names a call kind in misuse lines ("call" for none the header defines).
func CallName(kind int) string {
	if kind >= 1 && kind <= trace.NumCalls {
		return trace.CallNames[kind-1]
	}
	return "call"
}

// SplitText splits description text into its lines, each ended by a NUL (Call.Descs, Call.Bad).
func SplitText(text []byte) ([]string, string) {
	if len(text) == 0 {
		return []string{}, ""
	}
	if text[len(text)-1] != 0 {
		return nil, "text: its last line is not ended by a NUL"
	}
	return strings.Split(string(text[:len(text)-1]), "\x00"), ""
}

// origin says how a control call reaches the agent: from its caller now (the ring is drained first) or
// queued, run by the drain in its place (everything before it was drained already).
type origin bool

const (
	live   origin = false
	queued origin = true
)

// Queueing says how the C side takes the queued calls, as the engine allows them (offload.Engine.Queueing);
// without an engine every call runs at once.
func (a *Agent) Queueing() (q offload.Queueing, keepBelow uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engine == nil {
		return offload.QueueNone, 0
	}
	return a.engine.Queueing()
}

// mayMove comes before a live call that may make the engine move a storage (a region exit, a guarded
// release): where queueing lasts until the first move, it ends the queued calls for good, so that none runs
// after a storage moved (the drain must never call the framework's storage ops); the call's drain then runs
// those already queued.
func (a *Agent) mayMove() {
	if !a.queueClosed.Load() && a.cfg.Policy.Queueing() == offload.QueueUntilMove {
		a.native.QueueClose()
		a.queueClosed.Store(true)
	}
}

// Run runs a control call now and returns its result: a code, or what its kind answers (a guard release
// its answer, with the token in c.Token; the saves' handles or codes are in c.Handles).
func (a *Agent) Run(c *Call) int64 {
	if c.Bad != "" {
		return int64(a.Invalid(CallName(c.Kind), c.Bad))
	}
	return a.run(live, c)
}

// lockDrained drains the ring, running every queued call it finds in its place, and returns with mu held
// (a closed agent: at once).
func (a *Agent) lockDrained() {
	a.queueMu.Lock()
	defer a.queueMu.Unlock()
	for {
		a.mu.Lock()
		a.queuedAt = nil
		if a.closed {
			return
		}
		c, at := a.drainLocked()
		if c == nil {
			return
		}
		at.by = a.native.ThreadID()
		a.queuedAt = &at
		a.mu.Unlock()
		a.runQueued(c)
	}
}

// stampLocked is the time and thread of the call being recorded: the calling thread now, or, on the thread
// running a queued call (the drainer's, or a live caller's whose drain found it; a goroutine that runs
// one stays on its OS thread), that call's own. Another thread's call meanwhile keeps its own stamp.
func (a *Agent) stampLocked() (int64, uint32) {
	tid := a.native.ThreadID()
	if at := a.queuedAt; at != nil && at.by == tid {
		return at.TS, at.TID
	}
	return a.ts(), tid
}

// stamp is a queued call's time (on the trace's clock) and thread, and the thread running it (by).
type stamp struct {
	TS      int64
	TID, by uint32
}

// runQueued runs a queued call as it would have run when made, and takes a refused save's handle back out
// of the C side's resident table (it answered the save's unpacks until now).
func (a *Agent) runQueued(c *Call) {
	c.Queued = true
	if c.Bad != "" {
		a.Invalid(CallName(c.Kind), c.Bad)
		a.unresident(c.Handles, nil)
		return
	}
	a.run(queued, c)
}

// run runs c (see Run for what it returns) by its kind's handler (agent/calls.go, dispatched by calls.def).
func (a *Agent) run(o origin, c *Call) int64 { return a.dispatch(o, c) }

// unresident withdraws the queued handles given that were not saved: every one when out is nil (the call was
// refused whole), else those whose entry in out is a code.
func (a *Agent) unresident(given, out []int64) {
	for i, h := range given {
		if out == nil || out[i] <= 0 {
			a.native.SetResident(h, 0)
		}
	}
}
