// agent.go owns the running agent: its state, the logger, and the drain of the C ring into the trace (on a
// timer, before every control call, on a fatal signal and at exit). The trace sink is sink.go's, the
// stats JSON stats.go's, the fault book fault.go's and the control ABI abi.go's.
package agent

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// Timing of the drainer.
const (
	DrainInterval = 2 * time.Millisecond
	FlushInterval = 50 * time.Millisecond
	// FlushIntervalSmall is the flush interval below trace level all: a level for long jobs whose traces
	// must stay small, where the fewer events of an interval would make batches that compress badly. A
	// SIGKILL costs at most this much of the trace.
	FlushIntervalSmall = 200 * time.Millisecond
	// YoungFor is how long after it opens a trace is flushed at every drain that found events: most
	// short processes (launchers, tools, a worker that fails at once) end within it.
	YoungFor      = 250 * time.Millisecond
	drainBatch    = 4096
	maxDrainLoop  = 2 << 16 // events per drain call: more than the ring holds, so every earlier event is in
	maxPendingLog = 256
)

// Agent is the in-process agent. Its exported methods are safe for concurrent use.
type Agent struct {
	cfg    Config
	native Native
	stderr io.Writer
	parsed tensorCache // the tensor descriptions parsed so far (parseTensors)
	// logQ keeps warnings and errors for the trace (KindLog); logHook may run with mu held or not, so it
	// queues under its own lock.
	logQ struct {
		sync.Mutex
		lines []string
	}
	misused  sync.Map        // kinds of misuse already logged: each is logged once (misuse)
	keptSaid sync.Map        // arguments the guard kept and said so on stderr (keptOnce)
	noted    map[string]bool // keys SWAPAGENT_CALL_NOTE recorded (guarded by mu)
	host     string
	pid      int
	argv     []string
	start    int64 // the trace clock's zero: CLOCK_MONOTONIC at the library's load (native.StartMono)

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
	faults    []trace.Fault
	faultIx   map[string]int // fault key -> index in faults
	exception [6]uint64      // the last exception callback's info (task, stream, thread, device, code)
	sink      sink           // the trace and log files
	closed    bool
	crashDone bool
	buf       []Raw
	bufAt     int // buf[bufAt:bufN]: drained from the ring, not fed yet (they follow a queued call)
	bufN      int
	queuedAt  *stamp // the queued call running now (stampLocked)
	ev        trace.Event
	calls     []uint64
	events    uint64
	lost      uint64
	stop      chan struct{}
	failOnce  sync.Once
	// queueMu is held while queued calls are drained and run (lockDrained): they run one at a time, in
	// host order. Lock order: queueMu, then the engine's lock, then mu.
	queueMu     sync.Mutex
	queueClosed atomic.Bool // mayMove ended the queued calls under safe
}

// New builds an agent. problems are the configuration problems LoadConfig found: each is kept for the
// trace and printed on stderr by the first process of the job (firstToWarn).
func New(cfg Config, native Native, stderr io.Writer, problems []string) *Agent {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	a := &Agent{cfg: cfg, native: native, stderr: stderr, host: host, pid: os.Getpid(), argv: os.Args,
		buf: make([]Raw, drainBatch), calls: make([]uint64, 1024), stop: make(chan struct{}),
		hostMem: tracker.NewHostMaps(tracker.ProcMaps), tracker: tracker.New(), noted: map[string]bool{}}
	// One clock for every event: the ring's stamps (the C side's CLOCK_MONOTONIC) and the agent's own (ts)
	// interleave in the trace, so both count from the same reading.
	a.start = native.StartMono()
	a.lg = zap.New(zapcore.NewCore(consoleEncoder(), zapcore.Lock(zapcore.AddSync(stderr)), cfg.Level),
		zap.Hooks(a.logHook))
	var pending []string
	say := len(problems) > 0 && firstToWarn(cfg.Out)
	for _, p := range problems {
		if say {
			fmt.Fprintf(stderr, "swapagent: %s\n", p)
		}
		pending = append(pending, "warn: "+p)
	}
	a.sink = newSink(sinkEnv{cfg: cfg, host: a.host, pid: a.pid, argv: a.argv, stderr: stderr, ts: a.ts,
		fnName: native.FnName, startWall: native.StartWall, teeLog: a.teeLog}, pending)
	return a
}

// consoleEncoder writes stderr lines in the agent's own form, as its fault blocks and summary are written
// ("swapagent: warning: MESSAGE {fields}"): no time stamp among them (the log file keeps zap's JSON).
func consoleEncoder() zapcore.Encoder {
	return zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level",
		ConsoleSeparator: " ", EncodeDuration: zapcore.StringDurationEncoder,
		EncodeLevel: func(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
			word := l.String()
			if l == zapcore.WarnLevel {
				word = "warning"
			}
			enc.AppendString("swapagent: " + word + ":")
		}})
}

// teeLog adds the log file lf (nil: none) to the logger, at info level or below, and returns the logger.
func (a *Agent) teeLog(lf *os.File) *zap.Logger {
	if lf != nil {
		fileCore := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(lf),
			minLevel(a.cfg.Level, zapcore.InfoLevel))
		a.lg = a.lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, fileCore) }))
	}
	return a.lg
}

