// Command swapbench is `make bench-swap`: it runs decoder-sim under the preloaded agent with policy off
// and safe, reads each run back through `swapagent report --format json` and the trace, and prints the
// swap figures against their ideals: bytes moved per step, device bytes saved, and with the emulator's
// copy engine throttled, the share of the transfer time the compute streams stalled on the agent's copies,
// measured on the device timeline (prefetch 1, and prefetch 0 for contrast). It does so with the host
// synchronizing only where it reads results (--sync step, the realistic mode) and, next to it, after
// every kernel (--sync op). Figures only: it never asserts.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"swapagent/trace"
)

type options struct {
	lib, sim, cli      string
	steps, hidden      int
	syncs              []string
	layers, swapLayers string
	gbps               float64
	timeout            time.Duration
}

// stats is what the bench reads from one process of the report JSON.
type stats struct {
	OffloadedStorages uint64 `json:"offloaded_storages"`
	OffloadedBytes    uint64 `json:"offloaded_bytes"`
	RestoredBytes     uint64 `json:"restored_bytes"`
	ReleasedExternal  uint64 `json:"released_external"`
	PeakDeviceBytes   uint64 `json:"peak_device_bytes"`
	Faults            []json.RawMessage
	AgentStats        trace.Stats `json:"agent_stats"` // the trace's stats record, verbatim
}

// runResult is one decoder-sim run.
type runResult struct {
	name      string
	st        stats
	internal  map[string]uint64 // final-internal saved bytes per group, all steps
	steps     []string          // decoder-sim's step lines
	msPerStep float64
	poolPeak  string
	wall      time.Duration
}

func main() {
	var o options
	fs := pflag.NewFlagSet("swapbench", pflag.ContinueOnError)
	fs.StringVar(&o.lib, "lib", "build/lib/libswapagent.so", "the agent library")
	fs.StringVar(&o.sim, "sim", "build/bin/decoder-sim", "the decoder workload")
	fs.StringVar(&o.cli, "cli", "build/bin/swapagent", "the swapagent command")
	fs.IntVar(&o.steps, "steps", 3, "training steps per run")
	fs.IntVar(&o.hidden, "hidden", 32, "decoder-sim --hidden (larger activations make transfers measurable)")
	fs.StringVar(&o.layers, "layers", "12", "decoder-sim --layers")
	fs.StringVar(&o.swapLayers, "swap-layers", "0-10", "decoder-sim --swap-layers")
	fs.Float64Var(&o.gbps, "gbps", 25, "ACLSIM_COPY_GBPS of the throttled runs")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "limit per run")
	fs.StringSliceVar(&o.syncs, "sync", []string{"step", "op"}, "decoder-sim --sync modes to measure, in order")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	for _, p := range []*string{&o.lib, &o.sim, &o.cli} {
		abs, err := filepath.Abs(*p)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "swapbench: %s: %v (run make build)\n", *p, err)
			os.Exit(2)
		}
		*p = abs
	}
	for _, sync := range o.syncs {
		if err := bench(o, sync); err != nil {
			fmt.Fprintln(os.Stderr, "swapbench:", err)
			os.Exit(1)
		}
	}
}

