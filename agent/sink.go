// sink.go owns the agent's trace sink: the trace and log files opened on first use, the trace level's
// filter (tracelevel.go's rule, applied in add), the names of functions and groups written before the first
// kept event that uses them, buffered events flushed on a timer and at once for a fault, the metadata
// record, and the log lines kept for the trace.
package agent

import (
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"swapagent/internal/buildinfo"
	"swapagent/trace"
)

// sink writes one process's trace. It has no lock of its own: every method runs with the agent's mu
// held. What it needs of the agent comes in sinkEnv, so it never reaches back into *Agent.
type sink struct {
	env       sinkEnv
	logFile   *os.File               // never closed: the logger writes to it until exit
	w         *trace.SegmentedWriter // nil until opened, and after a write error
	opened    bool                   // the trace was opened, or could not be
	dirty     bool                   // events added since the last flush
	lastFlush time.Time
	openedAt  time.Time         // when the trace was opened: a young trace is flushed at every drain
	level     string            // the trace level (Config.Trace; "" read as TraceAll)
	all       bool              // level is TraceAll: add keeps everything
	fnSeen    []bool            // function IDs whose name record is written
	fnKeep    []uint8           // function IDs' calls at level: 0 not asked yet, 1 kept, 2 dropped
	groups    map[string]uint32 // group name -> ID, numbered from 1
	groupName []string          // ID -> name (index 0 unused)
	groupSeen []bool            // IDs whose name record is written
	pending   []string          // log lines waiting for the trace to open
	notes     trace.Meta        // SWAPAGENT_CALL_NOTE's records waiting for the trace to open
}

// sinkEnv is what the sink takes from its agent.
type sinkEnv struct {
	cfg       Config // Out, Rank and RankSet name the files; the rest goes into the metadata record
	host      string
	pid       int
	argv      []string
	stderr    io.Writer
	ts        func() int64                  // the trace clock, for the sink's own records
	fnName    func(fn uint16) string        // a function ID's name ("" when unknown)
	startWall func() int64                  // the header's start time
	teeLog    func(lf *os.File) *zap.Logger // adds the log file (nil: none) to the agent's logger and returns it
}

// newSink returns a sink that opens nothing yet; pending are log lines for the trace once it opens.
func newSink(env sinkEnv, pending []string) sink {
	level := env.cfg.Trace
	if level == "" {
		level = TraceAll
	}
	return sink{env: env, level: level, all: level == TraceAll, fnSeen: make([]bool, 1024),
		groups: map[string]uint32{}, groupName: []string{""}, pending: pending}
}

// tracing reports whether events are written: the trace is open and no write has failed.
func (s *sink) tracing() bool { return s.w != nil }

// counts returns the events and bytes written so far (zero when not tracing).
func (s *sink) counts() (events, bytes uint64) {
	if s.w == nil {
		return 0, 0
	}
	return s.w.Events(), s.w.Bytes()
}

// addFunc writes fn's name record before its first kept call.
func (s *sink) addFunc(fn uint16) {
	if int(fn) >= len(s.fnSeen) {
		grown := make([]bool, int(fn)+1)
		copy(grown, s.fnSeen)
		s.fnSeen = grown
	}
	if s.fnSeen[fn] {
		return
	}
	s.fnSeen[fn] = true
	name := s.env.fnName(fn)
	if name == "" {
		name = "fn" + strconv.Itoa(int(fn))
	}
	s.write(&trace.Event{Kind: trace.KindFunc, TS: s.env.ts(), Fn: fn, Text: name})
}

// group returns name's ID; its name record is written before the first kept event that uses it (add).
// IDs are given even when not tracing, or when the level keeps no event of the group.
func (s *sink) group(name string) uint32 {
	if id, ok := s.groups[name]; ok {
		return id
	}
	id := uint32(len(s.groups) + 1)
	s.groups[name] = id
	s.groupName = append(s.groupName, name)
	return id
}

// addGroup writes group id's name record before its first kept event.
func (s *sink) addGroup(id uint32) {
	if int(id) >= len(s.groupName) { // not an ID of group: nothing to name
		return
	}
	for int(id) >= len(s.groupSeen) {
		s.groupSeen = append(s.groupSeen, false)
	}
	if s.groupSeen[id] {
		return
	}
	s.groupSeen[id] = true
	s.write(&trace.Event{Kind: trace.KindGroup, TS: s.env.ts(), Group: id, Text: s.groupName[id]})
}

// keeps applies the trace level's rule (traceKeeps) to ev, asking it once per function for calls.
func (s *sink) keeps(ev *trace.Event) bool {
	if s.all {
		return true
	}
	if ev.Kind != trace.KindCall {
		return traceKeeps(s.level, ev.Kind, "")
	}
	for int(ev.Fn) >= len(s.fnKeep) {
		s.fnKeep = append(s.fnKeep, make([]uint8, len(s.fnKeep)+64)...)
	}
	k := s.fnKeep[ev.Fn]
	if k == 0 {
		k = 2
		if traceKeeps(s.level, trace.KindCall, s.env.fnName(ev.Fn)) {
			k = 1
		}
		s.fnKeep[ev.Fn] = k
	}
	return k == 1
}

// add writes ev when the trace level keeps it, after the name records it needs (its function's, its
// group's). The level filters only here: what the agent tracks, checks and counts never passes through.
func (s *sink) add(ev *trace.Event) {
	if s.w == nil || !s.keeps(ev) {
		return
	}
	if ev.Kind == trace.KindCall {
		s.addFunc(ev.Fn)
	}
	if ev.Group != 0 && ev.Kind != trace.KindGroup {
		s.addGroup(ev.Group)
	}
	if !s.all {
		// Below level all, times are kept to the microsecond: a timestamp's nanoseconds are the
		// costliest bytes of a trace (noise the compressor cannot shrink) and no memory figure needs them.
		ev.TS -= ev.TS % 1000
	}
	s.write(ev)
}

