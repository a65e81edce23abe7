// stats.go owns the stats JSON (architecture.md, "Stats JSON"): the engine's accounting with the agent's
// runtime figures, as swapagent_stats_json answers it and as the trace's KindStats records it.
package agent

import (
	"encoding/json"
	"strconv"

	"swapagent/offload"
	"swapagent/trace"
)

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
