// plan_test.go checks `swapagent plan` against real runs: decoder-sim recorded once with every layer
// declared and nothing released, planned for three budgets between the peak without swap and the lowest
// swap reaches, each plan run as planned under safe.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// planJSON is what the test reads of `plan --format json`.
type planJSON struct {
	Feasible   bool   `json:"feasible"`
	Budget     uint64 `json:"budget_bytes"`
	Peak       uint64 `json:"predicted_peak_bytes"`
	Layers     []int  `json:"swap_layers"`
	Prefetch   int    `json:"prefetch"`
	Moved      uint64 `json:"bytes_moved_per_step"`
	NoSwapPeak uint64 `json:"no_swap_peak_bytes"`
	Lowest     uint64 `json:"lowest_reachable_peak_bytes"`
	PoolStep   uint64 `json:"pool_step_bytes"`
	YAML       string `json:"mindformers_yaml"`
	MF         struct {
		Feasible bool  `json:"feasible"`
		Layers   []int `json:"swap_layers"`
		Prefetch int   `json:"prefetch"`
	} `json:"mindformers"`
	SimArgs   []string          `json:"decoder_sim_args"`
	Env       map[string]string `json:"environment"`
	Recompute bool              `json:"recompute"`
	Exposed   int64             `json:"predicted_exposed_ns"`
	Sets      string            `json:"sets_search"`
	BestRange *struct {
		Layers   []int  `json:"swap_layers"`
		Prefetch int    `json:"prefetch"`
		Exposed  int64  `json:"predicted_exposed_ns"`
		Peak     uint64 `json:"predicted_peak_bytes"`
	} `json:"best_range"`
	Recorded []struct {
		Index     int   `json:"index"`
		ForwardNS int64 `json:"forward_ns"`
	} `json:"layers"`
}

func runPlan(t *testing.T, rec string, budget uint64, more ...string) (planJSON, result) {
	t.Helper()
	r := swapagent(t, nil, append([]string{"plan", rec, "--budget", fmt.Sprint(budget), "--format", "json"}, more...)...)
	var p planJSON
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		t.Fatalf("plan --budget %d: exit %d, %v\n%s\n%s", budget, r.Code, err, r.Stdout, r.Stderr)
	}
	return p, r
}

