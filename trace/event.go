// Package trace owns swapagent's trace format: the event schema, the crash-safe writer and the one
// reader every command uses. Nothing else in the project parses trace bytes.
package trace

import "strconv"

// Kind says what an Event records. Values are part of the on-disk format: never re-number.
type Kind uint8

const (
	// KindCall is one intercepted runtime call: Fn, TID, TS, Ret and up to six Args
	// (see docs/trace-format.md for each function's argument layout).
	KindCall Kind = 1
	// KindFunc names a function id: Fn and Text. Written before the first KindCall that uses Fn.
	KindFunc Kind = 2
	// KindGroup names a group id: Group and Text. Written before the first event that uses Group.
	KindGroup Kind = 3
	// KindRegionEnter: Group, Ptrs (inputs), Args[0] = number of positional inputs (rest are keyword),
	// Text = the inputs' Tensor descriptions when the companion gave them (JoinTensors: a line per input).
	KindRegionEnter Kind = 4
	// KindSave: Group, Handle, Args[0] = storage ptr, Args[1] = nbytes, Args[2] = flags, Args[3] = 0
	// (reserved: a storage's generation is known at region exit and comes with its KindClassify).
	KindSave Kind = 5
	// KindRegionExit: Group, Ptrs (outputs).
	KindRegionExit Kind = 6
	// KindProtect: Group, Ptrs.
	KindProtect Kind = 7
	// KindBackwardEnter: Group.
	KindBackwardEnter Kind = 8
	// KindUnpack: Handle, Ret = returned base.
	KindUnpack Kind = 9
	// KindBackwardExit: Group.
	KindBackwardExit Kind = 10
	// KindClassify: Group, Handle, Args[0] = storage base, Args[1] = nbytes, Args[2] = keep reason,
	// Args[3] = generation, Args[4] = the framework's count of the storage's other holders + 1 (HoldersArg;
	// 0: none given), on the reclassification SWAPAGENT_CALL_HOLDERS made.
	KindClassify Kind = 11
	// KindState: Handle, Args[0] = from state, Args[1] = to state, Args[2] = device base after the change,
	// Args[3] = nbytes.
	KindState Kind = 12
	// KindFault: Text holds the fault record as JSON (kernel, addr, size, storage, released_by, owner, ...).
	KindFault Kind = 13
	// KindStats: Text holds the stats JSON (written at exit and periodically).
	KindStats Kind = 14
	// KindLog: Text holds a warning or error the agent logged (config problems, misuse).
	KindLog Kind = 15
	// KindMeta: Text holds key=value process metadata (policy, prefetch, min_bytes, rank, argv, ...).
	KindMeta Kind = 16
	// KindLost: Args[0] = number of runtime events the shim had to drop (ring full with no drainer).
	KindLost Kind = 17
	// KindDescribe: Group, Ptrs = storage pointers of the group's current forward (its outputs and what it
	// saved), Text = their Tensor descriptions (JoinTensors: a line per pointer).
	KindDescribe Kind = 18
	// KindGuard: the job's own swap asked to release a storage (SWAPAGENT_CALL_GUARD_RELEASE). Group and Handle
	// are the deciding group's and its save's (0 when no live group saved it), Args[0] = storage ptr,
	// Args[1] = nbytes, Args[2] = the answer (ReleaseKeep or ReleaseAllow), Args[3] = keep reason + 1 (0: a
	// storage no live group saved), Args[4] = the framework's count of other holders + 1 (0: none given;
	// HoldersArg), Args[5] = how many of those are the layer's own machinery, and their kinds (OwnArg; 0:
	// none given), Text = what the storage is ("keyword input rotary_cos_sin[0] of
	// swap_group_0..swap_group_4"; empty when unknown).
	KindGuard Kind = 19
	// KindGuardRestore: the job's swap gave a storage it released memory again (SWAPAGENT_CALL_GUARD_RESTORE):
	// Group (the releasing group's; 0 when unknown), Handle = the release's token, Ret = the call's code,
	// Args[0] = the storage's base now, Args[1] = nbytes.
	KindGuardRestore Kind = 20
	// KindGuarded: Group is moved by its framework, the agent only answers its releases (SWAPAGENT_CALL_GUARD).
	KindGuarded Kind = 21
	// KindSegment opens every segment after the first (segment.go): Args[0] = the segment's index, Args[1]
	// = the number of snapshot events that follow it, TS = the last TS before the segment began.
	KindSegment Kind = 22
	// KindScopeEnter, KindScopeExit: Group, a scope of the job the agent records and never moves
	// (SWAPAGENT_CALL_SCOPE_ENTER and SCOPE_EXIT: a layer it does not swap, a function inside one).
	KindScopeEnter Kind = 23
	KindScopeExit  Kind = 24
	// KindEmptyCache: Group, the job's pool emptied its cache here (SWAPAGENT_CALL_EMPTY_CACHE).
	KindEmptyCache Kind = 25
)

