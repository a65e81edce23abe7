// guard.go owns the agent's side of the guard ABI (SWAPAGENT_CALL_GUARD, SWAPAGENT_CALL_GUARD_RELEASE,
// SWAPAGENT_CALL_GUARD_RESTORE): the job's own swap code asks before each release, the engine answers by the
// ownership rule (offload/guard.go), and the agent records every answer and says once per argument, on
// stderr, what it kept and why.
package agent

import (
	"fmt"
	"strings"

	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// Guard declares group moved by its framework (SWAPAGENT_CALL_GUARD).
func (a *Agent) Guard(group string) int {
	return a.groupCall(live, "guard", trace.KindGuarded, group, nil,
		func(e *offload.Engine) error { return e.Guard(group) })
}

// GuardRelease answers a release the framework attempts (SWAPAGENT_CALL_GUARD_RELEASE, with the framework's
// count of the storage's other holders when it gives one, and how many of them are the layer's own):
// trace.ReleaseAllow or trace.ReleaseKeep, or a negative code, and the token of an allowed release (the
// handle it is recorded under; 0 for none). group "" lets the engine find the groups that saved the storage.
func (a *Agent) GuardRelease(group string, ptr, nbytes uint64, held tracker.Holders, own tracker.Own) (answer int, token int64) {
	if group != "" {
		if err := checkGroup(group); err != nil {
			return a.result("guard_release", err), 0
		}
	}
	a.mayMove()
	e := a.begin(live)
	if e == nil {
		return a.result("guard_release", errNoEngine), 0
	}
	d, err := e.GuardRelease(group, ptr, nbytes, tracker.Outside(held, own))
	if err != nil {
		return a.result("guard_release", err), 0
	}
	answer, reason := trace.ReleaseKeep, -1
	if d.Allow {
		answer = trace.ReleaseAllow
		if d.Known {
			token = d.Handle
		}
	}
	var what string
	if d.Known {
		reason = int(d.Reason)
		si, _ := a.tracker.Storage(d.Storage)
		what = guardWhat(si, d.Reason, d.Group)
	}
	a.recordText(trace.KindGuard, d.Group, d.Handle, int64(answer), nil, what, ptr, nbytes, uint64(answer),
		uint64(reason+1), trace.HoldersArg(int64(held)), trace.OwnArg(own.N, own.Kinds))
	return answer, token
}

// GuardRestore records that the framework gave the storage of an allowed release (token) memory again.
func (a *Agent) GuardRestore(token int64, newPtr, nbytes uint64) int {
	err := errNoEngine
	group := ""
	if e := a.begin(live); e != nil {
		group, err = e.GuardRestore(token, newPtr, nbytes)
	}
	c := a.result("guard_restore", err)
	a.record(trace.KindGuardRestore, group, token, int64(c), nil, newPtr, nbytes)
	return c
}

// guardWhat names a storage the job's swap asked to release: the argument it was ("keyword input
// rotary_cos_sin[0] of swap_group_0..swap_group_4"), else what it is to group.
func guardWhat(si tracker.StorageInfo, r tracker.Reason, group string) string {
	if o := si.Owner(); o != "" {
		return o
	}
	switch r {
	case tracker.Output:
		return "output of " + group
	case tracker.Param:
		return "parameter of " + group
	case tracker.Shared:
		return "storage saved by " + tracker.GroupList(si.Holders)
	}
	return "storage of " + group
}

// keptOnce says on stderr, the first time each argument (or kind of storage) is kept from the job's own
// swap (offload.EvGuardKeep), what it would have freed and why it stays.
func (a *Agent) keptOnce(ev offload.Event) {
	si, _ := a.tracker.Storage(ev.Storage)
	what := guardWhat(si, ev.Reason, ev.Group)
	key := what
	if len(si.Inputs) > 0 && si.Inputs[0].Arg != "" {
		key = si.Inputs[0].Arg
	}
	if _, dup := a.keptSaid.LoadOrStore(key, true); dup {
		return
	}
	tensor := ""
	if t := si.Tensor.String(); t != "" {
		tensor = t + ", "
	}
	fmt.Fprintf(a.stderr, "swapagent: guard kept %s (%s%d bytes) on device: the job's swap would have freed "+
		"it after %s, but %s (policy %s; said once per argument)\n", what, tensor, ev.Size, ev.Group, ev.Detail,
		a.cfg.Policy)
}

// The bounds of a note (SWAPAGENT_CALL_NOTE).
const (
	MaxNoteKey   = 64
	MaxNoteValue = 1024
)

// Note records key=value in the trace's metadata (SWAPAGENT_CALL_NOTE): a KindMeta event, which readers merge
// with the first one (a later value of a key wins).
func (a *Agent) Note(key, value string) int {
	if key == "" || len(key) > MaxNoteKey || strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
		return a.result("note", fmt.Errorf("%w: key %q (1 to %d letters, digits or '_')", offload.ErrInvalid, key, MaxNoteKey))
	}
	if len(value) > MaxNoteValue || strings.IndexFunc(value, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return a.result("note", fmt.Errorf("%w: value of %s: at most %d bytes, no control character", offload.ErrInvalid,
			key, MaxNoteValue))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.noted[key] = true
		if key == trace.MetaPythonUnguarded {
			a.sink.open() // a warning the run's summary and report must show, whatever else the process does
		}
		a.sink.note(key, value, a.ts())
	}
	return trace.CodeOK
}

// notePythonAbsent records, at exit, that a Python process `swapagent run` offered the bootstrap to never
// ran it (python -I or -S, or a PYTHONPATH the job replaced): the run's summary names it. The trace opens
// for it if nothing else opened it. Called with a.mu held.
func (a *Agent) notePythonAbsent() {
	if a.cfg.Python != "auto" || a.noted[trace.MetaPythonGuard] || !trace.IsPython(a.argv) {
		return
	}
	a.sink.open()
	a.sink.note(trace.MetaPythonGuard, "absent", a.ts())
}