// measuredPeak runs decoder-sim as planned (its flags, the plan's prefetch) under safe and returns the peak
// device bytes the report measures.
func measuredPeak(t *testing.T, p planJSON, job ...string) uint64 {
	t.Helper()
	out := t.TempDir()
	env := []string{"SWAPAGENT_PREFETCH=" + p.Env["SWAPAGENT_PREFETCH"]}
	args := append([]string{"run", "--policy", "safe", "--out", out, "--", testenv.Path(t, testenv.DecoderSim),
		"--steps", "3"}, append(job, p.SimArgs...)...)
	if r := swapagent(t, env, args...); r.Code != 0 {
		t.Fatalf("decoder-sim as planned (%v): exit %d\n%s", p.SimArgs, r.Code, r.Stderr)
	}
	r := swapagent(t, nil, "report", "--format", "json", out)
	var doc struct {
		Processes []struct {
			Peak uint64 `json:"peak_device_bytes"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report of the planned run: %v\n%s", err, r.Stderr)
	}
	return doc.Processes[0].Peak
}

func TestPlanFitsBudgetsAsRun(t *testing.T) {
	rec := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", rec, "--", testenv.Path(t, testenv.DecoderSim),
		"--swap-layers", "all", "--steps", "3"); r.Code != 0 {
		t.Fatalf("profiling run: exit %d\n%s", r.Code, r.Stderr)
	}
	all, r := runPlan(t, rec, 1<<40)
	if r.Code != 0 || !all.Feasible || len(all.Layers) != 0 || all.Lowest >= all.NoSwapPeak {
		t.Fatalf("a budget above everything: exit %d, %+v: want the empty plan, and swap to reach below %d",
			r.Code, all, all.NoSwapPeak)
	}
	for _, frac := range []float64{0.25, 0.5, 0.8} {
		budget := all.Lowest + uint64(frac*float64(all.NoSwapPeak-all.Lowest))
		p, r := runPlan(t, rec, budget)
		if r.Code != 0 || !p.Feasible || p.Peak > budget || len(p.Layers) == 0 || p.Moved == 0 {
			t.Errorf("budget %d: exit %d, %+v", budget, r.Code, p)
			continue
		}
		// MindFormers' form: its own best (python/tests/test_plan_mindformers.py runs MindFormers' validation)
		if !p.MF.Feasible || !strings.Contains(p.YAML, "layer_swap:") || len(p.MF.Layers) == 0 ||
			!strings.Contains(p.YAML, fmt.Sprintf("default_prefetch: %d\n", p.MF.Prefetch)) ||
			!strings.Contains(p.YAML, fmt.Sprintf("%d']", p.MF.Layers[len(p.MF.Layers)-1])) {
			t.Errorf("budget %d: the YAML does not name MindFormers' layers %v:\n%s", budget, p.MF.Layers, p.YAML)
		}
		got := measuredPeak(t, p)
		fmt.Printf("plan: budget %d: layers %v prefetch %d, predicted peak %d, measured %d (%+.1f%%)\n", budget,
			p.Layers, p.Prefetch, p.Peak, got, 100*(float64(p.Peak)-float64(got))/float64(got))
		if got > budget+p.PoolStep {
			t.Errorf("budget %d (pool step %d): the planned run peaked at %d", budget, p.PoolStep, got)
		}
		// The pool model (package pool) places blocks as the pool does, freeing them where decoder-sim's scopes
		// (its RoPE parts, its backward nodes) close.
		if !within5(p.Peak, got) {
			t.Errorf("budget %d: predicted peak %d, measured %d: more than 5%% apart", budget, p.Peak, got)
		}
	}
	// --verify runs decoder-sim as planned and prints what it measured beside the plan.
	mid := all.Lowest + (all.NoSwapPeak-all.Lowest)/2
	v := swapagent(t, nil, "plan", rec, "--budget", fmt.Sprint(mid), "--verify", "--",
		testenv.Path(t, testenv.DecoderSim), "--steps", "3")
	if v.Code != 0 || !strings.Contains(v.Stdout, "verify: peak predicted") || !strings.Contains(v.Stdout, "within the budget") ||
		!strings.Contains(v.Stdout, "step time: predicted") {
		t.Errorf("--verify: exit %d\n%s\n%s", v.Code, v.Stdout, testenv.Tail(v.Stderr, 10))
	}
	// A budget the job fits without swap: the plan swaps nothing, and --verify runs the job as it is (decoder-sim
	// then declares no layer: its peak is measured, no step time).
	v = swapagent(t, nil, "plan", rec, "--budget", fmt.Sprint(all.NoSwapPeak), "--verify", "--",
		testenv.Path(t, testenv.DecoderSim), "--steps", "3")
	if v.Code != 0 || !strings.Contains(v.Stdout, "within the budget") || !strings.Contains(v.Stdout, "swapped nothing") {
		t.Errorf("--verify of a plan that swaps nothing: exit %d\n%s\n%s", v.Code, v.Stdout, testenv.Tail(v.Stderr, 10))
	}
	// --recompute: over a slow link a layer's forward costs less than its copies, so full recompute wins, costed
	// by the layers' recorded forward times, nothing moved, written as MindFormers' recompute section; over a
	// fast one swap does. decoder-sim cannot recompute: --verify says so.
	rc, r := runPlan(t, rec, mid, "--recompute", "--link", "0.01")
	var forward int64
	for _, l := range rc.Recorded {
		for _, i := range rc.Layers {
			if l.Index == i {
				forward += l.ForwardNS
			}
		}
	}
	if r.Code != 0 || !rc.Feasible || !rc.Recompute || rc.Peak > mid || rc.Moved != 0 || len(rc.Layers) == 0 ||
		rc.Exposed != forward || rc.SimArgs != nil || !strings.Contains(rc.YAML, "mode: full") ||
		!strings.Contains(rc.YAML, fmt.Sprintf("full_recompute_layer: ['%d", rc.Layers[0])) {
		t.Errorf("--recompute over a slow link: exit %d, %+v (the layers' forward: %d ns)", r.Code, rc, forward)
	}
	// any set of layers may be recomputed: the plan costs no more than the best range that fits
	if rc.BestRange != nil && rc.Exposed > rc.BestRange.Exposed {
		t.Errorf("--recompute: the plan %v costs %d ns, more than the range %v (%d ns)", rc.Layers, rc.Exposed,
			rc.BestRange.Layers, rc.BestRange.Exposed)
	}
	if fast, r := runPlan(t, rec, mid, "--recompute"); r.Code != 0 || fast.Recompute || fast.Moved == 0 {
		t.Errorf("--recompute over the default link: exit %d, %+v: want a swap", r.Code, fast)
	}
	v = swapagent(t, nil, "plan", rec, "--budget", fmt.Sprint(mid), "--recompute", "--link", "0.01", "--verify", "--",
		testenv.Path(t, testenv.DecoderSim), "--steps", "3")
	if v.Code != 2 || !strings.Contains(v.Stderr, "recomputes") {
		t.Errorf("--verify of a recompute plan: exit %d\n%s", v.Code, v.Stderr)
	}
	// Below what swap can reach: said so, with the lowest reachable peak, and exit 1.
	low, r := runPlan(t, rec, all.Lowest/2)
	if r.Code != 1 || low.Feasible || low.Lowest != all.Lowest || low.Peak != all.Lowest || low.YAML != "" ||
		low.SimArgs != nil || len(low.Env) != 0 {
		t.Errorf("budget %d: exit %d, %+v: want exit 1, not feasible, the lowest peak %d", all.Lowest/2, r.Code, low,
			all.Lowest)
	}
	tr := swapagent(t, nil, "plan", rec, "--budget", fmt.Sprint(all.Lowest/2))
	if tr.Code != 1 || !strings.Contains(tr.Stdout, "no configuration fits") {
		t.Errorf("text: exit %d\n%s", tr.Code, tr.Stdout)
	}
}

// A swapping run is no profile (its layer times include the transfer it waited for): plan refuses it, exit 2,
// in one line that gives the link's rate its copies measured (their bytes over the time they held the
// mover's stream) for --link. That rate is the emulated link's at most: bytes of copies not timed, counted
// over the time of the others, would make it faster than the link can be; gaps between copies on a loaded
// machine only slow it.
func TestPlanRefusesASwappingRunAndGivesItsLink(t *testing.T) {
	rec := t.TempDir()
	if r := swapagent(t, []string{"ACLSIM_COPY_GBPS=1"}, "run", "--policy", "safe", "--out", rec, "--",
		testenv.Path(t, testenv.DecoderSim), "--swap-layers", "all", "--steps", "3"); r.Code != 0 {
		t.Fatalf("swapping run: exit %d\n%s", r.Code, r.Stderr)
	}
	r := swapagent(t, nil, "plan", rec, "--budget", "1T", "--format", "json")
	oneLine(t, r, "policy safe, which moved", "--policy off")
	m := regexp.MustCompile(`--link ([0-9.e+-]+)`).FindStringSubmatch(r.Stderr)
	if r.Code != 2 || r.Stdout != "" || m == nil {
		t.Fatalf("plan of a swapping run: exit %d, stdout %q, stderr %q: want exit 2 and the measured link", r.Code,
			r.Stdout, r.Stderr)
	}
	if gbps, err := strconv.ParseFloat(m[1], 64); err != nil || gbps > 1.01 || gbps < 0.05 {
		t.Errorf("the link over a 1 GB/s emulated link: %s GB/s: want at most 1", m[1])
	}
}

// Recordings that are no profile, and a --verify of another job: each refused with its exit code and a
// line naming why; a one-step profile is planned with a warning.
func TestPlanRefusals(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	faulted := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "outputs-only", "--out", faulted, "--", sim, "--swap-layers", "all",
		"--steps", "3"); r.Code == 0 {
		t.Fatalf("outputs-only must fault:\n%s", r.Stderr)
	}
	r := swapagent(t, nil, "plan", faulted, "--budget", "1G")
	oneLine(t, r, "fault record(s)", "no profile")
	if r.Code != 2 || r.Stdout != "" {
		t.Errorf("a faulted recording: exit %d, stdout %q", r.Code, r.Stdout)
	}
	one := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", one, "--", sim, "--swap-layers", "all", "--layers", "4",
		"--seq", "1024", "--steps", "1"); r.Code != 0 {
		t.Fatalf("one-step profile: exit %d\n%s", r.Code, r.Stderr)
	}
	r = swapagent(t, nil, "plan", one, "--budget", "1.5G") // the help's own example of a budget
	oneLine(t, r, "warning: the recording has 1 step", "warm-up")
	if r.Code != 0 || !strings.Contains(r.Stdout, "budget 1.5 GiB") {
		t.Errorf("a one-step profile at 1.5G: exit %d\n%s", r.Code, r.Stdout)
	}
	// --verify of a command that is not the profiled job: 4 layers at seq 1024 profiled (3 steps), then run
	// with 5 layers (other layers), or at seq 2048 (other shapes).
	prof := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", prof, "--", sim, "--swap-layers", "all", "--layers", "4",
		"--seq", "1024", "--steps", "3"); r.Code != 0 {
		t.Fatalf("profile: exit %d\n%s", r.Code, r.Stderr)
	}
	whole, _ := runPlan(t, prof, 1<<40)
	budget := fmt.Sprint((whole.NoSwapPeak + whole.Lowest) / 2)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--layers", "5", "--seq", "1024"}, "other layers"},
		{[]string{"--layers", "4", "--seq", "2048"}, "other shapes"},
	} {
		v := swapagent(t, nil, append([]string{"plan", prof, "--budget", budget, "--verify", "--", sim, "--steps", "3"},
			c.args...)...)
		lines := strings.Split(strings.TrimSuffix(v.Stderr, "\n"), "\n")
		if last := lines[len(lines)-1]; v.Code != 2 || !strings.Contains(last, "not the profiled job") ||
			!strings.Contains(last, c.want) || strings.Contains(v.Stdout, "verify: peak") {
			t.Errorf("--verify %v: exit %d, last line %q, stdout %q: want exit 2 naming %q", c.args, v.Code, last,
				v.Stdout, c.want)
		}
	}
	v := swapagent(t, nil, "plan", prof, "--budget", budget, "--verify", "--", sim, "--steps", "3", "--layers", "4",
		"--seq", "1024")
	if v.Code != 0 || !strings.Contains(v.Stdout, "verify: peak predicted") {
		t.Errorf("--verify of the profiled job: exit %d\n%s\n%s", v.Code, v.Stdout, testenv.Tail(v.Stderr, 5))
	}
}

// Beyond contiguous ranges: on a slow link a swapped layer's copies out are waited for at the next swapped
// layer's exit, so layers with unswapped ones between them hide their copies behind those layers' forward
// where a range cannot. For a budget that needs about half of 8 layers swapped, the plan is a set with gaps,
// predicted cheaper than the best contiguous range that fits; run as planned, it fits.
func TestPlanChoosesASetWithGaps(t *testing.T) {
	rec := t.TempDir()
	sim := testenv.Path(t, testenv.DecoderSim)
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", rec, "--", sim, "--swap-layers", "all", "--layers", "8",
		"--seq", "2048", "--steps", "3"); r.Code != 0 {
		t.Fatalf("profiling run: exit %d\n%s", r.Code, r.Stderr)
	}
	whole, _ := runPlan(t, rec, 1<<40)
	// Two budgets, about 2 and 4 of the 8 layers swapped, over a 0.1 GB/s link: the recorded layer times move
	// with the machine's load, and the test needs one budget where a set wins (on an idle one both do).
	var p planJSON
	var budget uint64
	var why []string
	for _, frac := range []float64{0.8, 0.5} {
		budget = whole.Lowest + uint64(frac*float64(whole.NoSwapPeak-whole.Lowest))
		var r result
		p, r = runPlan(t, rec, budget, "--link", "0.1")
		if r.Code != 0 || !p.Feasible || p.Peak > budget || len(p.Layers) < 2 || p.BestRange == nil {
			t.Fatalf("budget %d: exit %d, %+v", budget, r.Code, p)
		}
		if p.Layers[len(p.Layers)-1]-p.Layers[0] != len(p.Layers)-1 && p.Exposed < p.BestRange.Exposed {
			why = nil
			break
		}
		why = append(why, fmt.Sprintf("budget %d: plan %v prefetch %d (%d ns), best range %v prefetch %d (%d ns): %s",
			budget, p.Layers, p.Prefetch, p.Exposed, p.BestRange.Layers, p.BestRange.Prefetch, p.BestRange.Exposed, p.Sets))
	}
	if why != nil {
		t.Fatalf("no budget planned a set with gaps cheaper than every range:\n%s", strings.Join(why, "\n"))
	}
	if mf := p.MF.Layers; len(mf) > 0 && mf[len(mf)-1]-mf[0] != len(mf)-1 {
		t.Errorf("MindFormers' YAML states a set with gaps, which it chains another way:\n%s", p.YAML)
	}
	got := measuredPeak(t, p, "--layers", "8", "--seq", "2048")
	fmt.Printf("plan: a set with gaps: budget %d: layers %v prefetch %d (%d ns exposed; best range %v: %d ns), "+
		"predicted peak %d, measured %d\n", budget, p.Layers, p.Prefetch, p.Exposed, p.BestRange.Layers,
		p.BestRange.Exposed, p.Peak, got)
	if got > budget+p.PoolStep {
		t.Errorf("budget %d (pool step %d): the planned set %v peaked at %d", budget, p.PoolStep, p.Layers, got)
	}
}

func TestPlanUsage(t *testing.T) {
	rec := t.TempDir()
	usageErr(t, swapagent(t, nil, "plan", rec), "plan", "--budget is required")
	usageErr(t, swapagent(t, nil, "plan", rec, "--budget", "1G", "--format", "xml"), "plan", "--format")
	usageErr(t, swapagent(t, nil, "plan", rec, "--budget", "1G", "--verify"), "plan", "--verify needs -- CMD")
	usageErr(t, swapagent(t, nil, "plan", rec, "--budget", "1G", "--", "true"), "plan", "goes with --verify")
	r := swapagent(t, nil, "plan", rec+"/none.swtrace", "--budget", "1G")
	if r.Code != 2 || r.Stdout != "" {
		t.Errorf("a missing trace: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if err := os.WriteFile(rec+"/x.swtrace", []byte("not a trace"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := swapagent(t, nil, "plan", rec+"/x.swtrace", "--budget", "1G"); r.Code != 2 {
		t.Errorf("a bad trace: exit %d stderr %q", r.Code, r.Stderr)
	}
}

// TestPlanBadLink: a --link that is no rate the time model can use is bad usage, said before any trace is
// read: 0 (taken before as "not given"), NaN and Inf (never rates), and one so slow that a step's
// transfer overflows the model's nanoseconds (it then read as 0s, the slowest link as the fastest).
func TestPlanBadLink(t *testing.T) {
	for _, v := range []string{"0", "-1", "NaN", "Inf", "1e-300"} {
		usageErr(t, swapagent(t, nil, "plan", "x.swtrace", "--budget", "1G", "--link", v), "plan", "bad --link")
	}
}

// TestPlanBadNumLayers: a layer count no model has is bad usage at once, on a real profile; each layer is
// modelled in every step, so --num-layers 1000000000 ran for hours.
func TestPlanBadNumLayers(t *testing.T) {
	rec := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", rec, "--", testenv.Path(t, testenv.DecoderSim),
		"--swap-layers", "all", "--layers", "2", "--steps", "2"); r.Code != 0 {
		t.Fatalf("profiling run: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, v := range []string{"-1", "1000000000"} {
		r := testenv.Run(t, 10*time.Second, testenv.CleanEnv(), testenv.Path(t, testenv.CLI), "plan", rec,
			"--budget", "1G", "--num-layers", v)
		usageErr(t, r, "plan", "bad --num-layers")
	}
}

// TestPlanRefusesKilledSwapRun: a swapping run that was killed never wrote its stats (they come at the
// close); it moved data all the same, which its state changes show, so it is no profile (exit 2), as the
// same run closed is. The kill is the file cut short, as SIGKILL leaves it.
func TestPlanRefusesKilledSwapRun(t *testing.T) {
	rec := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "safe", "--out", rec, "--", testenv.Path(t, testenv.DecoderSim),
		"--layers", "4", "--steps", "3"); r.Code != 0 {
		t.Fatalf("swap run: exit %d\n%s", r.Code, r.Stderr)
	}
	path := testenv.OnlyTrace(t, rec)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := writeFile(t, t.TempDir(), filepath.Base(path), data[:len(data)*2/3])
	r := swapagent(t, nil, "plan", cut, "--budget", "1G")
	if r.Code != 2 || r.Stdout != "" || !strings.Contains(r.Stderr, "the recording was made under policy safe, which moved") {
		t.Errorf("exit %d stdout %q stderr %q, want 2 and the refusal", r.Code, testenv.Tail(r.Stdout, 3), r.Stderr)
	}
}
