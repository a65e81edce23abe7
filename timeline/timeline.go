// Package timeline folds one process's trace events into what they mean, once, for every reader (as
// heaptrack's AccumulatedTraceData does for its analysers): the names of functions and groups, the swap
// handles with their storages, keep reasons, tensor descriptions and state transitions, the order of
// releases, the region boundaries (which group received or produced each pointer), the memory series,
// the agent's fault records, its last stats, logs, metadata and lost counts.
//
// report.Summarize, doctor's trace index and replay's recorded side read a Timeline; none of them
// interprets those events itself. Nothing here reads trace bytes (package trace does) or renders.
package timeline

import (
	"encoding/json"
	"strconv"

	"swapagent/pool"
	"swapagent/trace"
)

// Options configure a fold.
type Options struct {
	NoSeries bool // figures only, no memory curves (replay: traces of millions of calls)
	// PoolSchedule is what a first pass over the same events found of the recording's pool blocks
	// (pool.Blocks.Schedule); nil: this fold is that first pass (Foot.RefoldPool then follows them again).
	PoolSchedule *pool.Schedule
	// NoPool leaves the pool model out: a reader that needs no no-swap peak (NoSwapPeak is then the estimate).
	NoPool bool
	// Retire, when set, makes the fold's memory independent of the trace's length: a handle is passed to
	// Retire and dropped once its group's backward_exit succeeded (the engine forgets the group's handles
	// there, so no later event names them), and the fold keeps no per-change history (Transitions,
	// Released, Inputs, Outputs stay empty; Moved has the sums). For a reader that derives figures only.
	Retire func(*Handle)
}

// Timeline is one trace folded in file order. Build it with Fold, or with New and Add one event at a
// time when a reader must see the recording's state as of each event (replay).
type Timeline struct {
	Header    trace.Header
	NumEvents int            // events folded
	EndNS     int64          // the largest event timestamp: the trace spans [StartUnix, StartUnix+EndNS]
	Gaps      []trace.Gap    // damaged stretches skipped while reading: set by the reader, not by the fold
	Repairs   []trace.Repair // damage the reader undid (nothing lost): set by the reader
	Joined    []trace.Joined // other traces after the file's own (files joined), not read: set by the reader
	Truncated bool           // the trace ends inside a batch (a killed process): set by the reader

	Funcs      map[uint16]string // function names by id (KindFunc)
	Groups     map[uint32]string // group names by id (KindGroup)
	GroupOrder []string          // group names in the order the trace first named each id
	groupIDs   []uint32          // GroupOrder's ids
	// scopeOnly: groups only scope and empty-cache events used so far (not swap groups: SwapGroups)
	scopeOnly map[uint32]bool

	Foot       Footprint // device memory: runtime allocations or VMM mappings, and what swap released
	Saved      Saved     // the storages the groups saved for backward, without swap (saved.go)
	HostPinned Memory    // aclrtMallocHost minus aclrtFreeHost
	Reserved   Memory    // VMM address space reserved (aclrtReserveMemAddress): not memory
	VMM        bool      // the job mapped its device memory (aclrtMapMem)

	Handles     map[int64]*Handle // every handle a save, classify or state event named (and not retired)
	Released    []*Handle         // handles in the order of their first release
	Transitions []Transition      // every state change, in file order
	Moved       Moved             // the state changes summed
	Reasons     map[uint64]uint64 // KindClassify events by keep reason value

	Steps   []int64                // start of each step: a region_enter of the trace's first group
	Inputs  map[uint64][]RegionUse // region inputs by pointer, in file order
	Outputs map[uint64][]uint32    // groups that gave the pointer as a region output, in file order

	Guard Guard // what the job's own swap asked of the guard (guard.go)

	Faults    []Fault
	StatsJSON json.RawMessage // the last KindStats text, verbatim
	HasStats  bool            // a KindStats event was present
	Logs      []string
	Meta      trace.Meta // the KindMeta records merged; a later value wins
	Lost      uint64     // runtime events the shim dropped (KindLost)

	kinds  [256]uint64   // events by Kind
	calls  []uint64      // KindCall events by function id
	class  []trace.Class // trace.ClassOf of each function id's name
	bases  map[uint64]int
	tensor tensors
	first  struct {
		group uint32
		seen  bool
	}
	owners ownerIndex
	retire func(*Handle)
}