func bench(o options, sync string) error {
	gb := strconv.FormatFloat(o.gbps, 'g', -1, 64)
	type cfg struct {
		name, policy, prefetch, gbps string
	}
	cfgs := []cfg{
		{trace.PolicyOff, trace.PolicyOff, "1", ""},
		{trace.PolicySafe, trace.PolicySafe, "1", ""},
		{"safe prefetch 1 @" + gb + " GB/s", trace.PolicySafe, "1", gb},
		{"safe prefetch 0 @" + gb + " GB/s", trace.PolicySafe, "0", gb},
	}
	res := make([]*runResult, len(cfgs))
	for i, c := range cfgs {
		r, err := runOne(o, sync, c.name, c.policy, c.prefetch, c.gbps)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		res[i] = r
	}
	off, safe := res[0], res[1]
	steps := float64(o.steps)

	// The ideal comes from the ownership model: the bytes of every save whose final reason is internal
	// (duplicates excluded: a storage saved twice moves once), per step; each crosses the link once out
	// and once back.
	var internal, largest uint64
	for _, b := range safe.internal {
		internal += b
		largest = max(largest, b)
	}
	internalStep := float64(internal) / steps
	largestStep := float64(largest) / steps
	fmt.Printf("== swap: decoder-sim --sync %s --layers %s --swap-layers %s --hidden %d --steps %d (seq 4096, rope-dim 64)\n",
		sync, o.layers, o.swapLayers, o.hidden, o.steps)
	for _, r := range res {
		fmt.Printf("   %-26s %8.1f ms/step  %s  (run %.1f s)\n", r.name, r.msPerStep, r.poolPeak, r.wall.Seconds())
	}
	same := "identical"
	for _, r := range res[1:] {
		if strings.Join(r.steps, "\n") != strings.Join(off.steps, "\n") || len(off.steps) == 0 {
			same = "DIFFERENT in " + r.name
		}
	}
	fmt.Printf("   step lines (loss, grad_norm) of every run against policy off: %s\n", same)
	fmt.Printf("   safe: released_external %d, faults %d, errors %d; internal saved bytes per step %s in %d groups, largest group %s\n",
		safe.st.ReleasedExternal, len(safe.st.Faults), safe.st.AgentStats.Errors, mib(internalStep), len(safe.internal),
		mib(largestStep))

	fmt.Println("-- bytes moved per step (offloaded + restored) / steps; ideal = 2 x internal saved bytes per step")
	moved := float64(safe.st.OffloadedBytes+safe.st.RestoredBytes) / steps
	fmt.Printf("   moved %s (out %s, in %s); ideal %s; moved/ideal %.3f\n", mib(moved),
		mib(float64(safe.st.OffloadedBytes)/steps), mib(float64(safe.st.RestoredBytes)/steps), mib(2*internalStep),
		ratio(moved, 2*internalStep))

	fmt.Println("-- device bytes saved = peak_device_bytes(off) - peak_device_bytes(safe), runtime allocations;")
	fmt.Println("   ideal = internal bytes per step - (1 + prefetch) x largest group's internal bytes (the groups in flight)")
	saved := float64(off.st.PeakDeviceBytes) - float64(safe.st.PeakDeviceBytes)
	ideal := internalStep - 2*largestStep
	fmt.Printf("   peak off %s, peak safe %s: saved %s; ideal %s; saved/ideal %.3f\n", mib(float64(off.st.PeakDeviceBytes)),
		mib(float64(safe.st.PeakDeviceBytes)), mib(saved), mib(ideal), ratio(saved, ideal))

	// Exposed transfer on the device timeline: the time the job's streams stalled in the waits the agent
	// put on them for its copies back, against the time the copies held the mover's stream (both from events
	// around them; see docs/design.md, "Stream ordering"). The host's own blocking is
	// shown beside it: at each region exit for the previous group's copies out (the release needs them).
	fmt.Println("-- exposed transfer = device_stall_ns / device_copy_ns: the compute streams' stall on the agent's events,")
	fmt.Println("   against the copies' measured time on the device (" + gb + " GB/s link). Target with prefetch 1: <= 10%.")
	fmt.Println("   host = host time blocked on the agent's copies (out: completing the previous group's offload; in: none expected);")
	fmt.Println("   with --sync step the host runs ahead of the device, so its wait for a copy out is mostly the device catching up")
	for _, r := range res[2:] {
		w := r.st.AgentStats
		fmt.Printf("   %-26s moved %s, copies %.1f ms on device; streams stalled %.1f ms: exposed %.1f%%; host blocked %.1f ms (out %.1f, in %.1f)\n",
			r.name, mib(float64(r.st.OffloadedBytes+r.st.RestoredBytes)), float64(w.DeviceCopyNS)/1e6,
			float64(w.DeviceStallNS)/1e6, 100*ratio(float64(w.DeviceStallNS), float64(w.DeviceCopyNS)),
			float64(w.WaitNS)/1e6, float64(w.OffloadWaitNS)/1e6, float64(w.RestoreWaitNS)/1e6)
	}
	w := safe.st.AgentStats
	fmt.Printf("   (unthrottled safe run for reference: copies %.1f ms, stalled %.1f ms, host blocked %.1f ms)\n",
		float64(w.DeviceCopyNS)/1e6, float64(w.DeviceStallNS)/1e6, float64(w.WaitNS)/1e6)
	return nil
}

