// perfetto.go owns `report --format perfetto`: a Chrome trace event JSON ({"traceEvents":[...]}) that
// Perfetto and chrome://tracing open. Per process: a device-memory counter, one track per swapped group
// with its offload and restore spans, faults as instant events, and the runtime calls: one track per
// host thread, one per stream for kernel launches and asynchronous copies.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"swapagent/trace"
)

// MaxPerfettoEvents caps the output: very large JSON files crash the Perfetto UI. Memory, swap spans and
// faults come first; runtime calls fill what is left, and a note event says how many were dropped.
const MaxPerfettoEvents = 200_000

// maxCounterPoints bounds the device-memory counter per process (downsampled, peak kept).
const maxCounterPoints = 20_000

// Synthetic thread ids for tracks that are not host threads.
const (
	tidStreamBase = 1 << 30
	tidGroupBase  = 1<<30 + 1<<20
)

type pevent struct {
	Name string  `json:"name"`
	Cat  string  `json:"cat,omitempty"`
	Ph   string  `json:"ph"`
	TS   float64 `json:"ts"`
	Dur  float64 `json:"dur,omitempty"`
	PID  int     `json:"pid"`
	TID  int64   `json:"tid"`
	S    string  `json:"s,omitempty"`
	Args any     `json:"args,omitempty"`
}

// streamTiming explains, on every stream span, what its duration means.
var streamTiming = map[string]string{"timing": "enqueue to next operation or sync on this stream"}

type callArgs struct {
	Ret int64 `json:"ret"`
}

// WritePerfetto writes every process into one timeline, aligned on the wall clock of their headers.
func WritePerfetto(w io.Writer, sums []*Summary) error {
	return writePerfetto(w, sums, MaxPerfettoEvents)
}