// New returns an empty Timeline for a trace with header h.
func New(h trace.Header, opt Options) *Timeline {
	t := &Timeline{
		Header: h,
		Funcs:  map[uint16]string{}, Groups: map[uint32]string{}, scopeOnly: map[uint32]bool{},
		Handles: map[int64]*Handle{}, Reasons: map[uint64]uint64{},
		Moved:  Moved{Changes: map[Change]uint64{}},
		Inputs: map[uint64][]RegionUse{}, Outputs: map[uint64][]uint32{},
		Meta:   trace.Meta{},
		bases:  map[uint64]int{},
		tensor: tensors{described: map[groupPtr]trace.Tensor{}, saves: map[groupPtr]*Handle{}},
		retire: opt.Retire,
	}
	t.Foot.NoSeries = opt.NoSeries
	if !opt.NoPool {
		t.Foot.Pool = pool.NewBlocks(nil, opt.PoolSchedule)
	}
	t.Saved.noSeries = opt.NoSeries
	t.HostPinned.noSeries = opt.NoSeries
	t.Reserved.noSeries = opt.NoSeries
	return t
}

// Fold interprets one trace's events, in file order. It never fails: what it cannot use is counted
// (Count) and skipped.
func Fold(h trace.Header, events []trace.Event, opt Options) *Timeline {
	t := New(h, opt)
	for i := range events {
		t.Add(&events[i])
	}
	return t
}

// Add folds the next event of the trace.
func (t *Timeline) Add(ev *trace.Event) {
	t.NumEvents++
	t.kinds[ev.Kind]++
	if t.Foot.Pool != nil {
		t.Foot.addPool(ev)
	}
	t.EndNS = max(t.EndNS, ev.TS)
	if ev.Group != 0 && ev.Kind != trace.KindGroup && ev.Kind != trace.KindScopeEnter &&
		ev.Kind != trace.KindScopeExit && ev.Kind != trace.KindEmptyCache {
		t.scopeOnly[ev.Group] = false
	}
	switch ev.Kind {
	case trace.KindCall:
		t.call(ev)
	case trace.KindFunc:
		t.Funcs[ev.Fn] = ev.Text
		for int(ev.Fn) >= len(t.class) {
			t.class = append(t.class, trace.ClassOther)
		}
		t.class[ev.Fn] = trace.ClassOf(ev.Text)
	case trace.KindGroup:
		if _, seen := t.Groups[ev.Group]; !seen {
			t.GroupOrder = append(t.GroupOrder, ev.Text)
			t.groupIDs = append(t.groupIDs, ev.Group)
		}
		t.Groups[ev.Group] = ev.Text
	case trace.KindScopeEnter, trace.KindScopeExit, trace.KindEmptyCache:
		if _, used := t.scopeOnly[ev.Group]; !used {
			t.scopeOnly[ev.Group] = true
		}
	case trace.KindRegionEnter:
		t.Saved.end(ev)
		t.regionEnter(ev)
	case trace.KindRegionExit:
		t.regionExit(ev)
	case trace.KindDescribe:
		t.tensor.describeAll(ev.Group, ev.Ptrs, trace.SplitTensors(ev.Text, len(ev.Ptrs)))
	case trace.KindSave:
		t.save(ev)
		t.Saved.save(ev)
	case trace.KindClassify:
		t.classify(ev)
	case trace.KindState:
		t.state(ev)
	case trace.KindBackwardExit:
		if ev.Ret == 0 {
			t.Saved.end(ev)
		}
		t.backwardExit(ev)
	case trace.KindFault:
		t.Faults = append(t.Faults, decodeFault(ev.TS, ev.Text))
	case trace.KindStats:
		t.StatsJSON, t.HasStats = json.RawMessage(ev.Text), true
	case trace.KindLog:
		t.Logs = append(t.Logs, ev.Text)
	case trace.KindMeta:
		t.Meta.Parse(ev.Text)
	case trace.KindLost:
		t.Lost += ev.Args[0]
	case trace.KindGuarded, trace.KindGuard, trace.KindGuardRestore:
		t.guard(ev)
	}
}

// SwapGroups is GroupOrder less the groups the trace used only as scopes (SWAPAGENT_CALL_SCOPE_ENTER: the
// layers a job does not swap, functions inside them) or for its pool's empty cache.
func (t *Timeline) SwapGroups() []string {
	var out []string
	for i, id := range t.groupIDs {
		if !t.scopeOnly[id] {
			out = append(out, t.GroupOrder[i])
		}
	}
	return out
}

