// agent.go owns the running agent: the drain of the C ring into the trace (on a timer, before every
// control call, on a fatal signal and at exit), the lazily opened trace and log files, the logger, and
// the stats JSON.
package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"swapagent/internal/buildinfo"
	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// Timing of the drainer.
const (
	DrainInterval = 2 * time.Millisecond
	FlushInterval = 50 * time.Millisecond
	drainBatch    = 4096
	maxDrainLoop  = 2 << 16 // events per drain call: more than the ring holds, so every earlier event is in
	maxPendingLog = 256
)

// Agent is the in-process agent. Its exported methods are safe for concurrent use.
type Agent struct {
	cfg    Config
	native Native
	stderr io.Writer
	// logQ keeps warnings and errors for the trace (KindLog); logHook may run with mu held or not, so it
	// queues under its own lock.
	logQ struct {
		sync.Mutex
		lines []string
	}
	misused sync.Map // kinds of misuse already logged: each is logged once (misuse)
	host    string
	pid     int
	argv    []string
	t0      time.Time
	off     int64 // TS of t0 on the trace clock

	lg *zap.Logger // stderr at the configured level, plus the log file once open

	hostMem  *tracker.HostMaps // the process's readable memory: host storages and C arguments are proven here
	rejected rejected          // refused control calls, by code

	// Lock order: the engine's lock, then mu, then the tracker's. Nothing holding mu calls the engine.
	mu        sync.Mutex // guards everything below
	engine    *offload.Engine
	tracker   *tracker.Tracker // the ownership model (Tracker), handed to the engine
	streams   *offload.Streams // the engine's; fed with every stream work is enqueued on
	ops       offload.StorageOps
	kinds     []trace.Class        // what each function id does, learnt from its name
	peakDev   uint64               // highest live device bytes seen (runtime allocations)
	dead      map[uint64][2]uint64 // released external storages (by storage ID): [base, end)
	racing    map[uint64]inflight  // storages an agent copy is moving (by storage ID)
	faults    []offload.Fault
	faultIx   map[string]int // fault key -> index in faults
	exception [6]uint64      // the last exception callback's info (task, stream, thread, device, code)
	file      *os.File
	logFile   *os.File
	w         *trace.Writer
	opened    bool // the trace was opened, or could not be
	closed    bool
	crashDone bool
	dirty     bool
	lastFlush time.Time
	buf       []Raw
	ev        trace.Event
	fnSeen    []bool
	calls     []uint64
	groups    map[string]uint32
	events    uint64
	lost      uint64
	pending   []string // log lines waiting for the trace to open
	stop      chan struct{}
	failOnce  sync.Once
}

// New builds an agent. problems are the configuration problems LoadConfig found: each is printed once
// on stderr and kept for the trace.
func New(cfg Config, native Native, stderr io.Writer, problems []string) *Agent {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	a := &Agent{cfg: cfg, native: native, stderr: stderr, host: host, pid: os.Getpid(), argv: os.Args,
		t0: time.Now(), buf: make([]Raw, drainBatch), fnSeen: make([]bool, 1024), calls: make([]uint64, 1024),
		groups: map[string]uint32{}, stop: make(chan struct{}), hostMem: tracker.NewHostMaps(tracker.ProcMaps),
		tracker: tracker.New()}
	a.off = native.Now() - native.StartMono()
	a.lg = zap.New(zapcore.NewCore(consoleEncoder(), zapcore.Lock(zapcore.AddSync(stderr)), cfg.Level),
		zap.Hooks(a.logHook))
	for _, p := range problems {
		fmt.Fprintf(stderr, "swapagent: %s\n", p)
		a.pending = append(a.pending, "warn: "+p)
	}
	return a
}

func consoleEncoder() zapcore.Encoder {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeLevel = zapcore.CapitalLevelEncoder
	ec.MessageKey = "msg"
	ec.NameKey = "logger"
	return zapcore.NewConsoleEncoder(ec)
}

// logHook queues warnings and errors for the trace (a.logQ).
func (a *Agent) logHook(e zapcore.Entry) error {
	if e.Level < zapcore.WarnLevel {
		return nil
	}
	a.logQ.Lock()
	if len(a.logQ.lines) < maxPendingLog {
		a.logQ.lines = append(a.logQ.lines, strings.ToLower(e.Level.String())+": "+e.Message)
	}
	a.logQ.Unlock()
	return nil
}

