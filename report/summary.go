// Package report turns one process's decoded trace events into a Summary and renders it (text, JSON,
// Chrome trace for Perfetto, SVG). Summarize is the one interpretation step; each renderer is a small
// function over the same Summary. Nothing here parses trace bytes: that is package trace's job.
package report

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"swapagent/trace"
)

// KeepReasons names the keep reasons of swapagent.h by value (KindClassify Args[2]).
var KeepReasons = [...]string{"internal", "input", "output", "protected", "param", "shared", "small", "duplicate"}

// States names the offload states of swapagent.h by value (KindState Args[0] and Args[1]).
var States = [...]string{"device", "d2h", "host", "h2d"}

// MemPoint is the live device (or host pinned) byte count right after the event at TS.
type MemPoint struct {
	TS    int64  // nanoseconds since the trace start
	Bytes uint64 // live bytes after the change
}

// Memory sums allocations and frees of one memory kind, matched by pointer.
type Memory struct {
	Allocs         uint64 `json:"allocs"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	Frees          uint64 `json:"frees"`
	LiveBytes      uint64 `json:"live_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	PeakAtNS       int64  `json:"peak_at_ns"`

	live     map[uint64]uint64
	noSeries bool
	Series   []MemPoint `json:"-"`
}

func (m *Memory) alloc(ts int64, ptr, size uint64) {
	if m.live == nil {
		m.live = make(map[uint64]uint64)
	}
	// A pointer handed out again without a free we saw (a lost event): the old block is gone.
	if old, ok := m.live[ptr]; ok {
		m.LiveBytes -= old
	}
	m.live[ptr] = size
	m.Allocs++
	m.AllocatedBytes += size
	m.LiveBytes += size
	if m.LiveBytes > m.PeakBytes {
		m.PeakBytes, m.PeakAtNS = m.LiveBytes, ts
	}
	if !m.noSeries {
		m.Series = append(m.Series, MemPoint{ts, m.LiveBytes})
	}
}

// free forgets the block at ptr and returns its size; false when it was freed before the trace began,
// or never ours.
func (m *Memory) free(ts int64, ptr uint64) (uint64, bool) {
	size, ok := m.live[ptr]
	if !ok {
		return 0, false
	}
	delete(m.live, ptr)
	m.Frees++
	m.LiveBytes -= size
	if !m.noSeries {
		m.Series = append(m.Series, MemPoint{ts, m.LiveBytes})
	}
	return size, true
}

// Fault is one KindFault record: the agent's JSON verbatim plus its decoded fields.
type Fault struct {
	TS     int64
	Raw    json.RawMessage
	Fields map[string]any // nil when the text is not a JSON object
}

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

// Summary is everything the renderers show about one trace.
type Summary struct {
	Path      string
	Header    trace.Header
	Events    []trace.Event // the decoded events, for timeline renderers
	Truncated bool          // the trace ends mid-batch (process killed); Events is what was read
	EndNS     int64         // timestamp of the last event

	Calls      map[string]uint64
	Device     Memory // runtime allocations or VMM mappings: Foot.Held
	HostPinned Memory
	Reserved   Memory // VMM address space reserved (aclrtReserveMemAddress): not memory
	VMM        bool   // the job mapped its device memory (aclrtMapMem)
	Foot       Footprint
	Mem        MemFigures  // the memory figures every format shows
	Steps      []int64     // start of each step: a region_enter of the first swap group (a new forward pass)
	Gaps       []trace.Gap // damaged stretches of the trace that were skipped (trace.Salvage)
	Faults     []Fault
	ABI        ABI
	Spans      []Span

	// Stats merges the last KindStats (StatsRaw, verbatim) with figures derived from the events for
	// any field it lacks; StatsFromTrace says whether a KindStats event was present.
	Stats          Stats
	StatsRaw       json.RawMessage
	StatsFromTrace bool

	Logs []string
	Meta map[string]string
	Lost uint64

	funcs  map[uint16]string
	groups map[uint32]string
}

// FuncName is the name of a function id (from KindFunc), or "fn#N" when the trace never named it.
func (s *Summary) FuncName(fn uint16) string {
	if n, ok := s.funcs[fn]; ok {
		return n
	}
	return "fn#" + itoa(uint64(fn))
}

// GroupName is the name of a group id (from KindGroup), or "group#N".
func (s *Summary) GroupName(g uint32) string {
	if n, ok := s.groups[g]; ok {
		return n
	}
	return "group#" + itoa(uint64(g))
}

