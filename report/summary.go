// Package report turns one process's decoded trace events into a Summary and renders it (text, JSON,
// Chrome trace for Perfetto, SVG). Summarize takes the trace's interpretation from package timeline and
// derives the report's figures; each renderer is a small function over the same Summary. Nothing here
// parses trace bytes (package trace) or interprets events (package timeline).
package report

import (
	"encoding/json"
	"sort"
	"strconv"

	"swapagent/timeline"
	"swapagent/trace"
)

// KeepReasons names the keep reasons of swapagent.h by value (KindClassify Args[2]).
var KeepReasons = trace.KeepReasonNames

// States names the offload states of swapagent.h by value (KindState Args[0] and Args[1]).
var States = trace.StateNames

// The memory ledgers and fault records are the timeline's (package timeline folds them).
type (
	MemPoint = timeline.MemPoint
	Memory   = timeline.Memory
	Fault    = timeline.Fault
)

// ABI counts the control-ABI activity the trace recorded.
type ABI struct {
	Groups         []string          `json:"groups"`
	RegionEnters   uint64            `json:"region_enters"`
	RegionExits    uint64            `json:"region_exits"`
	Saves          uint64            `json:"saves"`
	Protects       uint64            `json:"protects"`
	BackwardEnters uint64            `json:"backward_enters"`
	BackwardExits  uint64            `json:"backward_exits"`
	Unpacks        uint64            `json:"unpacks"`
	Classified     uint64            `json:"classified"`
	KeepReasons    map[string]uint64 `json:"keep_reasons"`
	Transitions    map[string]uint64 `json:"transitions"`
}

// Stats is the stats JSON of architecture.md (the core of `report --format json`).
type Stats struct {
	OffloadedStorages uint64            `json:"offloaded_storages"`
	OffloadedBytes    uint64            `json:"offloaded_bytes"`
	RestoredBytes     uint64            `json:"restored_bytes"`
	Kept              map[string]uint64 `json:"kept"`
	ReleasedExternal  uint64            `json:"released_external"`
	PeakDeviceBytes   uint64            `json:"peak_device_bytes"`
	Faults            []json.RawMessage `json:"faults"`
}

// Span is one group's offload (d2h until on host) or restore (h2d until on device), merged over the
// group's storages that moved together.
type Span struct {
	Group   string
	Restore bool // false: offload
	Start   int64
	End     int64
	Bytes   uint64
	Handles int
}

// Summary is everything the renderers show about one trace: its timeline (names, handles, memory,
// faults, the agent's stats JSON, logs, metadata, lost counts, what reading skipped) and the figures
// the report derives from it.
type Summary struct {
	*timeline.Timeline

	Path       string
	Events     []trace.Event // the decoded events, for timeline renderers (LoadFile keeps runtime calls only)
	CallsLeft  int           // runtime calls LoadFile did not keep (Keep.Calls)
	TraceBytes uint64        // the trace files' size (0: unknown, standard input)
	// Segments are the segment files read; FirstSegment > 0 says the oldest were dropped
	// (SWAPAGENT_TRACE_LIMIT), and then the trace covers the run from FromNS on.
	Segments     int
	FirstSegment int
	FromNS       int64

	Calls  map[string]uint64
	Device Memory     // runtime allocations or VMM mappings: Foot.Held
	Mem    MemFigures // the memory figures every format shows
	ABI    ABI
	Spans  []Span

	// Stats merges the last KindStats (StatsJSON, verbatim; HasStats says whether there was one) with
	// figures derived from the events for any field it lacks.
	Stats Stats

	// Guard is what the guard did (guard.go); nil when the trace shows no guarded group.
	Guard *GuardReport
	// Holders is what the holders' evidence decided in the engine's groups; nil when none was given.
	Holders *HolderReport

	// Warnings are the lines to print about what reading lost (trace.File.Warnings; LoadFile sets them).
	Warnings []string
	// Damaged says reading met damage or a trace its writer did not close (trace.File.Damaged): exit 3.
	Damaged bool
	// Closed and End: the trace's close mark was read, and the index of the first event neither read nor
	// counted lost (trace.File; version 4 traces, Indexed).
	Indexed, Closed bool
	End             uint64
}