// Logger returns the agent's logger.
func (a *Agent) Logger() *zap.Logger { return a.lg }

// Config returns the configuration the agent runs with.
func (a *Agent) Config() Config { return a.cfg }

// Start runs the drainer: every DrainInterval on its own OS thread (so a fatal signal on any other
// thread can wait for it).
func (a *Agent) Start() {
	go func() {
		runtime.LockOSThread()
		a.native.MarkDrainerThread()
		t := time.NewTicker(DrainInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
			}
			if !a.safeTick() {
				return
			}
		}
	}()
}

// safeTick runs one tick; a panic makes the agent inert (Fail) and stops the drainer.
func (a *Agent) safeTick() (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			a.Fail("drainer", r)
			ok = false
		}
	}()
	a.tick()
	return true
}

// Fail handles a panic inside the agent: the C side becomes pure pass-through (the host's calls go
// straight to the runtime, control calls return EDISABLED), one line says what happened, and the trace
// keeps what was flushed. The job goes on unchanged.
func (a *Agent) Fail(where string, r any) {
	a.native.Disable()
	a.failOnce.Do(func() {
		fmt.Fprintf(a.stderr, "swapagent: internal error in %s: %v; the agent is now inert, the job continues\n",
			where, r)
	})
}

func (a *Agent) tick() {
	var es *offload.Stats
	if a.native.CrashPending() != 0 {
		es = a.engineStats()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	n := a.drainLocked()
	if sig := a.native.CrashPending(); sig != 0 && !a.crashDone {
		a.crashDone = true
		a.drainLocked()
		a.addLogLocked(fmt.Sprintf("error: fatal signal %d (%s) in pid %d; trace flushed", sig,
			syscall.Signal(sig).String(), a.pid))
		a.addStatsLocked(es)
		a.flushLocked()
		a.native.CrashAck()
		return
	}
	if n > 0 || (a.dirty && time.Since(a.lastFlush) >= FlushInterval) {
		a.flushLocked()
	}
}

// Drain moves every event already in the ring into the trace (control calls do this first).
func (a *Agent) Drain() {
	a.mu.Lock()
	a.drainLocked()
	a.mu.Unlock()
}

// Shutdown drains, writes the stats and closes the trace. Later calls do nothing.
func (a *Agent) Shutdown() {
	es := a.engineStats()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.drainLocked()
	if a.w != nil {
		a.addStatsLocked(es)
	}
	a.flushLocked()
	a.closed = true
	close(a.stop)
	if a.w != nil {
		_ = a.w.Close()
	}
	if a.file != nil {
		_ = a.file.Close()
	}
	_ = a.lg.Sync()
}

func (a *Agent) ts() int64 { return int64(time.Since(a.t0)) + a.off }

// drainLocked copies the ring into the trace; it returns the number of runtime events.
func (a *Agent) drainLocked() int {
	total := 0
	for total < maxDrainLoop {
		n := a.native.Drain(a.buf)
		if n == 0 {
			break
		}
		if total == 0 {
			a.openLocked()
		}
		start := a.native.StartMono()
		served := 0
		for i := range a.buf[:n] {
			r := &a.buf[i]
			if r.Fn == FnUnpack { // a control call the C side answered: the unpack it is, not a runtime call
				served++
				if a.w != nil {
					a.addLocked(&trace.Event{Kind: trace.KindUnpack, TS: r.TS - start, TID: r.TID,
						Handle: int64(r.Args[0]), Ret: r.Ret})
				}
				continue
			}
			if int(r.Fn) < len(a.calls) {
				a.calls[r.Fn]++
			}
			a.feedLocked(r)
			if a.w == nil {
				continue
			}
			a.funcLocked(r.Fn)
			ev := &a.ev
			*ev = trace.Event{Kind: trace.KindCall, TS: r.TS - start, TID: r.TID, Fn: r.Fn, Ret: r.Ret,
				Args: r.Args}
			a.addLocked(ev)
		}
		a.events += uint64(n - served)
		total += n
		if n < len(a.buf) {
			break
		}
	}
	if l := a.native.TakeLost(); l > 0 {
		a.lost += l
		a.openLocked()
		if a.w != nil {
			a.addLocked(&trace.Event{Kind: trace.KindLost, TS: a.ts(), Args: [6]uint64{l}})
		}
	}
	a.logsLocked()
	return total
}

func (a *Agent) funcLocked(fn uint16) {
	if int(fn) >= len(a.fnSeen) {
		grown := make([]bool, int(fn)+1)
		copy(grown, a.fnSeen)
		a.fnSeen = grown
	}
	if a.fnSeen[fn] {
		return
	}
	a.fnSeen[fn] = true
	name := a.native.FnName(fn)
	if name == "" {
		name = "fn" + strconv.Itoa(int(fn))
	}
	a.addLocked(&trace.Event{Kind: trace.KindFunc, TS: a.ts(), Fn: fn, Text: name})
}

func (a *Agent) groupLocked(name string) uint32 {
	if id, ok := a.groups[name]; ok {
		return id
	}
	id := uint32(len(a.groups) + 1)
	a.groups[name] = id
	if a.w != nil {
		a.addLocked(&trace.Event{Kind: trace.KindGroup, TS: a.ts(), Group: id, Text: name})
	}
	return id
}

func (a *Agent) addLocked(ev *trace.Event) {
	if a.w == nil {
		return
	}
	if err := a.w.Add(ev); err != nil {
		a.traceFailedLocked(err)
		return
	}
	a.dirty = true
}

func (a *Agent) flushLocked() {
	a.lastFlush = time.Now()
	if a.w == nil || !a.dirty {
		return
	}
	a.dirty = false
	if err := a.w.Flush(); err != nil {
		a.traceFailedLocked(err)
	}
}

// traceFailedLocked stops tracing after a write error (a full disk): the job goes on.
func (a *Agent) traceFailedLocked(err error) {
	fmt.Fprintf(a.stderr, "swapagent: writing the trace failed (%v); tracing stopped, the job continues\n", err)
	a.w = nil
}

func (a *Agent) addLogLocked(line string) {
	if a.w == nil {
		if len(a.pending) < maxPendingLog {
			a.pending = append(a.pending, line)
		}
		return
	}
	a.addLocked(&trace.Event{Kind: trace.KindLog, TS: a.ts(), Text: line})
}

func (a *Agent) logsLocked() {
	a.logQ.Lock()
	lines := a.logQ.lines
	a.logQ.lines = nil
	a.logQ.Unlock()
	for _, l := range lines {
		a.addLogLocked(l)
	}
}

// openLocked opens the trace and log files on first need (a process that never calls the runtime or
// the agent leaves no files). A failure is reported once and disables the trace.
func (a *Agent) openLocked() {
	if a.opened {
		return
	}
	a.opened = true
	base := BaseName(a.host, a.pid, a.cfg.Rank, a.cfg.RankSet)
	f, lf, err := openOutputs(a.cfg.Out, base)
	if err != nil {
		fmt.Fprintf(a.stderr, "swapagent: cannot write to %s=%q (%v); tracing disabled, the job continues\n",
			EnvOut, a.cfg.Out, err)
		return
	}
	h := trace.Header{Version: trace.Version, PID: a.pid, Host: a.host, Rank: -1, StartUnix: a.native.StartWall(),
		Argv: a.argv}
	if a.cfg.RankSet {
		h.Rank = a.cfg.Rank
	}
	w, err := trace.NewWriter(f, h)
	if err != nil {
		fmt.Fprintf(a.stderr, "swapagent: cannot write the trace %s (%v); tracing disabled, the job continues\n",
			f.Name(), err)
		_ = f.Close()
		if lf != nil {
			_ = lf.Close()
		}
		return
	}
	a.file, a.w, a.lastFlush = f, w, time.Now()
	if lf != nil {
		a.logFile = lf
		fileCore := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(lf),
			minLevel(a.cfg.Level, zapcore.InfoLevel))
		a.lg = a.lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, fileCore) }))
		for _, p := range a.pending {
			fmt.Fprintf(lf, "%s\n", p)
		}
	}
	a.addLocked(&trace.Event{Kind: trace.KindMeta, TS: a.ts(), Text: a.metaText()})
	for _, p := range a.pending {
		a.addLocked(&trace.Event{Kind: trace.KindLog, TS: a.ts(), Text: p})
	}
	a.pending = nil
	a.lg.Info("tracing", zap.String("file", f.Name()))
}

