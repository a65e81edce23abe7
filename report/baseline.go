// baseline.go owns the measured comparison (`report --baseline`): each process of a swap run matched with
// the process of a baseline run (typically the same command under --policy off) that ran the same command
// with the same rank, and the peaks of both as measured. What a saving really is can only be measured so:
// one trace alone cannot know what its pool would have held without swap (docs/cli.md, "Reading the
// memory figures").
package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"swapagent/internal/cli"
	"swapagent/trace"
)

// Comparison is one process of the swap run beside its baseline process.
type Comparison struct {
	Argv           []string `json:"argv"`
	Rank           int      `json:"rank"`
	Baseline       string   `json:"baseline_trace"`
	Swap           string   `json:"trace"`
	BaselinePolicy string   `json:"baseline_policy"`
	Policy         string   `json:"policy"`
	BaselinePeak   uint64   `json:"baseline_peak_bytes"` // the baseline's peak device memory (in use)
	Peak           uint64   `json:"peak_bytes"`          // the swap run's
	SavedBytes     int64    `json:"saved_bytes"`         // measured: BaselinePeak - Peak
	SavedPercent   float64  `json:"saved_percent"`       // of BaselinePeak
	// ImpliedSavedBytes is what the swap trace alone implies (its memory figures), for comparison.
	ImpliedSavedBytes uint64 `json:"implied_saved_bytes"`
	// Refused says why no saving is measured ("" when one is): a run that faulted before a whole step
	// peaked as a run cut short, not as the job would have; SavedBytes and SavedPercent are then 0.
	Refused string `json:"refused,omitempty"`
}

// Refused reports whether some comparison claims no saving (Comparison.Refused).
func (r BaselineReport) Refused() bool {
	for _, c := range r.Comparisons {
		if c.Refused != "" {
			return true
		}
	}
	return false
}

// BaselineReport is `report --baseline --format json`.
type BaselineReport struct {
	Comparisons []Comparison `json:"comparisons"`
	Unmatched   []string     `json:"unmatched"` // processes of either run without a partner, one line each
}

func processKey(s *Summary) string {
	return fmt.Sprintf("%d %s", s.Header.Rank, trace.QuoteArgv(s.Header.Argv))
}

// Compare matches each process of swap with the baseline process of the same command and rank (several
// with one key: in the order they started).
func Compare(baseline, swap []*Summary) BaselineReport {
	byKey := func(sums []*Summary) map[string][]*Summary {
		m := map[string][]*Summary{}
		for _, s := range sums {
			m[processKey(s)] = append(m[processKey(s)], s)
		}
		for _, l := range m {
			sort.SliceStable(l, func(i, j int) bool { return l[i].Header.StartUnix < l[j].Header.StartUnix })
		}
		return m
	}
	b, w := byKey(baseline), byKey(swap)
	r := BaselineReport{Comparisons: []Comparison{}, Unmatched: []string{}}
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := w[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		bs, ws := b[k], w[k]
		n := min(len(bs), len(ws))
		for i := 0; i < n; i++ {
			base, s := bs[i], ws[i]
			c := Comparison{Argv: s.Header.Argv, Rank: s.Header.Rank, Baseline: displayPath(base.Path),
				Swap: displayPath(s.Path), BaselinePolicy: base.Meta[trace.MetaPolicy], Policy: s.Meta[trace.MetaPolicy],
				BaselinePeak: base.Mem.PeakInUse, Peak: s.Mem.PeakInUse, ImpliedSavedBytes: s.Mem.SavedBytes}
			switch {
			case s.Mem.Partial != "":
				c.Refused = "this run faulted before a whole step: its peak is that of a run cut short"
			case base.Mem.Partial != "":
				c.Refused = "the baseline faulted before a whole step: its peak is that of a run cut short"
			default:
				c.SavedBytes = int64(c.BaselinePeak) - int64(c.Peak)
				if c.BaselinePeak > 0 {
					c.SavedPercent = float64(c.SavedBytes) / float64(c.BaselinePeak) * 100
				}
			}
			if c.Argv == nil {
				c.Argv = []string{}
			}
			r.Comparisons = append(r.Comparisons, c)
		}
		for _, s := range bs[n:] {
			r.Unmatched = append(r.Unmatched, "baseline only: "+describeProcess(s))
		}
		for _, s := range ws[n:] {
			r.Unmatched = append(r.Unmatched, "swap run only: "+describeProcess(s))
		}
	}
	return r
}

func describeProcess(s *Summary) string {
	who := fmt.Sprintf("process %d", s.Header.PID)
	if s.Header.Rank >= 0 {
		who += fmt.Sprintf(" rank %d", s.Header.Rank)
	}
	return who + ": " + argvString(s.Header.Argv) + " (" + displayPath(s.Path) + ")"
}

// WriteBaselineText writes the comparison for people.
func WriteBaselineText(w io.Writer, r BaselineReport) error {
	tw := cli.Terminal(w)
	if len(r.Comparisons) == 0 {
		fmt.Fprintln(tw, "no process of the swap run ran the same command with the same rank in the baseline")
	}
	for i, c := range r.Comparisons {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		who := "process"
		if c.Rank >= 0 {
			who = fmt.Sprintf("rank %d", c.Rank)
		}
		fmt.Fprintf(tw, "%s: %s\n", who, argvString(c.Argv))
		fmt.Fprintf(tw, "  baseline (policy %s): peak in use %s (%s)\n", orDash(c.BaselinePolicy), Bytes(c.BaselinePeak),
			cli.Escape(c.Baseline))
		fmt.Fprintf(tw, "  this run (policy %s): peak in use %s (%s)\n", orDash(c.Policy), Bytes(c.Peak), cli.Escape(c.Swap))
		switch {
		case c.Refused != "":
			fmt.Fprintf(tw, "  saved, measured: none claimed: %s\n", c.Refused)
		case c.SavedBytes >= 0:
			fmt.Fprintf(tw, "  saved, measured: %s (%.1f%% of the baseline's peak); this run's trace alone implied %s\n",
				Bytes(uint64(c.SavedBytes)), c.SavedPercent, Bytes(c.ImpliedSavedBytes))
		default:
			fmt.Fprintf(tw, "  saved, measured: none: this run peaked %s above the baseline; its trace alone implied %s saved\n",
				Bytes(uint64(-c.SavedBytes)), Bytes(c.ImpliedSavedBytes))
		}
	}
	for _, u := range r.Unmatched {
		fmt.Fprintf(tw, "unmatched: %s\n", u)
	}
	return nil
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}
