// timemodel.go owns the plan's time model: the transfer a configuration cannot hide behind the job's own
// time, as the agent's engine (offload.Engine) schedules its copies on the runtime mover's one stream, run
// over each recorded step's own times.
package plan

import (
	"slices"

	"swapagent/trace"
)

// stepTimes are one recorded step's times, per declared layer in forward order: its forward (region enter
// to exit), the gap from that exit to the next layer's region enter (the last layer's: to its own backward
// enter, the loss), its backward (backward enter to exit), and the gap from that exit to the backward
// enter of the layer before it (the first layer's: 0, nothing of the step is left to hide a copy).
type stepTimes struct{ fwd, gapF, bwd, gapB []int64 }

// recordedSteps are the steps after the first (which warms caches and allocators), from each declared
// layer's span enters and lengths (forward, backward; per layer in forward order, per step); nil when the
// layers' spans do not line up step by step.
func recordedSteps(enters, spans [2][][]int64) []stepTimes {
	n := len(spans[0])
	if n == 0 {
		return nil
	}
	k := len(spans[0][0])
	for ph := range 2 {
		for i := range n {
			if len(spans[ph][i]) != k || len(enters[ph][i]) != k {
				return nil
			}
		}
	}
	var out []stepTimes
	for s := 1; s < k; s++ {
		st := stepTimes{make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)}
		for i := range n {
			st.fwd[i], st.bwd[i] = spans[0][i][s], spans[1][i][s]
			next := enters[1][n-1][s]
			if i+1 < n {
				next = enters[0][i+1][s]
			}
			st.gapF[i] = max(next-enters[0][i][s]-st.fwd[i], 0)
			if i > 0 {
				st.gapB[i] = max(enters[1][i-1][s]-enters[1][i][s]-st.bwd[i], 0)
			}
		}
		out = append(out, st)
	}
	return out
}

// exposed models the transfer per step not hidden behind the job's time, as the engine schedules its
// copies: each recorded step is run on its own layer times and the gaps between them (a mean over the
// steps: a step whose backward of one layer ran short exposes a copy a deeper prefetch would have started
// earlier, which medians hide), or, without per-step times, once on the medians with no gaps.
//
// The engine's copies go through one stream of the runtime mover, in the order they are launched, each
// also holding its direction of the link (a PCIe link carries both directions at once), which the job's own
// copies share. A swapped layer's copies out are launched at its region exit; the job waits for them at the
// next swapped layer's exit (the engine completes the previous group's copies before launching the next),
// or at the backward's first restore. At a swapped layer's backward enter the engine launches its copies
// back, unless a prefetch launched them already, then those of the prefetch swapped layers the backward
// reaches next (in forward order, the ones before it), behind them on the stream; the layer's backward
// waits for its own. Nothing is restored ahead of the first swapped layer the backward reaches: the later
// layers' backward (those nearer the end of the forward) hides its copies out, not its copies back. The
// job's own copies (Layer.CopiesAfterForward, CopiesAfterBackward) queue behind swap's on their direction,
// and the job waits for them: it reads what it copies out (a loss), and the device needs what it copies
// in; their own time is in the recorded times. moved[i] is layer i's bytes each way (0: not swapped).
func (p *Profile) exposed(moved []uint64, prefetch int) int64 {
	if p.LinkBps <= 0 {
		return 0
	}
	steps := p.steps
	if len(steps) == 0 {
		steps = []stepTimes{{}}
	}
	var sum int64
	for i := range steps {
		sum += p.exposedStep(&steps[i], moved, prefetch)
	}
	return sum / int64(len(steps))
}