func minLevel(a, b zapcore.Level) zapcore.Level {
	if a < b {
		return a
	}
	return b
}

func (a *Agent) metaText() string {
	rank := "-1"
	if a.cfg.RankSet {
		rank = strconv.Itoa(a.cfg.Rank)
	}
	argv := make([]string, len(a.argv))
	for i, s := range a.argv {
		argv[i] = strconv.Quote(s)
	}
	return strings.Join([]string{
		"policy=" + a.cfg.Policy,
		"prefetch=" + strconv.Itoa(a.cfg.Prefetch),
		"min_bytes=" + strconv.FormatUint(a.cfg.MinBytes, 10),
		"rank=" + rank,
		"pid=" + strconv.Itoa(a.pid),
		"version=" + buildinfo.Version,
		"abi=" + strconv.Itoa(buildinfo.ABIVersion),
		"out=" + a.cfg.Out,
		"argv=" + strings.Join(argv, " "),
	}, "\n")
}

func (a *Agent) addStatsLocked(es *offload.Stats) {
	a.addLocked(&trace.Event{Kind: trace.KindStats, TS: a.ts(), Text: string(a.statsLocked(es))})
}

// engineStats snapshots the engine's stats; called without mu (the engine's lock comes first).
func (a *Agent) engineStats() *offload.Stats {
	a.mu.Lock()
	e := a.engine
	a.mu.Unlock()
	if e == nil {
		return nil
	}
	s := e.Stats()
	return &s
}

