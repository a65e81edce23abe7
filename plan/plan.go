// Package plan turns a recorded run into the swap configuration that fits a device-memory budget at the
// least cost (`swapagent plan`). The recording is a profile: every candidate layer declared, nothing
// released (policy off). Each candidate configuration (a contiguous range of layers swapped, or a set with
// gaps (sets.go), and a prefetch depth) is simulated with replay's engine (the same offload.Engine and
// timeline fold as `replay`, no second memory model) for its peak device bytes and the bytes it moves; its
// time is modelled from the recording itself: each layer's recorded forward and backward time and the
// link's bandwidth (given with --link, else measured from recorded copies). docs/plan.md says what it models and what it cannot see.
package plan

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"swapagent/offload"
	"swapagent/pool"
	"swapagent/replay"
	"swapagent/report"
	"swapagent/timeline"
	"swapagent/trace"
)

// DefaultLink is the link's bandwidth in bytes per second when the recording measured none and --link is not
// given: a PCIe 4.0 x16 host link's practical rate, which Ascend 910 cards use.
const DefaultLink = 25e9

// assumedLink says the link's rate is DefaultLink's.
const assumedLink = "assumed (no copy recorded; --link sets it)"

// Layer is one candidate layer: a group the recording declared, in forward order.
type Layer struct {
	Index      int    `json:"index"`       // its number in the model (the group name's trailing number, else its position)
	Group      string `json:"group"`       // its group
	ForwardNS  int64  `json:"forward_ns"`  // its forward region's recorded time, median over the steps
	BackwardNS int64  `json:"backward_ns"` // its backward's recorded time, median over the steps
	// The job's own copies (aclrtMemcpyAsync) after its forward and after its backward, up to the next
	// layer's, in bytes per step to the host and to the device: they share the link with swap's.
	CopiesAfterForward  [2]uint64 `json:"copies_after_forward_bytes"`
	CopiesAfterBackward [2]uint64 `json:"copies_after_backward_bytes"`
	// SavedBytes is what its forward saved a step (its saves' sizes), to compare a run with the profile.
	SavedBytes uint64 `json:"saved_bytes_per_step"`
	// BackwardKernels is the kernels its backward launched (median over the steps): MindFormers' graph mode
	// counts its backward_prefetch in operators.
	BackwardKernels int64 `json:"backward_kernels"`
	// Undeclared: a layer of the model the recording did not declare (Options.NumLayers beyond the
	// declared): never a candidate; its times are the declared layers' medians, for the time model.
	Undeclared bool `json:"undeclared,omitempty"`
}

// Profile is what the recording says a plan needs beyond the simulation.
type Profile struct {
	Layers []Layer
	Steps  int   // the first layer's region enters
	StepNS int64 // a step's recorded time: the median between the first layer's region enters
	// LinkBps is the copies' bandwidth in bytes per second; LinkFrom says where it came from ("--link",
	// "measured from N copies", or "assumed").
	LinkBps  float64
	LinkFrom string
	// LaunchesPerStep is the kernels the job launched a step (between step starts after the first), to
	// compare a run with the profile: another layer count launches another number.
	LaunchesPerStep float64
	// What makes a recording no profile (Search refuses it; see usable): the policy it was recorded under,
	// the bytes it moved (copied out and back), its fault records and the first one's kernel.
	Policy     string
	MovedBytes uint64
	Faults     int
	FirstFault string
	// NumLayers is the model's layer count (MindFormers' num_layers): Options.NumLayers, else the highest
	// declared index plus one.
	NumLayers int
	// JobSwaps: the job's own swap moves the layers (the guard declared them), wired as MindFormers'
	// apply_swap wires it: layer i with layer i + prefetch, which must be a layer of the model.
	JobSwaps bool
	// steps are the recorded steps' own times, the first left out, for the time model (timemodel.go); nil
	// when the layers' spans do not line up step by step (the model then runs one step of the medians).
	steps []stepTimes
	// sched: when the recording's pool blocks end (pool.Schedule), found once for every simulation.
	sched *pool.Schedule
}

// Indices are the recorded layers' indices, in forward order.
func (p *Profile) Indices() []int {
	out := make([]int, len(p.Layers))
	for i, l := range p.Layers {
		out[i] = l.Index
	}
	return out
}

