// Command planbench checks `swapagent plan`'s choice and time model against real runs (make bench-plan).
// decoder-sim on a throttled emulated link (ACLSIM_COPY_GBPS) is recorded under off a few times (the
// recording of least step is the profile), the link is measured on a run that swaps every layer, then every
// contiguous range of layers with prefetch 0-2 is run for real, in rounds that each begin with a run that
// swaps nothing (every layer declared under off, as the recording: the baseline). A configuration's step is
// the least of its rounds (a shared machine only ever slows a run down), and its measured exposed transfer
// is that step less the baseline's. For each budget it prints the plan's choice and what it measured beside
// the best configuration of the sweep that fit, and the predicted exposed transfer beside the measured one;
// then the model's error over the whole sweep. A configuration fits when its run peaked within the budget
// (no tolerance: the plan's own run is held to the same). Figures, never assertions: `go run ./cmd/planbench`
// from the repository root after `make build`.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"swapagent/plan"
	"swapagent/report"
	"swapagent/trace"
)

func main() {
	cli := flag.String("cli", "build/bin/swapagent", "the swapagent command")
	sim := flag.String("sim", "build/bin/decoder-sim", "decoder-sim")
	layers := flag.Int("layers", 6, "decoder-sim's layers")
	steps := flag.Int("steps", 6, "steps of each run")
	rounds := flag.Int("rounds", 3, "runs of each configuration")
	gbps := flag.String("gbps", "0.25", "the emulated link's rate (ACLSIM_COPY_GBPS)")
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
	moving, err := record("link", "safe")
	if err != nil {
		return err
	}
	link := plan.MeasuredLink(moving)
	// The profile: the recording of least step of a few (its layer times are what the model runs on).
	var prof *trace.File
	var all *plan.Plan
	for r := 0; r < rounds; r++ {
		f, err := record(fmt.Sprint("profile", r), "off")
		if err != nil {
			return err
		}
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
		"rounds, each round after a run that swaps nothing\n", layers, steps, gbps, link/1e9,
		report.Bytes(all.NoSwapPeak), report.Bytes(all.LowestPeak), rounds)
	measured := map[string]*plan.Check{}
	key := func(c plan.Candidate) string { return fmt.Sprint(c.Layers, c.Prefetch) }
	var base int64 = math.MaxInt64
	for r := 0; r < rounds; r++ {
		every := plan.Candidate{Layers: all.Profile.Indices()}
		m, err := plan.Measure(cli, "off", every, argv, io.Discard)
		if err != nil {
			return err
		}
		base = min(base, m.StepNS)
		for _, c := range all.Ranked {
			if len(c.Layers) == 0 {
				continue
			}
			m, err := plan.Measure(cli, "safe", c, argv, io.Discard)
			if err != nil {
				return err
			}
			if old := measured[key(c)]; old == nil || m.StepNS < old.StepNS {
				measured[key(c)] = m
			}
		}
	}
	ms := func(ns int64) string { return time.Duration(ns).Round(100 * time.Microsecond).String() }
	exposed := func(m *plan.Check) int64 { return max(m.StepNS-base, 0) }
	fmt.Printf("  the baseline's step (nothing swapped): %s; the recording's: %s\n", ms(base), ms(all.Profile.StepNS))
	for _, frac := range []float64{0.4, 0.7} {
		budget := all.LowestPeak + uint64(frac*float64(all.NoSwapPeak-all.LowestPeak))
		p, err := plan.Search(prof, plan.Options{Budget: budget, PrefetchMax: 2, LinkBps: link})
		if err != nil {
			return err
		}
		got := measured[key(p.Best)]
		var best plan.Candidate
		var bestM *plan.Check
		for _, c := range all.Ranked {
			if m := measured[key(c)]; m != nil && m.PeakBytes <= budget && (bestM == nil || m.StepNS < bestM.StepNS) {
				best, bestM = c, m
			}
		}
		if got == nil || bestM == nil {
			fmt.Printf("  budget %s: no measured configuration fits\n", report.Bytes(budget))
			continue
		}
		fit := ""
		if got.PeakBytes > budget {
			fit = fmt.Sprintf(" (but its run peaked at %s, over the budget)", report.Bytes(got.PeakBytes))
		}
		fmt.Printf("  budget %s: plan layers %v prefetch %d: peak %s predicted, %s measured%s; step %s measured, "+
			"%+.1f%% against the sweep's best that fit (layers %v prefetch %d, %s); exposed transfer predicted %s, "+
			"measured %s a step (%s)\n", report.Bytes(budget), p.Best.Layers, p.Best.Prefetch, report.Bytes(p.Best.PeakBytes),
			report.Bytes(got.PeakBytes), fit, ms(got.StepNS),
			100*(float64(got.StepNS)-float64(bestM.StepNS))/float64(bestM.StepNS), best.Layers, best.Prefetch,
			ms(bestM.StepNS), ms(p.Best.ExposedNS), ms(exposed(got)), relErr(p.Best.ExposedNS, exposed(got)))
	}
	// The model over the whole sweep, where the transfer is a tenth of the step or more (below that the
	// measurement is the machine's noise).
	var errs []float64
	for _, c := range all.Ranked {
		if m := measured[key(c)]; m != nil && len(c.Layers) > 0 && exposed(m) >= base/10 {
			errs = append(errs, math.Abs(float64(c.ExposedNS-exposed(m)))/float64(exposed(m)))
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