func minLevel(a, b zapcore.Level) zapcore.Level {
	if a < b {
		return a
	}
	return b
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

// takeLogs returns the lines logHook queued, and empties the queue.
func (a *Agent) takeLogs() []string {
	a.logQ.Lock()
	lines := a.logQ.lines
	a.logQ.lines = nil
	a.logQ.Unlock()
	return lines
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
	var es *trace.Stats
	if a.native.CrashPending() != 0 {
		es = a.engineStats()
	}
	a.lockDrained()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if sig := a.native.CrashPending(); sig != 0 && !a.crashDone {
		a.crashDone = true
		a.mu.Unlock()
		a.lockDrained() // what the crashing thread did last
		a.sink.addLog(fmt.Sprintf("error: fatal signal %d (%s) in pid %d; trace flushed", sig,
			syscall.Signal(sig).String(), a.pid))
		a.addStatsLocked(es)
		a.sink.flush()
		a.native.CrashAck()
		return
	}
	// Batches end on the flush interval (flushDue), not on every drain: bigger batches compress far better,
	// a fault or a fatal signal flushes at once, and a SIGKILL costs at most FlushInterval of events.
	if a.sink.flushDue() {
		a.sink.flush()
	}
}

// Drain moves every event already in the ring into the trace (control calls do this first).
func (a *Agent) Drain() {
	a.lockDrained()
	a.mu.Unlock()
}

// drainUpToQueued drains as far as the next queued call, which it leaves in the buffer for lockDrained: for
// a caller that may hold the engine's lock (a storage op), which a queued call takes.
func (a *Agent) drainUpToQueued() {
	a.mu.Lock()
	if !a.closed {
		a.drainTo(false)
	}
	a.mu.Unlock()
}

// Shutdown drains, writes the stats and closes the trace. Later calls do nothing.
func (a *Agent) Shutdown() {
	if line := a.faultSummary(); line != "" {
		fmt.Fprint(a.stderr, line)
	}
	es := a.engineStats()
	a.lockDrained()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.notePythonAbsent()
	a.sink.flush()
	if a.cfg.InjectHang == "shutdown" {
		time.Sleep(10 * time.Minute)
	}
	if a.sink.tracing() {
		a.addStatsLocked(es)
	}
	a.sink.flush()
	a.closed = true
	close(a.stop)
	a.sink.close()
	_ = a.lg.Sync()
}

func (a *Agent) ts() int64 { return a.native.Now() - a.start }

// drainLocked feeds the ring to the tracker and counts it, then copies it into the trace (what the trace
// level keeps). It stops at a queued call and returns it with its stamp (the events after it wait in buf
// for the next drain): the caller runs it outside mu (lockDrained) before anything later is drained.
func (a *Agent) drainLocked() (*Call, stamp) { return a.drainTo(true) }

// drainTo is drainLocked; take false stops before a queued call, leaving it first in buf.
func (a *Agent) drainTo(take bool) (*Call, stamp) {
	total := 0
	start := a.start
	for total < maxDrainLoop {
		if a.bufAt == a.bufN {
			a.bufAt, a.bufN = 0, a.native.Drain(a.buf)
			if a.bufN == 0 {
				break
			}
		}
		if total == 0 {
			a.sink.open()
		}
		from, n := a.bufAt, a.bufN
		served := 0
		var d *Call
		var at stamp
		i, stopped := from, false
	events:
		for ; i < n && d == nil; i++ {
			r := &a.buf[i]
			switch r.Fn {
			case trace.FnUnpack: // a control call the C side answered (Args[0] the handle, Ret the base): the unpack it is
				served++
				if a.sink.tracing() {
					a.sink.add(&trace.Event{Kind: trace.KindUnpack, TS: r.TS - start, TID: r.TID,
						Handle: int64(r.Args[0]), Ret: r.Ret})
				}
				continue
			case trace.FnQueued: // a queued control call (Args[0] the address of its copy): it runs now, before the events after it
				if !take {
					stopped = true
					break events
				}
				served++
				d, at = a.native.Queued(r.Args[0]), stamp{TS: r.TS - start, TID: r.TID}
				continue
			}
			if int(r.Fn) < len(a.calls) {
				a.calls[r.Fn]++
			}
			a.feedLocked(r)
			if !a.sink.tracing() {
				continue
			}
			ev := &a.ev // the trace level may drop it (sink.add): feedLocked and the counts above saw it
			*ev = trace.Event{Kind: trace.KindCall, TS: r.TS - start, TID: r.TID, Fn: r.Fn, Ret: r.Ret,
				Args: r.Args}
			a.sink.add(ev)
		}
		a.bufAt = i
		a.events += uint64(i - from - served)
		total += i - from
		if d != nil {
			a.sink.addLogs(a.takeLogs())
			return d, at
		}
		if stopped || n < len(a.buf) {
			break
		}
	}
	if l := a.native.TakeLost(); l > 0 {
		a.lost += l
		a.sink.open()
		if a.sink.tracing() {
			a.sink.add(&trace.Event{Kind: trace.KindLost, TS: a.ts(), Args: [6]uint64{l}})
		}
	}
	a.sink.addLogs(a.takeLogs())
	return nil, stamp{}
}
