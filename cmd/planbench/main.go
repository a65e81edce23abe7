// Command planbench checks `swapagent plan`'s choice and time model against real runs (make bench-plan).
// decoder-sim on a throttled emulated link (ACLSIM_COPY_GBPS) is recorded under off a few times (the recording
// of least step is the profile), the link is measured on runs that swap every layer, and every contiguous range
// of layers with prefetch 0-2 is run for real under safe, and each range under off (its layers declared, nothing
// moved), in a few rounds. A configuration's step is the least of its rounds (a shared machine only ever slows a
// run down), and its measured exposed transfer is that step less its range's under off: the same hooks and
// bookkeeping, so the difference is the transfer's. For each budget it prints the plan's choice and the best
// configuration of the sweep that fit, then measures the two side by side (runs of each in turn, with the plan's
// range under off between them: on a shared machine only neighbouring runs compare to a few per cent) for the
// step against the best and the predicted exposed transfer against the measured one; then the model's error over
// the whole sweep (-v: every configuration). A configuration fits when its run peaked within the budget (no
// tolerance: the plan's own run is held to the same). Figures, never assertions: `go run ./cmd/planbench` from
// the repository root after `make build`.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"swapagent/plan"
	"swapagent/report"
	"swapagent/trace"
)

var (
	verbose bool
	pairs   int
)

func main() {
	cli := flag.String("cli", "build/bin/swapagent", "the swapagent command")
	sim := flag.String("sim", "build/bin/decoder-sim", "decoder-sim")
	layers := flag.Int("layers", 6, "decoder-sim's layers")
	steps := flag.Int("steps", 8, "steps of each run")
	rounds := flag.Int("rounds", 3, "runs of each configuration")
	gbps := flag.String("gbps", "0.25", "the emulated link's rate (ACLSIM_COPY_GBPS)")
	flag.IntVar(&pairs, "pairs", 10, "side-by-side runs of each budget's plan and the sweep's best")
	flag.BoolVar(&verbose, "v", false, "print every configuration's prediction and measurement")
	flag.Parse()
	if err := run(*cli, *sim, *layers, *steps, *rounds, *gbps); err != nil {
		fmt.Fprintln(os.Stderr, "planbench:", err)
		os.Exit(1)
	}
}