// exposedStep is exposed for one step's times st; a layer st does not cover (one --num-layers added, or
// every layer without per-step times) takes its median times and no gap, and the gap after the last
// covered layer's forward loses the time those layers' forward and backward took in it.
func (p *Profile) exposedStep(st *stepTimes, moved []uint64, prefetch int) int64 {
	n, rec := len(p.Layers), len(st.fwd)
	fwd := func(i int) int64 {
		if i < rec {
			return st.fwd[i]
		}
		return p.Layers[i].ForwardNS
	}
	bwd := func(i int) int64 {
		if i < rec {
			return st.bwd[i]
		}
		return p.Layers[i].BackwardNS
	}
	gapF := func(i int) int64 {
		if i >= rec {
			return 0
		}
		g := st.gapF[i]
		if i == rec-1 {
			for j := rec; j < n; j++ {
				g -= p.Layers[j].ForwardNS + p.Layers[j].BackwardNS
			}
		}
		return max(g, 0)
	}
	gapB := func(i int) int64 {
		if i >= rec {
			return 0
		}
		return st.gapB[i]
	}
	copyNS := func(b uint64) int64 { return int64(float64(b) / p.LinkBps * 1e9) }
	const toHost, toDevice = 0, 1
	// t: the job's time; mover: when the mover's stream is free; lane: when each direction of the link is.
	var t, mover, exposed int64
	var lane [2]int64
	wait := func(until int64) {
		if until > t {
			exposed += until - t
			t = until
		}
	}
	swapCopy := func(dir int, b uint64) int64 { // launched now; returns when it ends
		mover = max(t, mover, lane[dir]) + copyNS(b)
		lane[dir] = mover
		return mover
	}
	job := func(b [2]uint64) {
		for dir := range 2 {
			if b[dir] > 0 {
				wait(lane[dir])
				lane[dir] = t + copyNS(b[dir])
			}
		}
	}
	var pending int64 // when the copies out the job waits for next end
	var swapped []int // in forward order
	for i := range n {
		t += fwd(i)
		if moved[i] > 0 {
			wait(pending)
			pending = swapCopy(toHost, moved[i])
			swapped = append(swapped, i)
		}
		job(p.Layers[i].CopiesAfterForward)
		t += gapF(i)
	}
	done := make([]int64, n)
	issued := make([]bool, n)
	next := len(swapped) - 1 // the next swapped layer the backward reaches
	for k := n - 1; k >= 0; k-- {
		if moved[k] > 0 {
			wait(pending)
			pending = 0
			for j := next; j >= max(next-prefetch, 0); j-- { // its copies back, then those prefetched
				if l := swapped[j]; !issued[l] {
					issued[l] = true
					done[l] = swapCopy(toDevice, moved[l])
				}
			}
			next--
			wait(done[k])
		}
		t += bwd(k)
		job(p.Layers[k].CopiesAfterBackward)
		t += gapB(k)
	}
	return exposed
}

// Exposed is the model's exposed transfer per step for swapping layers (indices) with prefetch, each layer
// moving what its one-layer range's simulation moved a step (as searchSets costs a set): for a sweep that
// compares the model with runs (cmd/planbench).
func (p *Plan) Exposed(layers []int, prefetch int) int64 {
	moved := make([]uint64, len(p.Profile.Layers))
	for _, c := range p.Ranked {
		if len(c.Layers) == 1 && !c.Recompute {
			for i, l := range p.Profile.Layers {
				if l.Index == c.Layers[0] {
					moved[i] = max(moved[i], c.MovedBytes/2)
				}
			}
		}
	}
	swap := make([]uint64, len(moved))
	for i, l := range p.Profile.Layers {
		if slices.Contains(layers, l.Index) {
			swap[i] = moved[i]
		}
	}
	return p.Profile.exposed(swap, prefetch)
}

// PredictedPeak is the simulated peak of swapping layers (indices) with prefetch on the recording f the plan
// was made from, as Search simulates a candidate (a recording that declared every layer: the undeclared
// layers' estimate is not added): for a sweep that compares the model with runs (cmd/planbench).
func (p *Plan) PredictedPeak(f *trace.File, layers []int, prefetch int) uint64 {
	var at []int
	for i, l := range p.Profile.Layers {
		if slices.Contains(layers, l.Index) {
			at = append(at, i)
		}
	}
	return p.Profile.simulateSwap(f, at, prefetch).PeakSimulated
}