// Candidate is one configuration and what the model predicts for it.
type Candidate struct {
	Layers    []int  `json:"swap_layers"` // layer indices swapped, ascending; empty: none
	Prefetch  int    `json:"prefetch"`
	PeakBytes uint64 `json:"predicted_peak_bytes"`
	// MovedBytes is the bytes copied out and back per step; ExposedNS the transfer time per step the model
	// finds not hidden behind the layers' compute.
	MovedBytes uint64 `json:"bytes_moved_per_step"`
	ExposedNS  int64  `json:"predicted_exposed_ns"`
	Fits       bool   `json:"fits"`
	// Released is the bytes the simulation released per argument the storage was passed as (replay's
	// ReleasedByArg): what the configuration would take from the layers, over the recorded steps.
	Released map[string]uint64 `json:"released_bytes_by_argument"`
	// Recompute: the layers are recomputed in full instead of swapped (Options.Recompute): nothing moves,
	// and each layer's forward runs again in its backward.
	Recompute bool `json:"recompute"`
}

// Plan is the search's outcome.
type Plan struct {
	Budget      uint64
	Feasible    bool
	Best        Candidate   // the cheapest that fits; when none does, the one of lowest peak
	Ranked      []Candidate // every candidate, best first
	NoSwapPeak  uint64      // the peak with nothing swapped
	LowestPeak  uint64      // the lowest peak any candidate reaches
	PoolStep    uint64      // the allocator's growth step the recording shows (tolerance of a measured peak)
	Footprint   string      // what the peaks count: replay's Result.Footprint ("device" or "saved")
	Profile     Profile
	Simulations int
	// Sets says how far the search of sets of layers with gaps went (searchSets); BestRange is the best
	// contiguous range that fits, which a set with gaps must beat (zero when none fits or sets were not
	// searched).
	Sets      string
	BestRange Candidate
	// mf is the MindFormers form written (--mode): forMindFormers (PyNative, Search's) or forMindFormersGraph.
	mf target
}

// Options are the search's settings.
type Options struct {
	Budget      uint64
	PrefetchMax int
	LinkBps     float64 // 0: measured from the recording, else DefaultLink
	// Recompute adds full recompute of each contiguous range as a candidate beside its swap.
	Recompute bool
	// NumLayers is the model's layer count when the recording declared fewer (MindFormers' profiling
	// recipe cannot declare its last layer); 0: the highest declared index plus one.
	NumLayers int
}