func writePerfetto(w io.Writer, sums []*Summary, limit int) error {
	var base int64
	for i, s := range sums {
		if i == 0 || s.Header.StartUnix < base {
			base = s.Header.StartUnix
		}
	}
	var main, calls []pevent
	pids := processIDs(sums)
	left := 0 // calls the summaries did not keep
	for i, s := range sums {
		m, c := perfettoProcess(s, pids[i], s.Header.StartUnix-base)
		main = append(main, m...)
		calls = append(calls, c...)
		left += s.CallsLeft
	}
	out := main
	if room := limit - len(out) - 1; len(calls) > room || left > 0 {
		if room < 0 {
			room = 0
			out = out[:limit-1]
		}
		room = min(room, len(calls))
		dropped := len(calls) - room + left
		out = append(out, calls[:room]...)
		out = append(out, pevent{Name: fmt.Sprintf("note: output capped at %d events, %d runtime calls omitted",
			limit, dropped), Ph: "i", S: "g", Cat: "note"})
	} else {
		out = append(out, calls...)
	}

	bw := bufio.NewWriter(w)
	bw.WriteString(`{"displayTimeUnit":"ns","traceEvents":[`)
	for i := range out {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n")
		b, err := json.Marshal(&out[i])
		if err != nil {
			return err
		}
		bw.Write(b)
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

// syntheticPID is where the process ids of processes that share a pid start: above Linux's largest pid.
const syntheticPID = 1 << 22

// processIDs gives each summary its Perfetto process id: its own pid, unless an earlier summary took it
// (two ranks on two hosts may have the same pid, and a pid is reused over time), then a synthetic one.
// The process name always says the real pid and host.
func processIDs(sums []*Summary) []int {
	out := make([]int, len(sums))
	taken := map[int]bool{}
	next := syntheticPID
	for i, s := range sums {
		pid := s.Header.PID
		if taken[pid] {
			for taken[next] {
				next++
			}
			pid = next
		}
		taken[pid] = true
		out[i] = pid
	}
	return out
}

// perfettoProcess returns the process's essential events (metadata, memory, swap, faults) and its
// runtime calls separately, so the cap drops calls first. pid is its Perfetto process id (processIDs).
func perfettoProcess(s *Summary, pid int, offset int64) (main, calls []pevent) {
	us := func(ns int64) float64 { return float64(offset+ns) / 1000 }
	meta := func(name string, tid int64, value string) {
		main = append(main, pevent{Name: name, Ph: "M", PID: pid, TID: tid, Args: map[string]string{"name": value}})
	}
	pname := fmt.Sprintf("pid %d", s.Header.PID)
	if s.Header.Rank >= 0 {
		pname += fmt.Sprintf(" rank %d", s.Header.Rank)
	}
	if s.Header.Host != "" {
		pname += " on " + s.Header.Host
	}
	if len(s.Header.Argv) > 0 {
		pname += ": " + argvString(s.Header.Argv)
	}
	meta("process_name", 0, pname)
	main = append(main, pevent{Name: "process_labels", Ph: "M", PID: pid,
		Args: map[string]string{"labels": "device memory: " + s.Mem.Text()}})
	// The figures themselves, exactly as text and JSON give them.
	main = append(main, pevent{Name: "memory figures", Cat: "memory", Ph: "i", S: "p", TS: us(0), PID: pid, Args: s.Mem})

	counter := func(name string, pts []MemPoint, peakTS int64) {
		for _, p := range downsample(pts, maxCounterPoints, peakTS) {
			main = append(main, pevent{Name: name, Ph: "C", TS: us(p.TS), PID: pid,
				Args: map[string]uint64{"bytes": p.Bytes}})
		}
	}
	counter("device memory in use", s.Foot.InUse, s.Device.PeakAtNS)
	counter("device memory held ("+s.Mem.Source+")", s.Device.Series, s.Device.PeakAtNS)
	if s.Mem.SavedBytes > 0 {
		counter("device memory without swap (implied)", s.Foot.NoSwap, s.Mem.PeakNoSwapAtNS)
	}
	if s.Reserved.Allocs > 0 {
		counter("reserved address space (VMM)", s.Reserved.Series, s.Reserved.PeakAtNS)
	}

	groupTID := map[string]int64{}
	for _, sp := range s.Spans {
		tid, ok := groupTID[sp.Group]
		if !ok {
			tid = tidGroupBase + int64(len(groupTID))
			groupTID[sp.Group] = tid
			meta("thread_name", tid, "swap "+sp.Group)
		}
		name, cat := "offload "+sp.Group, "offload"
		if sp.Restore {
			name, cat = "restore "+sp.Group, "restore"
		}
		main = append(main, pevent{Name: name, Cat: cat, Ph: "X", TS: us(sp.Start), Dur: max(float64(sp.End-sp.Start)/1000, 0.001),
			PID: pid, TID: tid, Args: map[string]any{"bytes": sp.Bytes, "storages": sp.Handles}})
	}

	for _, f := range s.Faults {
		name := "fault"
		if k, ok := f.Fields["kernel"].(string); ok {
			name += " in " + k
		}
		var args any = hexAddrs(f.Fields)
		if f.Fields == nil {
			args = map[string]string{"record": string(f.Raw)}
		}
		main = append(main, pevent{Name: name, Cat: "fault", Ph: "i", S: "p", TS: us(f.TS), PID: pid, Args: args})
	}

	// Runtime calls. The trace has one timestamp per call (its entry), so host calls are instants; a
	// launch or async copy spans its stream track until the next operation or sync on that stream.
	threads := map[uint32]bool{}
	streamTID := map[uint64]int64{}
	lastOp := map[uint64]int{} // stream -> index in calls of its open op
	closeOp := func(stream uint64, ts int64) {
		if i, ok := lastOp[stream]; ok {
			calls[i].Dur = max((float64(offset+ts)/1000)-calls[i].TS, 0.001)
			delete(lastOp, stream)
		}
	}
	for i := range s.Events {
		ev := &s.Events[i]
		if ev.Kind != trace.KindCall {
			continue
		}
		name := s.FuncName(ev.Fn)
		if !threads[ev.TID] {
			threads[ev.TID] = true
			meta("thread_name", int64(ev.TID), fmt.Sprintf("host thread %d", ev.TID))
		}
		calls = append(calls, pevent{Name: name, Cat: "call", Ph: "i", S: "t", TS: us(ev.TS), PID: pid, TID: int64(ev.TID),
			Args: callArgs{ev.Ret}})
		stream, kind, ok := streamOf(name, ev)
		switch {
		case ok && kind == "sync":
			closeOp(stream, ev.TS)
		case ok:
			tid, seen := streamTID[stream]
			if !seen {
				tid = tidStreamBase + int64(len(streamTID))
				streamTID[stream] = tid
				meta("thread_name", tid, fmt.Sprintf("stream %#x", stream))
			}
			closeOp(stream, ev.TS)
			calls = append(calls, pevent{Name: name, Cat: kind, Ph: "X", TS: us(ev.TS), Dur: 0.001, PID: pid, TID: tid,
				Args: streamTiming})
			lastOp[stream] = len(calls) - 1
		}
	}
	return main, calls
}

// hexAddrs returns the fault record with its addresses as hex strings, as every output shows them.
func hexAddrs(fields map[string]any) map[string]any {
	if fields == nil {
		return nil
	}
	out := make(map[string]any, len(fields))
	for k, v := range fields {
		if n, ok := v.(json.Number); ok && addrKeys[k] {
			if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
				v = fmt.Sprintf("%#x", u)
			}
		}
		out[k] = v
	}
	return out
}

// streamOf classifies a call by the team brief's argument layout: which stream it enqueues on (a kernel
// launch or an async copy/memset) or synchronises.
func streamOf(name string, ev *trace.Event) (stream uint64, kind string, ok bool) {
	switch {
	case name == "aclrtMemcpyAsync":
		return ev.Args[5], "copy", true
	case name == "aclrtMemsetAsync":
		return ev.Args[4], "copy", true
	case name == "aclrtSynchronizeStream" || name == "aclrtSynchronizeStreamWithTimeout":
		return ev.Args[0], "sync", true
	case trace.IsLaunch(name):
		return ev.Args[3], "launch", true
	}
	return 0, "", false
}

// downsample keeps at most n points, evenly spaced, always including the first, the last and the peak.
func downsample(pts []MemPoint, n int, peakTS int64) []MemPoint {
	if len(pts) <= n {
		return pts
	}
	step := float64(len(pts)) / float64(n-2)
	out := make([]MemPoint, 0, n+1)
	for f := 0.0; int(f) < len(pts)-1; f += step {
		out = append(out, pts[int(f)])
	}
	out = append(out, pts[len(pts)-1])
	// Put the peak back where it belongs in time.
	var peak MemPoint
	for _, p := range pts {
		if p.TS == peakTS && p.Bytes >= peak.Bytes {
			peak = p
		}
	}
	i := sort.Search(len(out), func(i int) bool { return out[i].TS >= peak.TS })
	out = append(out[:i], append([]MemPoint{peak}, out[i:]...)...)
	return out
}
