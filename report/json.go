// json.go owns `report --format json`: {"processes": [...]}, each object carrying the stats JSON of
// architecture.md at its top level plus what the events add (calls, memory, ABI activity).
package report

import (
	"bufio"
	"encoding/json"
	"io"

	"swapagent/trace"
)

// ProcessJSON is one process in the JSON report. The embedded Stats fields (offloaded_storages,
// offloaded_bytes, restored_bytes, kept, released_external, peak_device_bytes, faults) come from the last
// KindStats event when present and are derived from the events otherwise (stats_source says which).
type ProcessJSON struct {
	Path        string   `json:"path"`
	PID         int      `json:"pid"`
	Rank        int      `json:"rank"`
	Host        string   `json:"host"`
	Argv        []string `json:"argv"`
	StartUnixNS int64    `json:"start_unix_ns"`
	Events      int      `json:"events"`
	DurationNS  int64    `json:"duration_ns"`
	Truncated   bool     `json:"truncated"`
	// Closed: the writer's close mark was read (version 4 traces; false before). EndEvent: the index of the
	// first event neither read nor counted in lost_ranges: without the close mark, the events from it on were
	// never written.
	Closed   bool   `json:"closed"`
	EndEvent uint64 `json:"end_event"`
	// TraceBytes is the trace file's size; per event and per second of the run it covers beside it.
	TraceBytes          uint64  `json:"trace_bytes"`
	TraceBytesPerEvent  float64 `json:"trace_bytes_per_event"`
	TraceBytesPerSecond float64 `json:"trace_bytes_per_second"`
	// TraceSegments are the segment files read; TraceFirstSegment > 0 says the oldest were dropped and the
	// trace covers the run from TraceFromNS on.
	TraceSegments     int   `json:"trace_segments"`
	TraceFirstSegment int   `json:"trace_first_segment"`
	TraceFromNS       int64 `json:"trace_from_ns"`

	Stats
	StatsSource string          `json:"stats_source"` // "trace" or "derived"
	AgentStats  json.RawMessage `json:"agent_stats"`  // the last KindStats verbatim, or null

	// Memory holds the memory figures (docs/cli.md, "Reading the memory figures"), the same as the text.
	Memory         MemFigures        `json:"memory"`
	Calls          map[string]uint64 `json:"calls"`
	Device         Memory            `json:"device"`
	HostPinned     Memory            `json:"host_pinned"`
	Reserved       Memory            `json:"reserved_address_space"`
	LostRanges     []LostRange       `json:"lost_ranges"`     // damaged batches skipped while reading
	RepairedBlocks []RepairedBlock   `json:"repaired_blocks"` // damage undone from parity: nothing lost
	JoinedTraces   []JoinedTrace     `json:"joined_traces"`   // other traces after the file's own: not read
	ABI            ABI               `json:"abi"`
	LostEvents     uint64            `json:"lost_events"`
	Logs           []string          `json:"logs"`
	Meta           trace.Meta        `json:"meta"`
	// Guard is the guard's work (report/guard.go), null when no group was guarded.
	Guard *GuardReport `json:"guard"`
	// Holders is what the holders' evidence decided in the groups the agent's engine moves (report/guard.go),
	// null when the companion gave none.
	Holders *HolderReport `json:"holders"`
}

// LostRange is a damaged stretch of the trace that was skipped (trace.Gap).
type LostRange struct {
	Batch       int    `json:"batch"`
	Offset      int64  `json:"offset"`
	Bytes       int64  `json:"bytes"`
	Events      int    `json:"events"` // -1: unknown
	AfterEvent  int    `json:"after_event"`
	FromNS      int64  `json:"from_ns"`
	ToNS        int64  `json:"to_ns"` // -1: no event after it
	Description string `json:"description"`
}

// RepairedBlock is damage the reader undid from a parity block (trace.Repair): nothing was lost.
type RepairedBlock struct {
	Offset      int64  `json:"offset"`
	Bytes       int64  `json:"bytes"`
	Blocks      int    `json:"blocks"` // data blocks put right; 0: the damage held none
	Events      int    `json:"events"`
	Description string `json:"description"`
}