var (
	msPerStep = regexp.MustCompile(`([0-9.]+) ms/step`)
	poolPeak  = regexp.MustCompile(`pool peak [^;\n]*`)
)

func runOne(o options, sync, name, policy, prefetch, gbps string) (*runResult, error) {
	dir, err := os.MkdirTemp("", "swapbench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.sim, "--steps", strconv.Itoa(o.steps), "--hidden", strconv.Itoa(o.hidden),
		"--layers", o.layers, "--swap-layers", o.swapLayers, "--sync", sync)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWAPAGENT_") && !strings.HasPrefix(kv, "LD_PRELOAD=") && !strings.HasPrefix(kv, "ACLSIM_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LD_PRELOAD="+o.lib, "SWAPAGENT_OUT="+dir, "SWAPAGENT_POLICY="+policy, "SWAPAGENT_PREFETCH="+prefetch)
	if gbps != "" {
		env = append(env, "ACLSIM_COPY_GBPS="+gbps)
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("decoder-sim: %v\n%s", err, lastLines(stderr.String(), 8))
	}
	r := &runResult{name: name, wall: time.Since(t0)}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, "step ") {
			r.steps = append(r.steps, l)
		}
	}
	if m := msPerStep.FindStringSubmatch(stderr.String()); m != nil {
		r.msPerStep, _ = strconv.ParseFloat(m[1], 64)
	}
	r.poolPeak = poolPeak.FindString(stderr.String())

	rctx, rcancel := context.WithTimeout(context.Background(), o.timeout)
	defer rcancel()
	out, err := exec.CommandContext(rctx, o.cli, "report", "--format", "json", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("swapagent report: %v", err)
	}
	var rep struct {
		Processes []stats `json:"processes"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Processes) != 1 {
		return nil, fmt.Errorf("swapagent report: want one process, got %d (%v)", len(rep.Processes), err)
	}
	r.st = rep.Processes[0]
	if r.internal, err = internalBytes(dir); err != nil {
		return nil, err
	}
	return r, nil
}

// internalBytes sums, per group, the bytes of the handles whose last classification (a reclassify can
// follow) is internal.
func internalBytes(dir string) (map[string]uint64, error) {
	files, err := trace.FindTraces(dir)
	if err != nil || len(files) != 1 {
		return nil, fmt.Errorf("want one trace in %s, got %v (%v)", dir, files, err)
	}
	_, evs, err := trace.ReadFile(files[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files[0], err)
	}
	names := map[uint32]string{}
	type cls struct {
		group  string
		size   uint64
		reason uint64
	}
	last := map[int64]cls{}
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case trace.KindGroup:
			names[ev.Group] = ev.Text
		case trace.KindClassify:
			last[ev.Handle] = cls{names[ev.Group], ev.Args[1], ev.Args[2]}
		}
	}
	per := map[string]uint64{}
	for _, c := range last {
		if c.reason == 0 {
			per[c.group] += c.size
		}
	}
	return per, nil
}

func mib(b float64) string { return fmt.Sprintf("%.2f MiB", b/(1<<20)) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
