// planmem_test.go checks the pool model (package pool) against real runs on both of decoder-sim's pools:
// each configuration is recorded once as a profile, planned for a sweep of budgets, and each plan is run as
// planned under safe and, for the measured saving, under off: the predicted peak must be within 5% of the
// run's, and the saving the run's summary states (the no-swap peak the model finds in the swap run's own
// trace, whose unswapped layers decoder-sim declares as scopes) within 5% of the one `report --baseline`
// measures, on both pools.
package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"swapagent/internal/testenv"
)

// runMemory is what the test reads of a run's memory figures (the run summary's: report.MemFigures).
type runMemory struct {
	Peak  uint64 `json:"peak_in_use_bytes"`
	Saved uint64 `json:"saved_bytes"`
}

func reportMemory(t *testing.T, dir string) runMemory {
	t.Helper()
	r := swapagent(t, nil, "report", "--format", "json", dir)
	var doc struct {
		Processes []struct {
			Memory runMemory `json:"memory"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report %s: %v\n%s", dir, err, r.Stderr)
	}
	return doc.Processes[0].Memory
}

func within5(pred, got uint64) bool {
	d := float64(pred) - float64(got)
	return d <= 0.05*float64(got) && -d <= 0.05*float64(got)
}

func TestPlanMemoryModelAgainstRuns(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	configs := [][]string{
		{"--layers", "6", "--seq", "1024", "--steps", "2"},
		{"--layers", "8", "--seq", "1024", "--alloc", "vmm", "--steps", "2"},
		{"--layers", "6", "--seq", "1024", "--hidden", "16", "--streams", "2", "--sync", "step", "--steps", "2"},
		{"--layers", "10", "--seq", "2048", "--steps", "2"},
		// two streams and a wait at each layer's end; the executor cache; VMM fed by a launch thread
		{"--layers", "12", "--seq", "1024", "--streams", "2", "--sync", "layer", "--steps", "2"},
		{"--layers", "8", "--seq", "2048", "--executor-cache", "on", "--steps", "2"},
		{"--layers", "10", "--seq", "1024", "--alloc", "vmm", "--launch", "thread", "--steps", "2"},
	}
	for _, job := range configs {
		rec := t.TempDir()
		if r := swapagent(t, nil, append([]string{"run", "--policy", "off", "--out", rec, "--", sim, "--swap-layers",
			"all"}, job...)...); r.Code != 0 {
			t.Fatalf("%v: profiling run: exit %d\n%s", job, r.Code, r.Stderr)
		}
		all, _ := runPlan(t, rec, 1<<40)
		checked := 0
		for _, frac := range []float64{0, 0.5} { // the tightest reachable budget, and one halfway
			budget := all.Lowest + uint64(frac*float64(all.NoSwapPeak-all.Lowest))
			p, r := runPlan(t, rec, budget)
			if r.Code != 0 || !p.Feasible || len(p.Layers) == 0 {
				t.Errorf("%v budget %d: exit %d, %+v", job, budget, r.Code, p)
				continue
			}
			run, base := t.TempDir(), t.TempDir()
			env := []string{"SWAPAGENT_PREFETCH=" + p.Env["SWAPAGENT_PREFETCH"]}
			args := append(append([]string{}, job...), p.SimArgs...)
			for _, x := range []struct{ policy, out string }{{"safe", run}, {"off", base}} {
				if r := swapagent(t, env, append([]string{"run", "--policy", x.policy, "--out", x.out, "--", sim}, args...)...); r.Code != 0 {
					t.Fatalf("%v as planned under %s: exit %d\n%s", args, x.policy, r.Code, r.Stderr)
				}
			}
			got := reportMemory(t, run)
			var cmp struct {
				Comparisons []struct {
					Saved int64 `json:"saved_bytes"`
				} `json:"comparisons"`
			}
			b := swapagent(t, nil, "report", "--baseline", base, "--format", "json", run)
			if err := json.Unmarshal([]byte(b.Stdout), &cmp); err != nil || len(cmp.Comparisons) != 1 || cmp.Comparisons[0].Saved <= 0 {
				t.Fatalf("%v: report --baseline: %v\n%s\n%s", args, err, b.Stdout, b.Stderr)
			}
			measured := uint64(cmp.Comparisons[0].Saved)
			fmt.Printf("plan memory: %v budget %d: layers %v prefetch %d: peak predicted %d, measured %d (%+.1f%%); "+
				"saving the run says %d, --baseline measures %d (%+.1f%%)\n", job, budget, p.Layers, p.Prefetch, p.Peak,
				got.Peak, 100*(float64(p.Peak)-float64(got.Peak))/float64(got.Peak), got.Saved, measured,
				100*(float64(got.Saved)-float64(measured))/float64(measured))
			if !within5(p.Peak, got.Peak) {
				t.Errorf("%v budget %d: predicted peak %d, measured %d: more than 5%% apart", job, budget, p.Peak, got.Peak)
			}
			// halfway, layers run unswapped: their scopes say when their blocks die
			checked++
			if !within5(got.Saved, measured) {
				t.Errorf("%v as planned for %d: the run says it saved %d, report --baseline measures %d: more than 5%% apart",
					job, budget, got.Saved, measured)
			}
		}
		if checked != 2 {
			t.Errorf("%v: %d savings checked, want 2", job, checked)
		}
	}
}