// Summarize folds one trace's events (timeline.Fold) and derives the report's figures. It never fails:
// events it cannot use are counted and skipped.
func Summarize(path string, h trace.Header, events []trace.Event, truncated bool) *Summary {
	return summarize(path, timeline.Fold(h, events, timeline.Options{}), &handleFigures{}, events, truncated)
}

// summarize derives the report's figures from t, the fold of a trace, and hf, the handles it retired (and
// its events, kept for the timeline formats; nil when they were folded as read).
func summarize(path string, t *timeline.Timeline, hf *handleFigures, events []trace.Event,
	truncated bool) *Summary {
	t.Truncated = truncated
	for _, h := range t.Handles {
		hf.add(t, h)
	}
	s := &Summary{Timeline: t, Path: path, Events: events, Calls: t.CallCounts(), Device: t.Foot.Held,
		ABI: abiOf(t), Spans: spans(t)}
	s.Mem = figures(&t.Foot, &t.Reserved, t.VMM)
	if _, partial := t.Coverage(); partial {
		s.Mem.Withhold(PartialRun)
	}
	s.Stats = mergeStats(t.StatsJSON, derivedStats(t, hf))
	s.Guard, s.Holders = guardOf(t, hf), holdersOf(hf)
	return s
}

// abiOf counts the control-ABI events, the classifications by keep reason and the state transitions.
func abiOf(t *timeline.Timeline) ABI {
	a := ABI{Groups: t.SwapGroups(), RegionEnters: t.Count(trace.KindRegionEnter),
		RegionExits: t.Count(trace.KindRegionExit), Saves: t.Count(trace.KindSave),
		Protects: t.Count(trace.KindProtect), BackwardEnters: t.Count(trace.KindBackwardEnter),
		BackwardExits: t.Count(trace.KindBackwardExit), Unpacks: t.Count(trace.KindUnpack),
		Classified: t.Count(trace.KindClassify), KeepReasons: keepCounts(t, true),
		Transitions: make(map[string]uint64)}
	for c, n := range t.Moved.Changes {
		a.Transitions[nameOf(States[:], c.From)+"->"+nameOf(States[:], c.To)] += n
	}
	return a
}

// keepCounts counts the classifications by keep reason name, every known reason present; internal ones
// only when withInternal (the stats JSON's "kept" leaves them out: internal storages are swapped).
func keepCounts(t *timeline.Timeline, withInternal bool) map[string]uint64 {
	names := KeepReasons[:]
	if !withInternal {
		names = names[1:]
	}
	m := zeroCounts(names)
	for r, n := range t.Reasons {
		if withInternal || r != trace.KeepInternal {
			m[nameOf(KeepReasons[:], r)] += n
		}
	}
	return m
}

// derivedStats is the stats JSON as the events imply it, for the fields the agent's own lacks.
func derivedStats(t *timeline.Timeline, hf *handleFigures) Stats {
	d := Stats{Kept: keepCounts(t, false), PeakDeviceBytes: t.Foot.Held.PeakBytes,
		OffloadedStorages: t.Moved.Releases, OffloadedBytes: t.Moved.ReleasedBytes,
		RestoredBytes: t.Moved.RestoredBytes, ReleasedExternal: hf.releasedExternal}
	for _, f := range t.Faults {
		d.Faults = append(d.Faults, f.Raw)
	}
	return d
}

