// sink.go owns the agent's trace sink: the trace and log files opened on first use, the names of functions
// and groups written before the events that use them, buffered events flushed on a timer and at once for
// a fault, the metadata record, and the log lines kept for the trace. Every method runs with a.mu held.
package agent

import (
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"swapagent/internal/buildinfo"
	"swapagent/trace"
)

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
	return trace.Meta{
		trace.MetaPolicy:   a.cfg.Policy,
		trace.MetaPrefetch: strconv.Itoa(a.cfg.Prefetch),
		trace.MetaMinBytes: strconv.FormatUint(a.cfg.MinBytes, 10),
		trace.MetaRank:     rank,
		trace.MetaPID:      strconv.Itoa(a.pid),
		trace.MetaVersion:  buildinfo.Version,
		trace.MetaABI:      strconv.Itoa(buildinfo.ABIVersion),
		trace.MetaOut:      a.cfg.Out,
		trace.MetaArgv:     trace.QuoteArgv(a.argv),
	}.String()
}
