// Command planbench checks `swapagent plan`'s choice against an exhaustive sweep of real runs (make
// bench-plan), on three decoder-sim configurations that no test uses, each on a throttled emulated link
// (ACLSIM_COPY_GBPS). For each: a profile is recorded under off a few times (the recording of least step is
// the profile), the link is measured on runs that swap every layer, and plan is asked for a budget between
// the lowest peak swap reaches and the peak without swap. The sweep is every configuration the plan could
// have chosen: every non-empty set of layers with each prefetch 0-2 that the plan's memory model fits in the
// budget (its simulated peak, as the plan counts it), so that the figure is the time model's: the plan chose
// among those by predicted time. Each runs under safe a few times, in rounds; how many of them also ran
// within the budget and the pool's growth step (--verify's rule), and whether the plan's own run did, is
// printed beside it: that is the memory model's part. The plan's choice and the sweep's fastest few (by
// their least step over the rounds) then run side by side: in rounds, one run of each in turn, so that the
// machine's load falls on all alike; each run's step is its least step after the first (a shared machine
// only ever slows a step down, and every step of a run swaps alike), each configuration's the median over
// its runs. The best of those is the sweep's best; the figure is the plan's step over it. Figures, never
// assertions: `go run ./cmd/planbench` from the repository root after `make build` (-v: every
// configuration of the sweep).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"swapagent/plan"
	"swapagent/report"
	"swapagent/trace"
)

// config is one decoder-sim job on one link.
type config struct {
	name string
	args []string
	gbps string
}

// The three jobs: none is a test's (python/tests/test_plan_mindformers.py, cmd/swapagent/plan_test.go).
var configs = []config{
	{"5 layers, seq 2048", []string{"--layers", "5", "--seq", "2048"}, "0.25"},
	{"5 layers, seq 2048, 2 streams, --sync layer", []string{"--layers", "5", "--seq", "2048", "--streams", "2",
		"--sync", "layer"}, "0.2"},
	{"5 layers, seq 3072, VMM pool, launch thread", []string{"--layers", "5", "--seq", "3072", "--alloc", "vmm",
		"--launch", "thread"}, "0.3"},
}

var (
	verbose bool
	cli     string
	sim     string
)

func main() {
	flag.StringVar(&cli, "cli", "build/bin/swapagent", "the swapagent command")
	flag.StringVar(&sim, "sim", "build/bin/decoder-sim", "decoder-sim")
	steps := flag.Int("steps", 6, "steps of each run of the sweep")
	rounds := flag.Int("rounds", 10, "side-by-side runs of each finalist")
	finalists := flag.Int("finalists", 4, "the sweep's fastest configurations that run side by side with the plan's")
	sweepRounds := flag.Int("sweep-rounds", 2, "runs of each configuration of the sweep (its least step ranks it)")
	frac := flag.Float64("budget", 0.4, "the budget, as the fraction of the way from the lowest peak swap reaches to the peak without swap")
	flag.BoolVar(&verbose, "v", false, "print every configuration of the sweep")
	flag.Parse()
	fmt.Printf("== plan against an exhaustive sweep of real runs (decoder-sim on a throttled emulated link; every "+
		"set of layers with prefetch 0-2 the plan's memory model fits, each run %d times; the plan's choice and the %d "+
		"fastest then side by side, %d rounds, medians)\n", *sweepRounds, *finalists, *rounds)
	var ratios []float64
	for _, c := range configs {
		r, err := bench(c, *steps, *sweepRounds, *rounds, *finalists, *frac)
		if err != nil {
			fmt.Fprintln(os.Stderr, "planbench:", err)
			os.Exit(1)
		}
		ratios = append(ratios, r)
	}
	worst := slices.Max(ratios)
	verdict := "within"
	if worst > 1.03 {
		verdict = "NOT within"
	}
	fmt.Printf("  plan's step over the sweep's best: %s; the worst %+.1f%%: %s the 3%% target\n", pcts(ratios),
		100*(worst-1), verdict)
}

func pcts(r []float64) string {
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = fmt.Sprintf("%+.1f%%", 100*(x-1))
	}
	return strings.Join(s, ", ")
}

// candidate is one configuration of the sweep and what its runs measured.
type candidate struct {
	layers   []int
	prefetch int
	predict  int64   // the model's exposed transfer
	pred     uint64  // the model's peak
	peak     uint64  // its run's
	first    int64   // the sweep's run: its least step
	steps    []int64 // the side-by-side runs: each one's least step
}

