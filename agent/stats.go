// stats.go owns the stats JSON (architecture.md, "Stats JSON"; the record is trace.Stats): the engine's
// accounting with the agent's runtime figures, as swapagent_stats_json answers it and as the trace's
// KindStats records it.
package agent

import (
	"encoding/json"
	"strconv"

	"swapagent/trace"
)

func (a *Agent) addStatsLocked(es *trace.Stats) {
	a.sink.add(&trace.Event{Kind: trace.KindStats, TS: a.ts(), Text: string(a.statsLocked(es))})
}

// engineStats snapshots the engine's stats; called without mu (the engine's lock comes first).
func (a *Agent) engineStats() *trace.Stats {
	a.mu.Lock()
	e := a.engine
	a.mu.Unlock()
	if e == nil {
		return nil
	}
	s := e.Stats()
	return &s
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
// own peak device bytes, faults and refused calls, and the runtime counters.
func (a *Agent) statsLocked(es *trace.Stats) []byte {
	var s trace.Stats
	if es != nil {
		s = *es
	}
	if s.Groups == nil {
		s.Groups = map[string]trace.GroupStats{}
	}
	s.PeakDeviceBytes = a.peakDev
	s.Faults = append([]trace.Fault{}, a.faults...)
	s.Rejected = a.rejected.snapshot()
	rs := &trace.Runtime{Calls: map[string]uint64{}, Events: a.events, Lost: a.lost, Policy: a.cfg.Policy.String(),
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
	rs.TraceEvents, rs.TraceBytes = a.sink.counts()
	s.Runtime = rs
	asks := a.cfg.Policy.Asks()
	s.Asks = &asks
	b, err := json.Marshal(s)
	if err != nil {
		return []byte("{}")
	}
	return b
}