// Event is one decoded trace record. Fields a Kind does not use are zero.
type Event struct {
	Kind   Kind
	TS     int64 // nanoseconds since the trace header's start time
	TID    uint32
	Fn     uint16
	Group  uint32
	Handle int64
	Ret    int64
	Args   [6]uint64
	Ptrs   []uint64
	Text   string
}

// Header is the per-process preamble of a trace file.
type Header struct {
	Version   uint32
	PID       int
	Host      string
	Rank      int   // -1 when unknown
	StartUnix int64 // wall clock at start, nanoseconds since the epoch
	Argv      []string
	// Segment is the file's index among its process's segments, 0 for the first (version 2 on; see
	// segment.go). A reader of a trace whose older segments were dropped starts at a later one.
	Segment int
	// First is the index, among every event the process wrote over all its segments, of the segment's first
	// event after its snapshot; Lead the events that open the segment before it (its KindSegment record and
	// snapshot; 0 for segment 0). Version 4 on: a reader counts the events of a missing segment from them.
	First uint64
	Lead  int
}

var kindNames = [...]string{
	KindCall: "call", KindFunc: "func", KindGroup: "group", KindRegionEnter: "region_enter",
	KindSave: "save", KindRegionExit: "region_exit", KindProtect: "protect",
	KindBackwardEnter: "backward_enter", KindUnpack: "unpack", KindBackwardExit: "backward_exit",
	KindClassify: "classify", KindState: "state", KindFault: "fault", KindStats: "stats",
	KindLog: "log", KindMeta: "meta", KindLost: "lost", KindDescribe: "describe", KindGuard: "guard",
	KindGuardRestore: "guard_restore", KindGuarded: "guarded", KindSegment: "segment",
	KindScopeEnter: "scope_enter", KindScopeExit: "scope_exit", KindEmptyCache: "empty_cache",
}

// String returns the Kind's short name ("call", "region_enter", ...) or "kind(N)" for one this
// build does not know.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// HoldersArg is a KindGuard event's Args[4] for a framework's count of a storage's other holders
// (negative: none given); Holders reads it back (-1 for none given, as in traces before the count).
func HoldersArg(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n) + 1
}

// Holders is the count of other holders a KindGuard event's Args[4] holds, -1 when none was given.
func Holders(arg uint64) int64 { return int64(arg) - 1 }

// OwnArg encodes the layer's own holders among them (n of kinds, Own* bits) for a KindGuard event's
// Args[5]: 0 when none was given, else n+1 in the low 32 bits and the kinds above.
func OwnArg(n int64, kinds uint64) uint64 {
	if n <= 0 {
		return 0
	}
	return uint64(min(n, 1<<32-2)+1) | kinds<<32
}

// OwnHolders decodes a KindGuard event's Args[5] (OwnArg): how many of its holders were the layer's own, and
// their kinds (0, 0 when none was given: a trace from before it was recorded reads so).
func OwnHolders(arg uint64) (n int64, kinds uint64) {
	if arg == 0 {
		return 0, 0
	}
	return int64(arg&(1<<32-1)) - 1, arg >> 32
}

// OwnKindNames names the kinds set in an Own* mask ("view base", "packed"), in bit order.
func OwnKindNames(kinds uint64) []string {
	var out []string
	for i, n := range OwnNames {
		if kinds&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}