// Summarize interprets one trace's events. It never fails: events it cannot use are counted and skipped.
func Summarize(path string, h trace.Header, events []trace.Event, truncated bool) *Summary {
	s := &Summary{
		Path: path, Header: h, Events: events, Truncated: truncated,
		Calls: make(map[string]uint64), Meta: make(map[string]string),
		funcs: make(map[uint16]string), groups: make(map[uint32]string),
	}
	s.ABI.KeepReasons = zeroCounts(KeepReasons[:])
	s.ABI.Transitions = make(map[string]uint64)

	reason := make(map[int64]uint64)      // handle -> keep reason from KindClassify
	handleGroup := make(map[int64]uint32) // handle -> group from KindSave/KindClassify
	handleBase := make(map[int64]uint64)  // handle -> storage base from KindSave/KindClassify
	var released []int64                  // handles that reached host (their device memory released)
	moving := make(map[int64]int64)       // handle -> start of its copy in flight
	var derived Stats
	derived.Kept = zeroCounts(KeepReasons[1:])
	firstGroup, haveFirst := uint32(0), false

	for i := range events {
		ev := &events[i]
		if ev.TS > s.EndNS {
			s.EndNS = ev.TS
		}
		switch ev.Kind {
		case trace.KindFunc:
			s.funcs[ev.Fn] = ev.Text
		case trace.KindGroup:
			if _, seen := s.groups[ev.Group]; !seen {
				s.ABI.Groups = append(s.ABI.Groups, ev.Text)
			}
			s.groups[ev.Group] = ev.Text
		case trace.KindCall:
			s.call(ev)
		case trace.KindRegionEnter:
			s.ABI.RegionEnters++
			if !haveFirst {
				firstGroup, haveFirst = ev.Group, true
			}
			if ev.Group == firstGroup {
				s.Steps = append(s.Steps, ev.TS)
			}
		case trace.KindRegionExit:
			s.ABI.RegionExits++
		case trace.KindSave:
			s.ABI.Saves++
			handleGroup[ev.Handle] = ev.Group
			handleBase[ev.Handle] = ev.Args[0]
		case trace.KindProtect:
			s.ABI.Protects++
		case trace.KindBackwardEnter:
			s.ABI.BackwardEnters++
		case trace.KindBackwardExit:
			s.ABI.BackwardExits++
		case trace.KindUnpack:
			s.ABI.Unpacks++
		case trace.KindClassify:
			s.ABI.Classified++
			r := ev.Args[2]
			reason[ev.Handle] = r
			handleGroup[ev.Handle] = ev.Group
			if ev.Args[0] != 0 {
				handleBase[ev.Handle] = ev.Args[0]
			}
			name := nameOf(KeepReasons[:], r)
			s.ABI.KeepReasons[name]++
			if r != 0 {
				derived.Kept[name]++
			}
		case trace.KindState:
			from, to := ev.Args[0], ev.Args[1]
			s.ABI.Transitions[nameOf(States[:], from)+"->"+nameOf(States[:], to)]++
			s.Foot.State(ev.TS, from, to, handleBase[ev.Handle], ev.Args[3])
			switch {
			case to == 1 || to == 3: // a copy starts
				moving[ev.Handle] = ev.TS
			case to == 2 && from != 2: // on host: device memory released
				derived.OffloadedStorages++
				derived.OffloadedBytes += ev.Args[3]
				released = append(released, ev.Handle)
				s.addSpan(handleGroup[ev.Handle], false, ev, moving)
			case to == 0 && from != 0: // back on device
				derived.RestoredBytes += ev.Args[3]
				s.addSpan(handleGroup[ev.Handle], true, ev, moving)
			}
		case trace.KindFault:
			f := Fault{TS: ev.TS, Raw: json.RawMessage(ev.Text)}
			if !json.Valid(f.Raw) {
				raw, _ := json.Marshal(ev.Text) // keep a non-JSON record as a JSON string
				f.Raw = raw
			} else {
				d := json.NewDecoder(bytes.NewReader(f.Raw))
				d.UseNumber()           // addresses do not fit a float64
				_ = d.Decode(&f.Fields) // stays nil unless it is an object
			}
			s.Faults = append(s.Faults, f)
		case trace.KindStats:
			s.StatsRaw = json.RawMessage(ev.Text)
			s.StatsFromTrace = true
		case trace.KindLog:
			s.Logs = append(s.Logs, ev.Text)
		case trace.KindMeta:
			for _, line := range strings.Split(ev.Text, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					s.Meta[k] = v
				}
			}
		case trace.KindLost:
			s.Lost += ev.Args[0]
		}
	}
	for _, h := range released {
		if reason[h] != 0 {
			derived.ReleasedExternal++
		}
	}
	s.Device = s.Foot.Held
	s.Mem = s.Foot.Figures(&s.Reserved, s.VMM)
	derived.PeakDeviceBytes = s.Device.PeakBytes
	for _, f := range s.Faults {
		derived.Faults = append(derived.Faults, f.Raw)
	}
	s.Stats = mergeStats(s.StatsRaw, derived)
	s.mergeSpans()
	return s
}

