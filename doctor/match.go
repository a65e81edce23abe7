// match.go owns which trace belongs to which log. A trace is used for a log's fault only when it can be
// the same process: the same pid (the log's RUNTIME(<pid>,...) lines), a time window that holds the
// fault, the same rank when both say one, and no other fitting trace from another host. Every trace that
// was looked at and not used is kept with the reason, so the output can say why.
package doctor

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Slack around a trace's window: the agent starts with the process, before its first log line, so a
// fault logged before the trace began is another process; a process stops writing its trace at its last
// flush, so its last log lines (the fault, the traceback) may come a while after.
const (
	slackBefore = 2 * time.Second
	slackAfter  = 5 * time.Minute
)

// TraceCheck is one trace doctor looked at for a log's fault.
type TraceCheck struct {
	Trace string    `json:"trace"`
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Rank  int       `json:"rank"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Used  bool      `json:"used"`
	Why   string    `json:"why,omitempty"` // why it does not fit; empty when it does
}

// window is when the trace's process ran, as far as its trace says (zero times: unknown).
func (ix *traceIndex) window() (time.Time, time.Time) {
	if ix.Header.StartUnix <= 0 {
		return time.Time{}, time.Time{}
	}
	start := time.Unix(0, ix.Header.StartUnix)
	return start, start.Add(time.Duration(ix.EndNS))
}

// fit says why trace ix cannot be the process that wrote a log with meta m and rank, for a fault logged
// at t (zero: unknown); "" when it can.
func (ix *traceIndex) fit(m *logMeta, rank int, t time.Time) string {
	h := ix.Header
	if rank >= 0 && h.Rank >= 0 && h.Rank != rank {
		return fmt.Sprintf("rank %d, not the log's rank %d", h.Rank, rank)
	}
	switch {
	case m == nil || len(m.pids) == 0:
		if rank < 0 || h.Rank < 0 {
			return "the log names no pid (no RUNTIME(<pid>,...) or ME(<pid>:...) lines) and no rank to compare"
		}
	case !containsInt(m.pids, h.PID):
		return fmt.Sprintf("pid %d, not the log's %s", h.PID, pidList(m.pids))
	}
	start, end := ix.window()
	if t.IsZero() || start.IsZero() {
		return ""
	}
	switch {
	case t.Before(start.Add(-slackBefore)):
		return fmt.Sprintf("it started at %s, after the fault (%s)", clock(start), clock(t)) + zoneHint(t, start)
	case t.After(end.Add(slackAfter)):
		return fmt.Sprintf("it ran %s..%s, before the fault (%s)", clock(start), clock(end), clock(t)) + zoneHint(t, end)
	}
	return ""
}

// zoneHint adds a note when the difference is a whole number of hours: the log's local time is read in
// this machine's zone, which may not be the job's.
func zoneHint(a, b time.Time) string {
	d := a.Sub(b)
	if d < 0 {
		d = -d
	}
	h := d.Round(time.Hour)
	if h >= time.Hour && h <= 14*time.Hour && (d-h).Abs() < 10*time.Minute {
		return fmt.Sprintf("; %v apart: if the job ran in another time zone, set TZ to it", h)
	}
	return ""
}

// pickTrace chooses the trace of a log fault and returns what was looked at. m may be nil (the log
// could not be scanned); t is the fault's time (zero: unknown).
func pickTrace(all []*traceIndex, m *logMeta, rank int, t time.Time) (*traceIndex, []TraceCheck) {
	var fits []*traceIndex
	checks := make([]TraceCheck, 0, len(all))
	for _, ix := range all {
		start, end := ix.window()
		c := TraceCheck{Trace: ix.path, PID: ix.Header.PID, Host: ix.Header.Host, Rank: ix.Header.Rank, Start: start, End: end,
			Why: ix.fit(m, rank, t)}
		if c.Why == "" {
			fits = append(fits, ix)
		}
		checks = append(checks, c)
	}
	var pick *traceIndex
	hosts := map[string]bool{}
	for _, ix := range fits {
		hosts[ix.Header.Host] = true
	}
	switch {
	case len(hosts) > 1:
		// Logs do not name their node: the same pid on two hosts cannot be told apart.
		for i := range checks {
			if checks[i].Why == "" {
				checks[i].Why = fmt.Sprintf("%d traces from %d hosts fit the pid and time, and the log does not say its host",
					len(fits), len(hosts))
			}
		}
		return nil, checks
	case len(fits) > 0:
		// One host: the latest process that started before the fault (a pid reused later started after it).
		sort.SliceStable(fits, func(i, j int) bool { return fits[i].Header.StartUnix > fits[j].Header.StartUnix })
		pick = fits[0]
		for _, ix := range fits {
			if s, _ := ix.window(); t.IsZero() || s.IsZero() || !s.After(t) {
				pick = ix
				break
			}
		}
	}
	for i := range checks {
		switch {
		case pick != nil && checks[i].Trace == pick.path:
			checks[i].Used = true
		case checks[i].Why == "":
			checks[i].Why = "another trace of the same pid fits the fault's time better"
		}
	}
	return pick, checks
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func pidList(pids []int) string {
	if len(pids) == 1 {
		return fmt.Sprint(pids[0])
	}
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = fmt.Sprint(p)
	}
	return "pids " + strings.Join(s, ", ")
}

// clock shows a time as the logs do, to the millisecond, in local time.
func clock(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05.000") }