func run(cli, sim string, layers, steps, rounds int, gbps string) error {
	os.Setenv("ACLSIM_COPY_GBPS", gbps)
	dir, err := os.MkdirTemp("", "planbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	argv := []string{sim, "--layers", fmt.Sprint(layers), "--steps", fmt.Sprint(steps)}
	record := func(name, policy string) (*trace.File, error) {
		out := filepath.Join(dir, name)
		cmd := exec.Command(cli, append([]string{"run", "--policy", policy, "--out", out, "--"},
			append(argv, "--swap-layers", "all")...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s run: %v\n%s", name, err, b)
		}
		files, err := trace.FindTraces(out)
		if err != nil || len(files) != 1 {
			return nil, fmt.Errorf("%s run: traces %v (%v)", name, files, err)
		}
		return trace.Load(files[0])
	}
	// Each round records the link (a run that swaps every layer) and a profile (every layer under off),
	// then runs each contiguous range under off (its layers declared, nothing moved: the same hooks and
	// bookkeeping, so the difference is the transfer's alone) and under safe with each prefetch, one after
	// the other. A shared machine only slows runs down: the link is the fastest round's, the profile the
	// recording of least step, a run's step its least (Check.LeastStepNS), a configuration's the least of
	// its rounds.
	var link float64
	var profiles []*trace.File
	measured, still := map[string]*plan.Check{}, map[string]int64{}
	key := func(c plan.Candidate) string { return fmt.Sprint(c.Layers, c.Prefetch) }
	span := func(layers []int) string { return fmt.Sprint(layers) } // a range of layers, as a map key
	var byRange []plan.Candidate
	for r := 0; r < rounds; r++ {
		moving, err := record(fmt.Sprint("link", r), "safe")
		if err != nil {
			return err
		}
		link = max(link, plan.MeasuredLink(moving))
		f, err := record(fmt.Sprint("profile", r), "off")
		if err != nil {
			return err
		}
		profiles = append(profiles, f)
		if byRange == nil {
			p, err := plan.Search(f, plan.Options{Budget: 1 << 50, PrefetchMax: 2})
			if err != nil {
				return err
			}
			byRange = slices.Clone(p.Ranked)
			sort.SliceStable(byRange, func(i, j int) bool { return span(byRange[i].Layers) < span(byRange[j].Layers) })
		}
		for i, c := range byRange {
			if len(c.Layers) == 0 {
				continue
			}
			if i == 0 || span(c.Layers) != span(byRange[i-1].Layers) {
				m, err := plan.Measure(cli, "off", c, argv, io.Discard)
				if err != nil {
					return err
				}
				if old, ok := still[span(c.Layers)]; !ok || m.LeastStepNS < old {
					still[span(c.Layers)] = m.LeastStepNS
				}
			}
			m, err := plan.Measure(cli, "safe", c, argv, io.Discard)
			if err != nil {
				return err
			}
			if old := measured[key(c)]; old == nil || m.LeastStepNS < old.LeastStepNS {
				measured[key(c)] = m
			}
		}
	}
	var prof *trace.File
	var all *plan.Plan
	for _, f := range profiles {
		p, err := plan.Search(f, plan.Options{Budget: 1 << 50, PrefetchMax: 2, LinkBps: link})
		if err != nil {
			return err
		}
		if all == nil || p.Profile.StepNS < all.Profile.StepNS {
			prof, all = f, p
		}
	}
	fmt.Printf("== plan against a sweep of real runs: decoder-sim --layers %d --steps %d, emulated link %s GB/s "+
		"(measured %.2f GB/s); no swap peaks at %s, swap reaches %s; each configuration the least step of %d "+
		"rounds\n", layers, steps, gbps, link/1e9, report.Bytes(all.NoSwapPeak), report.Bytes(all.LowestPeak), rounds)
	ms := func(ns int64) string { return time.Duration(ns).Round(100 * time.Microsecond).String() }
	exposed := func(c plan.Candidate) int64 { return max(measured[key(c)].LeastStepNS-still[span(c.Layers)], 0) }
	base := still[span(all.Profile.Indices())]
	fmt.Printf("  every layer declared, nothing swapped: step %s; the recording's: %s\n", ms(base), ms(all.Profile.StepNS))
	for _, frac := range []float64{0.4, 0.7} {
		budget := all.LowestPeak + uint64(frac*float64(all.NoSwapPeak-all.LowestPeak))
		p, err := plan.Search(prof, plan.Options{Budget: budget, PrefetchMax: 2, LinkBps: link})
		if err != nil {
			return err
		}
		if measured[key(p.Best)] == nil && len(p.Best.Layers) > 0 {
			// a set with gaps (the sweep runs ranges): measured here, under safe and under off
			m, err := plan.Measure(cli, "safe", p.Best, argv, io.Discard)
			if err != nil {
				return err
			}
			measured[key(p.Best)] = m
			if m, err = plan.Measure(cli, "off", p.Best, argv, io.Discard); err != nil {
				return err
			}
			still[span(p.Best.Layers)] = m.LeastStepNS
		}
		got := measured[key(p.Best)]
		var best plan.Candidate
		var bestM *plan.Check
		for _, c := range all.Ranked {
			if m := measured[key(c)]; m != nil && m.PeakBytes <= budget && (bestM == nil || m.LeastStepNS < bestM.LeastStepNS) {
				best, bestM = c, m
			}
		}
		if got == nil || bestM == nil {
			fmt.Printf("  budget %s: no measured configuration fits\n", report.Bytes(budget))
			continue
		}
		// The sweep ranks; the plan's choice and the sweep's best are then compared side by side: runs of
		// each in turn, with the plan's range under off between them, each the least step of its runs.
		pick, top, idle := int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64)
		for i := 0; i < pairs; i++ {
			for _, r := range []struct {
				policy string
				c      plan.Candidate
				least  *int64
			}{{"safe", p.Best, &pick}, {"off", p.Best, &idle}, {"safe", best, &top}} {
				if r.least == &top && key(best) == key(p.Best) {
					continue
				}
				m, err := plan.Measure(cli, r.policy, r.c, argv, io.Discard)
				if err != nil {
					return err
				}
				*r.least = min(*r.least, m.LeastStepNS)
			}
		}
		if key(best) == key(p.Best) {
			top = pick
		}
		fit := ""
		if got.PeakBytes > budget {
			fit = fmt.Sprintf(" (but its run peaked at %s, over the budget)", report.Bytes(got.PeakBytes))
		}
		fmt.Printf("  budget %s: plan layers %v prefetch %d: peak %s predicted, %s measured%s; the sweep's best "+
			"that fit: layers %v prefetch %d; side by side, %d runs each: step %s against %s (%+.1f%%); exposed "+
			"transfer predicted %s, measured %s a step (%s; in the sweep %s)\n", report.Bytes(budget), p.Best.Layers,
			p.Best.Prefetch, report.Bytes(p.Best.PeakBytes), report.Bytes(got.PeakBytes), fit, best.Layers,
			best.Prefetch, pairs, ms(pick), ms(top), 100*(float64(pick)-float64(top))/float64(top),
			ms(p.Best.ExposedNS), ms(pick-idle), relErr(p.Best.ExposedNS, pick-idle), ms(exposed(p.Best)))
	}
	// The model over the whole sweep, where the transfer is a tenth of the step or more (below that the
	// measurement is the machine's noise).
	var errs []float64
	for _, c := range all.Ranked {
		m := measured[key(c)]
		if m == nil || len(c.Layers) == 0 {
			continue
		}
		if verbose {
			fmt.Printf("    layers %v prefetch %d: peak %s predicted, %s measured; exposed transfer predicted %s, "+
				"measured %s (%s)\n", c.Layers, c.Prefetch, report.Bytes(c.PeakBytes), report.Bytes(m.PeakBytes),
				ms(c.ExposedNS), ms(exposed(c)), relErr(c.ExposedNS, exposed(c)))
		}
		if exposed(c) >= base/10 {
			errs = append(errs, math.Abs(float64(c.ExposedNS-exposed(c)))/float64(exposed(c)))
		}
	}
	if len(errs) > 0 {
		sort.Float64s(errs)
		fmt.Printf("  model over the sweep: %d configurations exposing a tenth of the step or more: predicted "+
			"exposed transfer off the measured by %.0f%% (median), %.0f%% (nine in ten)\n", len(errs),
			100*errs[len(errs)/2], 100*errs[len(errs)*9/10])
	}
	return nil
}

// relErr is the prediction's error against the measurement, in per cent of it.
func relErr(pred, got int64) string {
	if got == 0 {
		return "nothing measured"
	}
	return fmt.Sprintf("prediction %+.0f%%", 100*(float64(pred)-float64(got))/float64(got))
}