// RuntimeStats are the agent's own counters, the "runtime" object of the stats JSON.
type RuntimeStats struct {
	Calls       map[string]uint64 `json:"calls"`
	Events      uint64            `json:"events"`
	Lost        uint64            `json:"lost"`
	TraceEvents uint64            `json:"trace_events"`
	TraceBytes  uint64            `json:"trace_bytes"`
	Policy      string            `json:"policy"`
	Engine      bool              `json:"engine"`
}

// StatsJSON returns the stats JSON: the engine's stats (architecture.md; zero values without an engine)
// plus the "runtime" counters.
func (a *Agent) StatsJSON() []byte {
	a.Drain()
	es := a.engineStats()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statsLocked(es)
}

// statsLocked renders the stats JSON from the engine's snapshot es (nil without an engine), the agent's
// own peak device bytes and faults, and the runtime counters.
func (a *Agent) statsLocked(es *offload.Stats) []byte {
	m := map[string]any{}
	if es != nil {
		if b, err := json.Marshal(es); err == nil {
			_ = json.Unmarshal(b, &m)
		}
	}
	m["peak_device_bytes"] = a.peakDev
	faults := make([]any, 0, len(a.faults))
	for _, f := range a.faults {
		faults = append(faults, f)
	}
	m["faults"] = faults
	m["rejected"] = a.rejected.snapshot()
	defaults := map[string]any{"offloaded_storages": 0, "offloaded_bytes": 0, "restored_bytes": 0,
		"kept": offload.Kept{}, "released_external": 0, "peak_device_bytes": 0, "faults": []any{}}
	for k, v := range defaults {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	rs := RuntimeStats{Calls: map[string]uint64{}, Events: a.events, Lost: a.lost, Policy: a.cfg.Policy,
		Engine: a.engine != nil}
	for fn, n := range a.calls {
		if n > 0 {
			name := a.native.FnName(uint16(fn))
			if name == "" {
				name = "fn" + strconv.Itoa(fn)
			}
			rs.Calls[name] = n
		}
	}
	if a.w != nil {
		rs.TraceEvents, rs.TraceBytes = a.w.Events(), a.w.Bytes()
	}
	m["runtime"] = rs
	b, err := json.Marshal(m)
	if err != nil {
		return []byte("{}")
	}
	return b
}
