// output.go owns how replay results are written: the text report (figures, then one block per violation,
// most important first) and the JSON form.
package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"swapagent/internal/cli"
)

// mib formats a byte count as "N (X MiB)".
func mib(n uint64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}

func signedMiB(n int64) string {
	if n < 0 {
		return "-" + mib(uint64(-n))
	}
	return mib(uint64(n))
}

func ms(ns int64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }

// WriteText writes a simulation result for people.
func WriteText(w io.Writer, r *Result) {
	fmt.Fprintf(w, "replay %s", cli.Escape(r.File))
	if len(r.Argv) > 0 {
		fmt.Fprintf(w, " (pid %d: %s)", r.PID, cli.Escape(strings.Join(r.Argv, " ")))
	}
	fmt.Fprintln(w)
	rec := r.RecordedPolicy
	if rec == "" {
		rec = "unknown"
	}
	fmt.Fprintf(w, "  policy %s (prefetch %d, min-bytes %d); recorded with policy %s\n", r.Policy, r.Prefetch,
		r.MinBytes, rec)
	fmt.Fprintf(w, "  events: %d (%d runtime calls, %d swap ABI calls)\n", r.Events, r.RuntimeCalls, r.ABICalls)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.NoSwapActivity {
		fmt.Fprintf(w, "  no swap activity recorded: nothing to simulate\n")
		fmt.Fprintf(w, "  peak device bytes (recorded): %s\n", mib(r.PeakRecorded))
		return
	}
	fmt.Fprintf(w, "  storages released: %d, restored: %d\n", r.Released, r.Restored)
	fmt.Fprintf(w, "  bytes moved out: %s, in: %s\n", mib(r.BytesOut), mib(r.BytesIn))
	fmt.Fprintf(w, "  device bytes released at once, at most: %s (the recording: %s)\n", mib(r.ReleasedPeak),
		mib(r.RecordedFreed))
	what := "device bytes"
	if r.Footprint == "saved" {
		what = "saved bytes"
	}
	fmt.Fprintf(w, "  peak %s: simulated %s, recorded %s, without swap %s\n", what, mib(r.PeakSimulated),
		mib(r.PeakRecorded), mib(r.PeakNoSwap))
	switch {
	case r.SavedVsRecord >= 0:
		fmt.Fprintf(w, "  memory saved vs the recorded run: %s\n", mib(uint64(r.SavedVsRecord)))
	default:
		fmt.Fprintf(w, "  memory saved vs the recorded run: %s (the recorded run released more)\n",
			signedMiB(r.SavedVsRecord))
	}
	// The simulated policy's figures in the words of run's and report's memory line.
	fmt.Fprintf(w, "  device memory, simulated: %s\n", r.Memory.Text())
	if d := r.Memory.Detail(); d != "" {
		fmt.Fprintf(w, "    saving: %s\n", d)
	}
	if r.EngineErrors > 0 {
		fmt.Fprintf(w, "  engine rejected %d ABI calls; first: %s\n", r.EngineErrors, r.FirstEngineErr)
	}
	if r.Skipped > 0 {
		fmt.Fprintf(w, "  unpacks skipped (handle never returned by the recorded save): %d\n", r.Skipped)
	}
	fmt.Fprintf(w, "  violations: %d\n", len(r.Violations))
	for i, v := range r.Violations {
		fmt.Fprintf(w, "\nviolation %d: external storage %s (%d bytes) released by %s\n", i+1, v.Storage, v.Size,
			v.ReleasedBy)
		owner := v.Owner
		if owner == "" {
			owner = "outside " + v.ReleasedBy
		}
		fmt.Fprintf(w, "  owner:     %s (ownership reason: %s)\n", owner, v.Reason)
		fmt.Fprintf(w, "  released:  during %s (event %d)", v.During, v.ReleaseEv)
		if v.Releases > 1 {
			fmt.Fprintf(w, ", and %d more times later", v.Releases-1)
		}
		fmt.Fprintln(w)
		if rd := v.FirstRead; rd != nil {
			how := "its address lies in the storage"
			if rd.Match == "null-extent" {
				how = "recorded address 0 (the recording had released it too), extent matches"
			}
			fmt.Fprintf(w, "  read by:   %s, tensor %d of %d at %#x (%s), event %d at +%s, thread %d\n", rd.Kernel,
				rd.TensorIndex, rd.Tensors, rd.Addr, how, rd.Event, ms(rd.TS), rd.TID)
			fmt.Fprintf(w, "  reads while released: %d launches; the first one would fault (null or stale address)\n",
				v.Reads)
		} else {
			fmt.Fprintf(w, "  read by:   no later launch in the trace (still a leak of the owner's data)\n")
		}
	}
}

// WriteJSON writes results as one JSON document: {"replays": [...]}.
func WriteJSON(w io.Writer, rs []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Replays []*Result `json:"replays"`
	}{rs})
}