// write writes ev, unfiltered.
func (s *sink) write(ev *trace.Event) {
	if s.w == nil {
		return
	}
	if err := s.w.Add(ev); err != nil {
		s.failed(err)
		return
	}
	s.dirty = true
}

func (s *sink) flush() {
	s.lastFlush = time.Now()
	if s.w == nil || !s.dirty {
		return
	}
	s.dirty = false
	if err := s.w.Flush(); err != nil {
		s.failed(err)
	}
}

// maxGap is the flush interval of the trace level.
func (s *sink) maxGap() time.Duration {
	if s.all {
		return FlushInterval
	}
	return FlushIntervalSmall
}

// flushDue reports whether buffered events have waited long enough. For its first YoungFor a trace is
// flushed at every drain, so a short process that ends by _exit or SIGKILL keeps its trace; after that
// every FlushInterval (FlushIntervalSmall below level all), in batches that compress well.
func (s *sink) flushDue() bool {
	return s.dirty && (time.Since(s.openedAt) < YoungFor || time.Since(s.lastFlush) >= s.maxGap())
}

// failed stops tracing after a write error (a full disk): the job goes on.
func (s *sink) failed(err error) {
	fmt.Fprintf(s.env.stderr, "swapagent: writing the trace failed (%v); tracing stopped, the job continues\n", err)
	s.w = nil
}

// addLog records a log line, or keeps it (up to maxPendingLog) until the trace opens.
func (s *sink) addLog(line string) {
	if s.w == nil {
		if len(s.pending) < maxPendingLog {
			s.pending = append(s.pending, line)
		}
		return
	}
	s.add(&trace.Event{Kind: trace.KindLog, TS: s.env.ts(), Text: line})
}

func (s *sink) addLogs(lines []string) {
	for _, l := range lines {
		s.addLog(l)
	}
}

// open opens the trace and log files on first need (a process that never calls the runtime or the agent
// leaves no files). A failure is reported once and disables the trace.
func (s *sink) open() {
	if s.opened {
		return
	}
	s.opened = true
	cfg := &s.env.cfg
	base := BaseName(s.env.host, s.env.pid, cfg.Rank, cfg.RankSet)
	f, lf, err := openOutputs(cfg.Out, base)
	if err != nil {
		fmt.Fprintf(s.env.stderr, "swapagent: cannot write to %s=%q (%v); tracing disabled, the job continues\n",
			EnvOut, cfg.Out, err)
		return
	}
	h := trace.Header{Version: trace.Version, PID: s.env.pid, Host: s.env.host, Rank: -1,
		StartUnix: s.env.startWall(), Argv: s.env.argv}
	if cfg.RankSet {
		h.Rank = cfg.Rank
	}
	w, err := trace.NewSegmentedWriter(f, h, cfg.TraceLimit, segmentFiles{first: f.Name()})
	if err != nil {
		fmt.Fprintf(s.env.stderr, "swapagent: cannot write the trace %s (%v); tracing disabled, the job continues\n",
			f.Name(), err)
		_ = f.Close()
		if lf != nil {
			_ = lf.Close()
		}
		return
	}
	s.w, s.lastFlush, s.openedAt = w, time.Now(), time.Now()
	s.logFile = lf
	lg := s.env.teeLog(lf)
	if lf != nil {
		for _, p := range s.pending {
			fmt.Fprintf(lf, "%s\n", p)
		}
	}
	s.add(&trace.Event{Kind: trace.KindMeta, TS: s.env.ts(), Text: s.metaText()})
	for _, p := range s.pending {
		s.add(&trace.Event{Kind: trace.KindLog, TS: s.env.ts(), Text: p})
	}
	s.pending = nil
	lg.Info("tracing", zap.String("file", f.Name()))
}

// close closes the trace file (Shutdown, once).
func (s *sink) close() {
	if s.w != nil {
		_ = s.w.Close()
		_ = s.w.Current().Close()
	}
}

func (s *sink) metaText() string {
	cfg := &s.env.cfg
	rank := "-1"
	if cfg.RankSet {
		rank = strconv.Itoa(cfg.Rank)
	}
	m := trace.Meta{
		trace.MetaPolicy:     cfg.Policy.String(),
		trace.MetaPrefetch:   strconv.Itoa(cfg.Prefetch),
		trace.MetaMinBytes:   strconv.FormatUint(cfg.MinBytes, 10),
		trace.MetaRank:       rank,
		trace.MetaPID:        strconv.Itoa(s.env.pid),
		trace.MetaVersion:    buildinfo.Version,
		trace.MetaABI:        strconv.Itoa(buildinfo.ABIVersion),
		trace.MetaOut:        cfg.Out,
		trace.MetaArgv:       trace.QuoteArgv(s.env.argv),
		trace.MetaTraceLevel: s.level,
		trace.MetaTraceLimit: strconv.FormatInt(cfg.TraceLimit, 10),
	}
	maps.Copy(m, s.notes)
	return m.String()
}

// note records key=value in the trace's metadata: now when the trace is open, else with the metadata it
// opens with (a note alone opens no trace).
func (s *sink) note(key, value string, ts int64) {
	if s.tracing() {
		s.add(&trace.Event{Kind: trace.KindMeta, TS: ts, Text: key + "=" + value})
		return
	}
	if s.notes == nil {
		s.notes = trace.Meta{}
	}
	s.notes[key] = value
}
