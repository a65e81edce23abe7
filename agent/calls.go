// calls.go owns the agent's handler of each control call kind: what a row of shim/c/calls.def runs in the
// agent. The generated dispatch (calls_gen.go) calls kind NAME's handler callCamelName with the call as the
// C side copied it (Call) and where it came from (origin: now, or queued and run by the drain in its place);
// each hands the call's fields to the method that checks them and runs it, and returns its result.
package agent

import (
	"swapagent/trace"
	"swapagent/tracker"
)

func (a *Agent) callRegionEnter(o origin, c *Call) int64 {
	return int64(a.regionEnterDesc(o, c.Group, c.Ptrs, c.NPos, c.Descs))
}

func (a *Agent) callRegionExit(o origin, c *Call) int64 {
	if len(c.Saves) == 0 && len(c.DescPtrs) == 0 {
		return int64(a.regionExit(o, c.Group, c.Ptrs))
	}
	var given []int64
	if c.Queued {
		given = append(given, c.Handles...)
	}
	rc, whole := a.regionExitWith(o, c.Group, c.Ptrs, c.Saves, c.Sizes, c.Flags, c.Handles, c.Queued,
		c.DescPtrs, c.Descs)
	if c.Queued {
		if whole {
			a.unresident(given, nil)
		} else {
			a.unresident(given, c.Handles)
		}
	}
	return int64(rc)
}

func (a *Agent) callSave(o origin, c *Call) int64 {
	return int64(a.saveN(o, c.Group, c.Saves, c.Sizes, c.Flags, c.Handles, false))
}

func (a *Agent) callDescribe(_ origin, c *Call) int64 {
	return int64(a.Describe(c.Group, c.DescPtrs, c.Descs))
}

func (a *Agent) callProtect(_ origin, c *Call) int64 { return int64(a.Protect(c.Group, c.Ptrs)) }

func (a *Agent) callBackwardEnter(o origin, c *Call) int64 { return int64(a.backwardEnter(o, c.Group)) }

func (a *Agent) callBackwardExit(o origin, c *Call) int64 { return int64(a.backwardExit(o, c.Group)) }

func (a *Agent) callHolders(_ origin, c *Call) int64 {
	return int64(a.Holders(c.Group, c.Ptrs, c.Counts))
}

func (a *Agent) callGroupStreams(_ origin, c *Call) int64 {
	return int64(a.GroupStreams(c.Group, c.Ptrs))
}

func (a *Agent) callGuard(_ origin, c *Call) int64 { return int64(a.Guard(c.Group)) }

func (a *Agent) callGuardRelease(_ origin, c *Call) int64 {
	answer, token := a.GuardRelease(c.Group, c.Ptr, c.Nbytes, tracker.Holders(max(c.Others, -1)), c.own())
	c.Token = token
	return int64(answer)
}

func (a *Agent) callGuardRestore(_ origin, c *Call) int64 {
	return int64(a.GuardRestore(c.Handle, c.Ptr, c.Nbytes))
}

// callScopeEnter and callScopeExit record a scope's boundary (SWAPAGENT_CALL_SCOPE_ENTER, SCOPE_EXIT) in
// its place among the runtime calls; the engine is not told: nothing of a scope moves.
func (a *Agent) callScopeEnter(o origin, c *Call) int64 {
	return int64(a.scope(o, "scope_enter", trace.KindScopeEnter, c.Group))
}

func (a *Agent) callScopeExit(o origin, c *Call) int64 {
	return int64(a.scope(o, "scope_exit", trace.KindScopeExit, c.Group))
}

// callEmptyCache records that the job's pool emptied its cache (SWAPAGENT_CALL_EMPTY_CACHE), in its place.
func (a *Agent) callEmptyCache(o origin, c *Call) int64 {
	return int64(a.scope(o, "empty_cache", trace.KindEmptyCache, c.Group))
}

// scope records a call that only marks a point of the job (a scope's boundary, an empty cache), after the
// runtime calls made before it (the drain). It needs no engine: nothing of it moves.
func (a *Agent) scope(o origin, call string, kind trace.Kind, group string) int {
	if err := checkGroup(group); err != nil {
		return a.result(call, err)
	}
	a.begin(o)
	a.record(kind, group, 0, trace.CodeOK, nil)
	return trace.CodeOK
}

func (a *Agent) callNote(_ origin, c *Call) int64 { return int64(a.Note(c.Group, c.Text)) }

// callReleasable answers what a guard release of c.Ptr would be told now (SWAPAGENT_CALL_RELEASABLE): the
// framework's counts as a guard release's (counts[0] the holders, counts[1] and counts[2] the layer's own),
// the ring drained first, nothing recorded, a refusal counted like any other.
func (a *Agent) callReleasable(_ origin, c *Call) int64 {
	if c.Group != "" {
		if err := checkGroup(c.Group); err != nil {
			return int64(a.result("releasable", err))
		}
	}
	held := tracker.HoldersUnknown
	if len(c.Counts) > 0 {
		held = tracker.Holders(max(c.Counts[0], -1))
	}
	e := a.begin(live)
	if e == nil {
		return int64(a.result("releasable", errNoEngine))
	}
	d, err := e.Releasable(c.Group, c.Ptr, tracker.Outside(held, c.own()))
	if err != nil {
		return int64(a.result("releasable", err))
	}
	if d.Allow {
		return trace.ReleaseAllow
	}
	return trace.ReleaseKeep
}