// Search plans for the recording f: every contiguous range of its layers, each with prefetch 0..PrefetchMax,
// then the sets with gaps (searchSets).
func Search(f *trace.File, opt Options) (*Plan, error) {
	prof, err := profile(f)
	if err != nil {
		return nil, err
	}
	if err := prof.usable(); err != nil {
		return nil, err
	}
	if opt.LinkBps > 0 {
		prof.LinkBps, prof.LinkFrom = opt.LinkBps, "--link"
	}
	if err := prof.extend(opt.NumLayers); err != nil {
		return nil, err
	}
	prof.sched = pool.ScheduleOf(timeline.ScanMeta(f.Events), f.Events)
	p := &Plan{Budget: opt.Budget, Profile: *prof, mf: forMindFormers}
	none := replay.Simulate(f.Header, f.Events, replay.Options{Policy: offload.PolicySafe,
		Swap: func(string) bool { return false }, Schedule: prof.sched})
	p.NoSwapPeak, p.PoolStep, p.Footprint = none.PeakSimulated, none.PoolStep, none.Footprint
	p.Ranked = append(p.Ranked, Candidate{Layers: []int{}, PeakBytes: none.PeakSimulated, Released: none.ReleasedByArg})
	p.Simulations = 1
	n := prof.declared()
	// A footprint of saved storages counts only what the declared layers saved: each layer the recording did
	// not declare is taken to save the declared layers' mean at the peak without swap (what they share,
	// counted once there, makes it err high), held at the end of the forward (the peak) by every candidate,
	// as none swaps it. (A device footprint holds their memory already.)
	var extra uint64
	if undeclared := len(prof.Layers) - n; undeclared > 0 && p.Footprint == "saved" {
		extra = uint64(undeclared) * (p.NoSwapPeak / uint64(max(n, 1)))
	}
	lowest := 0
	if prof.JobSwaps { // MindFormers' default_prefetch: the layer whose forward waits for the release
		lowest = 1
	}
	ranges := make([][2]int, 0, n*(n+1)/2)
	for a := 0; a < n; a++ {
		for b := a; b < n; b++ {
			ranges = append(ranges, [2]int{a, b})
		}
	}
	// Each range's simulations are independent (read-only recording and schedule): they run on every CPU,
	// and their candidates are added in range order, so the plan is the same whatever the CPU count.
	found, sims := make([][]Candidate, len(ranges)), make([]int, len(ranges))
	parallel(len(ranges), func(k int) {
		found[k], sims[k] = prof.rangeCandidates(f, ranges[k][0], ranges[k][1], lowest, opt)
	})
	for k := range ranges {
		p.Ranked = append(p.Ranked, found[k]...)
		p.Simulations += sims[k]
	}
	p.NoSwapPeak += extra
	for i := range p.Ranked {
		p.Ranked[i].PeakBytes += extra
	}
	if !prof.JobSwaps {
		p.searchSets(f, opt, extra)
	}
	p.LowestPeak = p.Ranked[0].PeakBytes
	for i := range p.Ranked {
		c := &p.Ranked[i]
		c.Fits = c.PeakBytes <= opt.Budget
		p.LowestPeak = min(p.LowestPeak, c.PeakBytes)
	}
	sort.SliceStable(p.Ranked, func(i, j int) bool { return better(p.Ranked[i], p.Ranked[j]) })
	p.Best, p.Feasible = p.Ranked[0], p.Ranked[0].Fits
	return p, nil
}

// rangeCandidates are the candidates of layers a..b (positions in Layers): each prefetch from lowest, and
// with Options.Recompute its full recompute; and how many simulations they took.
func (p *Profile) rangeCandidates(f *trace.File, a, b, lowest int, opt Options) ([]Candidate, int) {
	var out []Candidate
	var indices []int
	for i := a; i <= b; i++ {
		indices = append(indices, p.Layers[i].Index)
	}
	sims := 0
	var noPrefetch *replay.Result // shared by recompute and the swap without prefetch
	simulate := func(pf int) *replay.Result {
		if pf == 0 && noPrefetch != nil {
			return noPrefetch
		}
		sims++
		r := p.simulateSwap(f, positions(a, b), pf)
		if pf == 0 {
			noPrefetch = r
		}
		return r
	}
	if opt.Recompute {
		// What a swap without prefetch releases, recompute drops at the layer's exit and has back at its
		// backward enter: the same peak; its cost is each layer's forward, run again.
		r := simulate(0)
		c := Candidate{Recompute: true, Layers: slices.Clone(indices), PeakBytes: r.PeakSimulated,
			Released: r.ReleasedByArg}
		for i := a; i <= b; i++ {
			c.ExposedNS += p.Layers[i].ForwardNS
		}
		out = append(out, c)
	}
	for pf := lowest; pf <= max(opt.PrefetchMax, lowest); pf++ {
		if p.JobSwaps && p.Layers[b].Index+pf >= p.NumLayers {
			break // layer b + pf is not in the model: the job's wiring would fail
		}
		out = append(out, p.swapCandidate(simulate(pf), positions(a, b), pf))
	}
	return out, sims
}

// parallel runs do(0..n-1) on as many goroutines as the process may run at once, and returns when all are
// done.
func parallel(n int, do func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1)) - 1; k < n; k = int(next.Add(1)) - 1 {
				do(k)
			}
		}()
	}
	wg.Wait()
}