// JoinedTrace is another trace found after a file's own (files joined with cat), not read (trace.Joined).
type JoinedTrace struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"` // to the file's end; -1 when the input (a pipe) was not read to its end
}

// Report is the top-level JSON object.
type Report struct {
	Processes []ProcessJSON `json:"processes"`
}

// JSON converts summaries to the JSON report's shape.
func JSON(sums []*Summary) Report {
	r := Report{Processes: make([]ProcessJSON, 0, len(sums))}
	for _, s := range sums {
		perEvent, perSecond := s.TraceCost()
		p := ProcessJSON{
			Path: s.Path, PID: s.Header.PID, Rank: s.Header.Rank, Host: s.Header.Host, Argv: s.Header.Argv,
			StartUnixNS: s.Header.StartUnix, Events: s.NumEvents, DurationNS: s.EndNS, Truncated: s.Truncated,
			Closed: s.Closed, EndEvent: s.End,
			TraceBytes: s.TraceBytes, TraceBytesPerEvent: perEvent, TraceBytesPerSecond: perSecond,
			TraceSegments: s.Segments, TraceFirstSegment: s.FirstSegment, TraceFromNS: s.FromNS, Stats: s.Stats, StatsSource: "derived", AgentStats: nil, Memory: s.Mem,
			Calls: s.Calls, Device: s.Device, HostPinned: s.HostPinned, Reserved: s.Reserved, ABI: s.ABI,
			LostEvents: s.Lost, Logs: s.Logs, Meta: s.Meta, LostRanges: []LostRange{}, RepairedBlocks: []RepairedBlock{}, JoinedTraces: []JoinedTrace{}, Guard: s.Guard, Holders: s.Holders,
		}
		for _, g := range s.Gaps {
			p.LostRanges = append(p.LostRanges, LostRange{Batch: g.Batch, Offset: g.Offset, Bytes: g.Bytes,
				Events: g.Events, AfterEvent: g.After, FromNS: g.FromTS, ToNS: g.ToTS, Description: g.String()})
		}
		for _, j := range s.Joined {
			p.JoinedTraces = append(p.JoinedTraces, JoinedTrace{File: j.Name, Offset: j.At, Bytes: j.Bytes})
		}
		for _, r := range s.Repairs {
			p.RepairedBlocks = append(p.RepairedBlocks, RepairedBlock{Offset: r.Offset, Bytes: r.Bytes, Blocks: r.Blocks,
				Events: r.Events, Description: r.String()})
		}
		if s.HasStats {
			p.StatsSource = "trace"
			if json.Valid(s.StatsJSON) {
				p.AgentStats = s.StatsJSON
			} else {
				p.AgentStats, _ = json.Marshal(string(s.StatsJSON))
			}
		}
		// Empty lists as [] rather than null, so consumers can index without a check.
		if p.Argv == nil {
			p.Argv = []string{}
		}
		if p.Faults == nil {
			p.Faults = []json.RawMessage{}
		}
		if p.Logs == nil {
			p.Logs = []string{}
		}
		if p.ABI.Groups == nil {
			p.ABI.Groups = []string{}
		}
		r.Processes = append(r.Processes, p)
	}
	return r
}

// WriteJSON writes the JSON report, indented as json.Encoder would, one process at a time: it holds one
// process's text, not the report's (megabytes for a job of many ranks).
func WriteJSON(w io.Writer, sums []*Summary) error {
	bw := bufio.NewWriter(w)
	procs := JSON(sums).Processes
	if len(procs) == 0 {
		bw.WriteString("{\n  \"processes\": []\n}\n")
		return bw.Flush()
	}
	bw.WriteString("{\n  \"processes\": [\n")
	for i, p := range procs {
		b, err := json.MarshalIndent(p, "    ", "  ")
		if err != nil {
			return err
		}
		if i > 0 {
			bw.WriteString(",\n")
		}
		bw.WriteString("    ")
		bw.Write(b)
	}
	bw.WriteString("\n  ]\n}\n")
	return bw.Flush()
}