// Count is the number of events of kind k folded so far.
func (t *Timeline) Count(k trace.Kind) uint64 { return t.kinds[k] }

// FuncName is the name of a function id (from KindFunc), or "fn#N" when the trace never named it.
func (t *Timeline) FuncName(fn uint16) string {
	if n, ok := t.Funcs[fn]; ok {
		return n
	}
	return "fn#" + strconv.FormatUint(uint64(fn), 10)
}

// GroupName is the name of a group id (from KindGroup), or "group#N" when the trace never named it.
func (t *Timeline) GroupName(g uint32) string {
	if n, ok := t.Groups[g]; ok && n != "" {
		return n
	}
	return "group#" + strconv.FormatUint(uint64(g), 10)
}

// Class is what the function with id fn does (trace.ClassOf its name; ClassOther when never named).
func (t *Timeline) Class(fn uint16) trace.Class {
	if int(fn) < len(t.class) && t.class[fn] != trace.ClassUnknown {
		return t.class[fn]
	}
	return trace.ClassOther
}

// CallCounts counts the runtime calls by function name ("fn#N" for an id the trace never named).
func (t *Timeline) CallCounts() map[string]uint64 {
	out := make(map[string]uint64)
	for fn, n := range t.calls {
		if n > 0 {
			out[t.FuncName(uint16(fn))] += n
		}
	}
	return out
}

// ledger is a memory that runtime calls allocate into and free from.
type ledger interface {
	Alloc(ts int64, ptr, size uint64)
	Free(ts int64, ptr uint64) (uint64, bool)
}

// ledgerOf says which memory a call of class c allocates into (alloc) or frees from; nil for a call
// that does neither.
func (t *Timeline) ledgerOf(c trace.Class) (l ledger, alloc bool) {
	switch c {
	case trace.ClassDeviceAlloc, trace.ClassDeviceFree:
		return &t.Foot, c == trace.ClassDeviceAlloc
	case trace.ClassHostAlloc, trace.ClassHostFree:
		return &t.HostPinned, c == trace.ClassHostAlloc
	case trace.ClassReserve, trace.ClassReserveRelease:
		return &t.Reserved, c == trace.ClassReserve
	}
	return nil, false
}

// call accounts one intercepted runtime call (argument layout: docs/trace-format.md, "KindCall"). A
// failed call (non-zero Ret) allocated or freed nothing.
func (t *Timeline) call(ev *trace.Event) {
	for int(ev.Fn) >= len(t.calls) {
		t.calls = append(t.calls, 0)
	}
	t.calls[ev.Fn]++
	c := t.Class(ev.Fn)
	if c == trace.ClassTensor {
		if ev.Args[1] != 0 {
			t.Foot.Touch(ev.TS, ev.Args[1])
		}
		return
	}
	l, alloc := t.ledgerOf(c)
	switch {
	case l == nil || ev.Ret != 0:
	case alloc && ev.Args[0] != 0:
		l.Alloc(ev.TS, ev.Args[0], ev.Args[1])
		t.VMM = t.VMM || (c == trace.ClassDeviceAlloc && t.Funcs[ev.Fn] == "aclrtMapMem")
	case !alloc:
		l.Free(ev.TS, ev.Args[0])
	}
}

// ScanMeta returns the KindMeta records of events merged (a later value wins), as Fold's Meta: for a
// reader that needs the recording's settings before it folds anything.
func ScanMeta(events []trace.Event) trace.Meta {
	m := trace.Meta{}
	for i := range events {
		if events[i].Kind == trace.KindMeta {
			m.Parse(events[i].Text)
		}
	}
	return m
}

// Forget drops what the fold keeps per storage and per change (Handles, Released, Transitions, Inputs,
// Outputs, the tensors described, the blocks live in each Memory) once a reader has derived its figures: a
// report of many traces then holds each trace's figures, not its history. The Timeline must not be added
// to after.
func (t *Timeline) Forget() {
	t.Handles, t.Released, t.Transitions = nil, nil, nil
	t.Inputs, t.Outputs = nil, nil
	t.tensor, t.owners, t.bases = tensors{}, ownerIndex{}, nil
	t.Foot.Held.live, t.Foot.free, t.HostPinned.live, t.Reserved.live = nil, nil, nil, nil
	t.Foot.Pool, t.Foot.check = nil, nil
	t.Saved.live, t.Saved.refs, t.Saved.byGroup = nil, nil, nil
}