// positions are a, a+1, ..., b.
func positions(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

// swapCandidate is the candidate swapping the layers at positions (in Layers) with prefetch pf, from its
// simulation r: its peak, the bytes each layer moved a step, and the exposed transfer they cost.
func (p *Profile) swapCandidate(r *replay.Result, at []int, pf int) Candidate {
	c := Candidate{Layers: []int{}, Prefetch: pf, PeakBytes: r.PeakSimulated, Released: r.ReleasedByArg}
	moved := make([]uint64, len(p.Layers)) // bytes per step of each layer
	for _, i := range at {
		c.Layers = append(c.Layers, p.Layers[i].Index)
		if r.Stats != nil {
			moved[i] = r.Stats.Groups[p.Layers[i].Group].OffloadedBytes / uint64(max(p.Steps, 1))
		}
		c.MovedBytes += 2 * moved[i]
	}
	c.ExposedNS = p.exposed(moved, pf)
	return c
}

// simulateSwap simulates the recording with the layers at positions swapped, prefetch pf, under safe.
func (p *Profile) simulateSwap(f *trace.File, at []int, pf int) *replay.Result {
	swapped := map[string]bool{}
	for _, i := range at {
		swapped[p.Layers[i].Group] = true
	}
	return replay.Simulate(f.Header, f.Events, replay.Options{Policy: offload.PolicySafe, Prefetch: pf, Schedule: p.sched, NoSwapKnown: true,
		PrefetchSet: true, Swap: func(g string) bool { return swapped[g] }})
}

// better orders candidates: those that fit first, by exposed transfer, then bytes moved, then fewer layers
// and a shallower prefetch; those that do not fit by their peak.
func better(a, b Candidate) bool {
	if a.Fits != b.Fits {
		return a.Fits
	}
	if !a.Fits {
		if a.PeakBytes != b.PeakBytes {
			return a.PeakBytes < b.PeakBytes
		}
		return a.ExposedNS < b.ExposedNS
	}
	if a.ExposedNS != b.ExposedNS {
		return a.ExposedNS < b.ExposedNS
	}
	if a.MovedBytes != b.MovedBytes {
		return a.MovedBytes < b.MovedBytes
	}
	if len(a.Layers) != len(b.Layers) {
		return len(a.Layers) < len(b.Layers)
	}
	return a.Prefetch < b.Prefetch
}

// usable refuses a recording that is no profile: one with faults (a faulted run's saves and times are not
// the job's: its backward may never have run), or one whose policy moved data (its layer times include the
// transfer it waited for, which the time model would then count twice; its own measured link is given in
// the refusal, for --link).
func (p *Profile) usable() error {
	switch {
	case p.Faults > 0:
		return fmt.Errorf("the recording has %d fault record(s) (the first at %s): a faulted run is no profile; "+
			"record one that runs clean under --policy off", p.Faults, p.FirstFault)
	case p.MovedBytes > 0:
		link := ""
		if p.LinkFrom != assumedLink {
			link = fmt.Sprintf(", and give the link it measured with --link %.4g", p.LinkBps/1e9)
		}
		return fmt.Errorf("the recording was made under policy %s, which moved %s: its layer times include the "+
			"transfer; record the profile under --policy off%s", p.Policy, report.Bytes(p.MovedBytes), link)
	}
	return nil
}

// differs names how a run's recording (run) differs from the profile's job, or "" when it does not: a layer
// the run declared that the profile did not, a layer that saved other bytes a step (another shape), or
// another number of kernels launched a step (other layers).
func (p *Profile) differs(run *Profile) string {
	byGroup := map[string]Layer{}
	for _, l := range p.Layers {
		if !l.Undeclared {
			byGroup[l.Group] = l
		}
	}
	off := func(a, b float64) bool { return a > 1.01*b || b > 1.01*a }
	for _, l := range run.Layers {
		want, ok := byGroup[l.Group]
		switch {
		case !ok:
			return fmt.Sprintf("the run declared layer %q, which the profile did not", l.Group)
		case off(float64(l.SavedBytes), float64(want.SavedBytes)):
			return fmt.Sprintf("layer %q saved %s a step, %s in the profile: other shapes", l.Group,
				report.Bytes(l.SavedBytes), report.Bytes(want.SavedBytes))
		}
	}
	if p.LaunchesPerStep > 0 && run.LaunchesPerStep > 0 && off(run.LaunchesPerStep, p.LaunchesPerStep) {
		return fmt.Sprintf("the run launched %.0f kernels a step, the profile %.0f: other layers", run.LaunchesPerStep,
			p.LaunchesPerStep)
	}
	return ""
}

// declared is the number of layers the recording declared (the first of Layers; undeclared ones follow).
func (p *Profile) declared() int {
	n := 0
	for _, l := range p.Layers {
		if !l.Undeclared {
			n++
		}
	}
	return n
}

// extend sets the model's layer count: numLayers, or 0 for the highest declared index plus one. Layers the
// recording did not declare (MindFormers' profiling recipe cannot declare its last one: every listed layer i
// needs layer i + default_prefetch) are appended after the declared ones with the declared layers' median
// forward and backward times and none of their copies, for the time model; their memory is in the
// recording already (declared or not, a layer's saves are allocated and held), and they are never swapped.
func (p *Profile) extend(numLayers int) error {
	top := 0
	for _, l := range p.Layers {
		top = max(top, l.Index+1)
	}
	if numLayers == 0 {
		p.NumLayers = top
		return nil
	}
	if numLayers < top {
		return fmt.Errorf("--num-layers %d: the recording declares layer %d", numLayers, top-1)
	}
	p.NumLayers = numLayers
	var fwd, bwd, kernels []int64
	for _, l := range p.Layers {
		fwd, bwd, kernels = append(fwd, l.ForwardNS), append(bwd, l.BackwardNS), append(kernels, l.BackwardKernels)
	}
	for i := top; i < numLayers; i++ {
		// median leaves the first value out as a warm-up: prepend one it can drop
		p.Layers = append(p.Layers, Layer{Index: i, Group: "", Undeclared: true,
			ForwardNS: median(append([]int64{0}, fwd...)), BackwardNS: median(append([]int64{0}, bwd...)),
			BackwardKernels: median(append([]int64{0}, kernels...))})
	}
	return nil
}

// profile reads the layers, their times and the link's rate from the recording.
func profile(f *trace.File) (*Profile, error) {
	tl := timeline.Fold(f.Header, f.Events, timeline.Options{NoSeries: true})
	type times struct {
		spans   [2][]int64   // forward (region enter to exit), backward (backward enter to exit)
		enters  [2][]int64   // when each of those spans began
		copies  [2][2]uint64 // after forward, after backward; to host, to device (steps after the first)
		saved   uint64       // bytes its forward saved, over the steps
		kernels []int64      // kernels each backward launched
	}
	var launches []int64 // when each kernel was launched
	per := map[uint32]*times{}
	var order []uint32
	opened := [2]map[uint32]int64{{}, {}} // forward, backward: when each group's open span began
	launched := map[uint32]int64{}        // kernels launched in each open backward
	var last *times                       // the layer whose forward or backward the job's copies follow
	lastPhase, steps := 0, 0
	for i := range f.Events {
		ev := &f.Events[i]
		phase := 0
		switch ev.Kind {
		case trace.KindRegionEnter, trace.KindBackwardEnter:
			if ev.Kind == trace.KindBackwardEnter {
				phase = 1
			} else if per[ev.Group] == nil {
				per[ev.Group] = &times{}
				order = append(order, ev.Group)
			}
			if phase == 0 && ev.Group == order[0] {
				steps++
			}
			opened[phase][ev.Group] = ev.TS
			if phase == 1 {
				launched[ev.Group] = 0
			}
			if per[ev.Group] != nil {
				last, lastPhase = per[ev.Group], phase
			}
		case trace.KindRegionExit, trace.KindBackwardExit:
			if ev.Kind == trace.KindBackwardExit {
				phase = 1
			}
			if at, ok := opened[phase][ev.Group]; ok && per[ev.Group] != nil {
				per[ev.Group].spans[phase] = append(per[ev.Group].spans[phase], ev.TS-at)
				per[ev.Group].enters[phase] = append(per[ev.Group].enters[phase], at)
				delete(opened[phase], ev.Group)
				if phase == 1 {
					per[ev.Group].kernels = append(per[ev.Group].kernels, launched[ev.Group])
				}
			}
		case trace.KindSave:
			if t := per[ev.Group]; t != nil {
				t.saved += ev.Args[1]
			}
		case trace.KindCall:
			if ev.Ret == 0 && tl.Class(ev.Fn) == trace.ClassLaunch {
				launches = append(launches, ev.TS)
				for g := range opened[1] {
					launched[g]++
				}
			}
			// aclrtMemcpyAsync: Args dst, src, count, kind (1 to the device, 2 to the host)
			if kind := ev.Args[3]; last != nil && steps > 1 && ev.Ret == 0 && (kind == 1 || kind == 2) &&
				tl.Class(ev.Fn) == trace.ClassCopyAsync {
				last.copies[lastPhase][2-kind] += ev.Args[2]
			}
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("the trace declares no layer (no region_enter): record with every candidate " +
			"layer declared (docs/plan.md)")
	}
	// The link's rate: the bytes of the agent's timed copies over the time they held its stream (its stats:
	// the runtime mover times them with events). A copy's states in the trace say when the engine saw it
	// end, which is later (it waits for a group's copies at the next group's exit), so they are not used.
	p := &Profile{LinkBps: DefaultLink, LinkFrom: assumedLink, JobSwaps: len(tl.Guard.Groups) > 0,
		Policy: tl.Meta[trace.MetaPolicy], Faults: len(tl.Faults)}
	if len(tl.Faults) > 0 {
		p.FirstFault = fmt.Sprintf("kernel %q", tl.Faults[0].Record.Kernel)
	}
	var st trace.Stats
	if tl.HasStats && json.Unmarshal(tl.StatsJSON, &st) == nil {
		p.MovedBytes = st.OffloadedBytes + st.RestoredBytes
	} else { // a killed run wrote no stats: its state changes say what it moved
		p.MovedBytes = tl.Moved.ReleasedBytes + tl.Moved.RestoredBytes
	}
	if len(tl.Steps) >= 2 { // launches between the second step's start and the last's, a step
		from, to := tl.Steps[min(1, len(tl.Steps)-2)], tl.Steps[len(tl.Steps)-1]
		n := 0
		for _, ts := range launches {
			if ts >= from && ts < to {
				n++
			}
		}
		p.LaunchesPerStep = float64(n) / float64(len(tl.Steps)-1-min(1, len(tl.Steps)-2))
	}
	if tl.HasStats && st.DeviceCopyNS > 0 {
		bytes := st.DeviceCopyBytes
		if bytes == 0 { // a trace from before the stats counted them: every copy, timed or not
			bytes = st.OffloadedBytes + st.RestoredBytes
		}
		if bytes > 0 {
			p.LinkBps = float64(bytes) / (float64(st.DeviceCopyNS) / 1e9)
			p.LinkFrom = fmt.Sprintf("measured: %d copied bytes in %v of device copies", bytes,
				time.Duration(st.DeviceCopyNS).Round(time.Microsecond))
		}
	}
	for pos, g := range order {
		name := tl.GroupName(g)
		l := Layer{Index: pos, Group: name, ForwardNS: median(per[g].spans[0]), BackwardNS: median(per[g].spans[1]),
			SavedBytes: per[g].saved / uint64(max(len(per[g].spans[0]), 1)), BackwardKernels: median(per[g].kernels)}
		for dir := range 2 {
			l.CopiesAfterForward[dir] = per[g].copies[0][dir] / uint64(max(steps-1, 1))
			l.CopiesAfterBackward[dir] = per[g].copies[1][dir] / uint64(max(steps-1, 1))
		}
		if dot := strings.LastIndexAny(name, "._"); dot >= 0 {
			if n, err := strconv.Atoi(name[dot+1:]); err == nil && n >= 0 {
				l.Index = n
			}
		}
		p.Layers = append(p.Layers, l)
	}
	p.Steps = len(per[order[0]].spans[0])
	p.StepNS = stepNS(tl.Steps)
	var enters, spans [2][][]int64
	for _, g := range order {
		for ph := range 2 {
			enters[ph] = append(enters[ph], per[g].enters[ph])
			spans[ph] = append(spans[ph], per[g].spans[ph])
		}
	}
	p.steps = recordedSteps(enters, spans)
	return p, nil
}

// stepNS is a run's step time from the starts of its steps (timeline.Steps): the median of the gaps
// between them.
func stepNS(starts []int64) int64 {
	gaps := []int64{0} // median leaves the first value out
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i]-starts[i-1])
	}
	return median(gaps)
}

// median of the values after the first (a first step warms caches and allocators), or of all with one.
func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	if len(v) > 1 {
		v = v[1:]
	}
	s := append([]int64(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