func (c *candidate) String() string {
	return fmt.Sprintf("layers %s prefetch %d", plan.Span(c.layers), c.prefetch)
}

func bench(c config, steps, sweepRounds, rounds, finalists int, frac float64) (float64, error) {
	os.Setenv("ACLSIM_COPY_GBPS", c.gbps)
	dir, err := os.MkdirTemp("", "planbench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	argv := append([]string{sim, "--steps", fmt.Sprint(steps)}, c.args...)
	record := func(name, policy, prefetch string, more ...string) (*trace.File, error) {
		out := filepath.Join(dir, name)
		cmd := exec.Command(cli, append(append([]string{"run", "--policy", policy, "--out", out, "--", sim},
			c.args...), more...)...)
		cmd.Env = append(os.Environ(), "SWAPAGENT_PREFETCH="+prefetch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s run: %v\n%s", name, err, b)
		}
		files, err := trace.FindTraces(out)
		if err != nil || len(files) != 1 {
			return nil, fmt.Errorf("%s run: traces %v (%v)", name, files, err)
		}
		return trace.Load(files[0])
	}
	// The link: the fastest of runs that swap every layer (a shared machine only slows one down).
	var link float64
	for i := range 2 {
		f, err := record(fmt.Sprint("link", i), "safe", "1", "--steps", fmt.Sprint(steps), "--swap-layers", "all")
		if err != nil {
			return 0, err
		}
		link = max(link, plan.MeasuredLink(f))
	}
	// The profile: the recording of least step of three.
	var prof *plan.Plan
	var profFile *trace.File
	for i := range 3 {
		f, err := record(fmt.Sprint("profile", i), "off", "0", "--steps", "8", "--swap-layers", "all")
		if err != nil {
			return 0, err
		}
		p, err := plan.Search(f, plan.Options{Budget: 1 << 50, PrefetchMax: 2, LinkBps: link})
		if err != nil {
			return 0, err
		}
		if prof == nil || p.Profile.StepNS < prof.Profile.StepNS {
			prof, profFile = p, f
		}
	}
	budget := prof.LowestPeak + uint64(frac*float64(prof.NoSwapPeak-prof.LowestPeak))
	p, err := plan.Search(profFile, plan.Options{Budget: budget, PrefetchMax: 2, LinkBps: link})
	if err != nil {
		return 0, err
	}
	fmt.Printf("%s (emulated link %s GB/s, measured %.3g GB/s): no swap peaks at %s, swap reaches %s; budget %s; "+
		"the profile's step %s\n", c.name, c.gbps, link/1e9, report.Bytes(prof.NoSwapPeak),
		report.Bytes(prof.LowestPeak), report.Bytes(budget), ms(prof.Profile.StepNS))
	if !p.Feasible {
		return 0, fmt.Errorf("%s: no configuration fits %s", c.name, report.Bytes(budget))
	}
	// The sweep: every non-empty set of the layers, each prefetch.
	n := len(prof.Profile.Layers)
	var all []*candidate
	for mask := 1; mask < 1<<n; mask++ {
		var layers []int
		for i := range n {
			if mask&(1<<i) != 0 {
				layers = append(layers, prof.Profile.Layers[i].Index)
			}
		}
		for pf := 0; pf <= 2; pf++ {
			all = append(all, &candidate{layers: layers, prefetch: pf, predict: p.Exposed(layers, pf),
				pred: p.PredictedPeak(profFile, layers, pf)})
		}
	}
	// interleave runs ks one after the other, n rounds, and gives record each run's figures: side by side,
	// so the machine's load falls on all of them alike.
	interleave := func(ks []*candidate, n int, record func(*candidate, *plan.Check)) error {
		for range n {
			for _, k := range ks {
				m, err := plan.Measure(cli, "safe", plan.Candidate{Layers: k.layers, Prefetch: k.prefetch}, argv, io.Discard)
				if err != nil {
					return err
				}
				record(k, m)
			}
		}
		return nil
	}
	keepStep := func(k *candidate, m *plan.Check) { k.steps = append(k.steps, m.LeastStepNS) }
	t0 := time.Now()
	var fit []*candidate
	var picked *candidate
	for _, k := range all {
		if k.pred > budget {
			continue
		}
		fit = append(fit, k)
		if slices.Equal(k.layers, p.Best.Layers) && k.prefetch == p.Best.Prefetch {
			picked = k
		}
	}
	if err := interleave(fit, sweepRounds, func(k *candidate, m *plan.Check) {
		k.peak = max(k.peak, m.PeakBytes)
		if k.first == 0 || m.LeastStepNS < k.first {
			k.first = m.LeastStepNS
		}
	}); err != nil {
		return 0, err
	}
	ranWithin := 0
	for _, k := range fit {
		if k.peak <= budget+p.PoolStep {
			ranWithin++
		}
		if verbose {
			fmt.Printf("    %-22s peak %s predicted, %s run; least step %s, predicted exposed %s\n", k,
				report.Bytes(k.pred), report.Bytes(k.peak), ms(k.first), ms(k.predict))
		}
	}
	if picked == nil {
		return 0, fmt.Errorf("%s: the plan's choice %v prefetch %d is not in the sweep", c.name, p.Best.Layers,
			p.Best.Prefetch)
	}
	sort.SliceStable(fit, func(i, j int) bool { return fit[i].first < fit[j].first })
	final := slices.Clone(fit[:min(finalists, len(fit))])
	if !slices.Contains(final, picked) {
		final = append(final, picked)
	}
	over := "within"
	if picked.peak > budget+p.PoolStep {
		over = "over"
	}
	fmt.Printf("  sweep: %d configurations, %d predicted to fit, run in %s (%d of them ran within the budget and "+
		"the pool step of %s); the plan's choice: %s (predicted peak %s, its run's %s: %s)\n", len(all), len(fit),
		time.Since(t0).Round(time.Second), ranWithin, report.Bytes(p.PoolStep), picked,
		report.Bytes(p.Best.PeakBytes), report.Bytes(picked.peak), over)
	if len(fit) == 0 {
		return 0, fmt.Errorf("%s: no configuration of the sweep fits %s", c.name, report.Bytes(budget))
	}
	if err := interleave(final, rounds, keepStep); err != nil {
		return 0, err
	}
	best := final[0]
	for _, k := range final {
		if median(k.steps) < median(best.steps) {
			best = k
		}
	}
	for _, k := range final {
		var marks []string
		if k == picked {
			marks = append(marks, "the plan's")
		}
		if k == best {
			marks = append(marks, "the best")
		}
		mark := ""
		if len(marks) > 0 {
			mark = "  <- " + strings.Join(marks, ", ")
		}
		fmt.Printf("    %-22s step median %s (runs %s to %s), predicted exposed transfer %s%s\n", k, ms(median(k.steps)),
			ms(slices.Min(k.steps)), ms(slices.Max(k.steps)), ms(k.predict), mark)
	}
	ratio := float64(median(picked.steps)) / float64(median(best.steps))
	fmt.Printf("  the plan's step over the best's, side by side (%d rounds): %+.1f%%\n", rounds, 100*(ratio-1))
	// Depth: the configuration of the sweep where the model gains most from a prefetch of 2 over 1, both run
	// side by side.
	var deep [2]*candidate
	byKey := map[string]*candidate{}
	for _, k := range all {
		byKey[fmt.Sprint(k.layers, k.prefetch)] = k
	}
	for _, k := range all {
		if one := byKey[fmt.Sprint(k.layers, 1)]; k.prefetch == 2 &&
			(deep[1] == nil || one.predict-k.predict > deep[0].predict-deep[1].predict) {
			deep = [2]*candidate{one, k}
		}
	}
	deep[0].steps, deep[1].steps = nil, nil
	if err := interleave(deep[:], rounds, keepStep); err != nil {
		return 0, err
	}
	fmt.Printf("  depth, where the model gains most from prefetch 2 (%s): predicted %s less exposed transfer than "+
		"prefetch 1; side by side (%d rounds): step %s against %s (%+.1f%%)\n", plan.Span(deep[0].layers),
		ms(deep[0].predict-deep[1].predict), rounds, ms(median(deep[1].steps)), ms(median(deep[0].steps)),
		100*(float64(median(deep[1].steps))/float64(median(deep[0].steps))-1))
	return ratio, nil
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(ns int64) string { return time.Duration(ns).Round(10 * time.Microsecond).String() }