// spans joins each storage's copy start (d2h, h2d) to its release or restore, then merges a group's
// overlapping ones.
func spans(t *timeline.Timeline) []Span {
	var out []Span
	moving := make(map[int64]int64) // handle -> start of its copy in flight
	for _, tr := range t.Transitions {
		if tr.CopyStarts() {
			moving[tr.Handle] = tr.TS
			continue
		}
		if !tr.Release() && !tr.Restore() {
			continue
		}
		start, ok := moving[tr.Handle]
		if !ok {
			start = tr.TS // no copy-start seen: a zero-length span at the change
		}
		delete(moving, tr.Handle)
		out = append(out, Span{Group: t.GroupName(tr.Group), Restore: tr.Restore(), Start: start, End: tr.TS,
			Bytes: tr.Nbytes, Handles: 1})
	}
	return mergeSpans(out)
}

func mergeSpans(spans []Span) []Span {
	sort.SliceStable(spans, func(i, j int) bool {
		a, b := spans[i], spans[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Restore != b.Restore {
			return !a.Restore
		}
		return a.Start < b.Start
	})
	var out []Span
	for _, sp := range spans {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.Group == sp.Group && last.Restore == sp.Restore && sp.Start <= last.End {
				last.End = max(last.End, sp.End)
				last.Bytes += sp.Bytes
				last.Handles++
				continue
			}
		}
		out = append(out, sp)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// mergeStats takes each field of the agent's stats record (trace.Stats) when present and the derived
// figure otherwise. A stats snapshot can predate the end of the trace, so the peak is the larger of the
// two figures and the fault list the longer of the two.
func mergeStats(raw json.RawMessage, derived Stats) Stats {
	out := derived
	if len(raw) == 0 || !json.Valid(raw) {
		return out
	}
	// The record starts from the derived figures, so a key it lacks keeps them; a value of the wrong
	// type keeps them too (json.Unmarshal skips it).
	in := struct {
		trace.Stats
		Kept   json.RawMessage   `json:"kept"`   // decoded apart, so a bad one cannot stop the rest
		Faults []json.RawMessage `json:"faults"` // verbatim: the report shows the records as written
	}{Stats: trace.Stats{OffloadedStorages: derived.OffloadedStorages, OffloadedBytes: derived.OffloadedBytes,
		RestoredBytes: derived.RestoredBytes, ReleasedExternal: derived.ReleasedExternal,
		PeakDeviceBytes: derived.PeakDeviceBytes}}
	_ = json.Unmarshal(raw, &in)
	out.OffloadedStorages, out.OffloadedBytes = in.OffloadedStorages, in.OffloadedBytes
	out.RestoredBytes, out.ReleasedExternal = in.RestoredBytes, in.ReleasedExternal
	out.PeakDeviceBytes = max(in.PeakDeviceBytes, derived.PeakDeviceBytes)
	var kept trace.Kept
	if in.Kept != nil && json.Unmarshal(in.Kept, &kept) == nil {
		out.Kept = zeroCounts(KeepReasons[1:])
		for r := trace.KeepInput; r < trace.NumKeepReasons; r++ {
			out.Kept[KeepReasons[r]] = kept.Count(r)
		}
	}
	if len(in.Faults) > len(out.Faults) {
		out.Faults = in.Faults
	}
	return out
}

func zeroCounts(names []string) map[string]uint64 {
	m := make(map[string]uint64, len(names))
	for _, n := range names {
		m[n] = 0
	}
	return m
}

func nameOf(names []string, v uint64) string {
	if v < uint64(len(names)) {
		return names[v]
	}
	return "#" + itoa(v)
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TraceCost is the trace's size per event and per second of the run it covers (0 where unknown, as on a
// trace that lost events to damage): what leaving the agent on costs in disk. With the oldest segments
// dropped, both count what is kept.
func (s *Summary) TraceCost() (perEvent, perSecond float64) {
	if s.TraceBytes == 0 || len(s.Gaps) > 0 {
		return 0, 0 // nothing to say, or bytes that held events the count misses
	}
	if s.NumEvents > 0 {
		perEvent = float64(s.TraceBytes) / float64(s.NumEvents)
	}
	if s.EndNS > s.FromNS {
		perSecond = float64(s.TraceBytes) / (float64(s.EndNS-s.FromNS) / 1e9)
	}
	return perEvent, perSecond
}