// call accounts one intercepted runtime call (argument layout: team brief, "KindCall").
func (s *Summary) call(ev *trace.Event) {
	name := s.FuncName(ev.Fn)
	s.Calls[name]++
	switch trace.ClassOf(name) {
	case trace.ClassDeviceAlloc:
		if ev.Ret == 0 && ev.Args[0] != 0 {
			s.Foot.Alloc(ev.TS, ev.Args[0], ev.Args[1])
			s.VMM = s.VMM || name == "aclrtMapMem"
		}
	case trace.ClassDeviceFree:
		if ev.Ret == 0 {
			s.Foot.Free(ev.TS, ev.Args[0])
		}
	case trace.ClassReserve:
		if ev.Ret == 0 && ev.Args[0] != 0 {
			s.Reserved.alloc(ev.TS, ev.Args[0], ev.Args[1])
		}
	case trace.ClassReserveRelease:
		if ev.Ret == 0 {
			s.Reserved.free(ev.TS, ev.Args[0])
		}
	case trace.ClassTensor:
		if ev.Args[1] != 0 {
			s.Foot.Touch(ev.TS, ev.Args[1])
		}
	case trace.ClassHostAlloc:
		if ev.Ret == 0 && ev.Args[0] != 0 {
			s.HostPinned.alloc(ev.TS, ev.Args[0], ev.Args[1])
		}
	case trace.ClassHostFree:
		if ev.Ret == 0 {
			s.HostPinned.free(ev.TS, ev.Args[0])
		}
	}
}

// addSpan records one storage's completed transfer; mergeSpans later joins a group's overlapping ones.
func (s *Summary) addSpan(g uint32, restore bool, ev *trace.Event, moving map[int64]int64) {
	start, ok := moving[ev.Handle]
	if !ok {
		start = ev.TS // no copy-start seen: a zero-length span at the change
	}
	delete(moving, ev.Handle)
	s.Spans = append(s.Spans, Span{Group: s.GroupName(g), Restore: restore, Start: start, End: ev.TS,
		Bytes: ev.Args[3], Handles: 1})
}

func (s *Summary) mergeSpans() {
	sort.SliceStable(s.Spans, func(i, j int) bool {
		a, b := s.Spans[i], s.Spans[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Restore != b.Restore {
			return !a.Restore
		}
		return a.Start < b.Start
	})
	var out []Span
	for _, sp := range s.Spans {
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
	s.Spans = out
}

// mergeStats takes each field of the agent's stats JSON when present and the derived figure otherwise.
// A stats snapshot can predate the end of the trace, so the peak is the larger of the two figures and
// the fault list the longer of the two.
func mergeStats(raw json.RawMessage, derived Stats) Stats {
	out := derived
	var fields map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &fields) != nil {
		return out
	}
	take := func(key string, dst any) {
		if v, ok := fields[key]; ok {
			_ = json.Unmarshal(v, dst) // a malformed field keeps the derived value
		}
	}
	take("offloaded_storages", &out.OffloadedStorages)
	take("offloaded_bytes", &out.OffloadedBytes)
	take("restored_bytes", &out.RestoredBytes)
	take("released_external", &out.ReleasedExternal)
	take("peak_device_bytes", &out.PeakDeviceBytes)
	out.PeakDeviceBytes = max(out.PeakDeviceBytes, derived.PeakDeviceBytes)
	if v, ok := fields["kept"]; ok {
		kept := zeroCounts(KeepReasons[1:])
		var got map[string]uint64
		if json.Unmarshal(v, &got) == nil {
			for k, n := range got {
				kept[k] = n
			}
			out.Kept = kept
		}
	}
	var faults []json.RawMessage
	take("faults", &faults)
	if len(faults) > len(out.Faults) {
		out.Faults = faults
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
