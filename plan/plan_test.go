package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The time model on three layers of 10 ms forward and 20 ms backward, each moving 10 MB each way over a
// 1 GB/s link (10 ms a copy), worked by hand: without prefetch every copy back is waited for (20 ms for the
// last layer, whose copy out is still queued, then 10 ms each); with prefetch 1 only the first one is.
func TestExposedModel(t *testing.T) {
	ms := int64(time.Millisecond)
	p := &Profile{LinkBps: 1e9}
	for i := range 3 {
		p.Layers = append(p.Layers, Layer{Index: i, ForwardNS: 10 * ms, BackwardNS: 20 * ms})
	}
	moved := []uint64{10e6, 10e6, 10e6}
	for prefetch, want := range []int64{40 * ms, 20 * ms, 20 * ms} {
		if got := p.exposed(moved, prefetch); got != want {
			t.Errorf("prefetch %d: exposed %v, want %v", prefetch, time.Duration(got), time.Duration(want))
		}
	}
	if got := p.exposed([]uint64{0, 0, 0}, 1); got != 0 {
		t.Errorf("nothing moved: exposed %v", time.Duration(got))
	}
	// A fast link (10 us a copy): only the first backward layer waits, for its copy out and back.
	p.LinkBps = 1e12
	if got := p.exposed(moved, 1); got != 20*int64(time.Microsecond) {
		t.Errorf("a fast link: exposed %v, want 20us", time.Duration(got))
	}
}

// The job's own copies share the link: a loss read back after the last layer's forward waits for the copy
// out of the last swapped layer still on the lane (5 ms here), which the backward would have hidden.
func TestJobCopiesQueueBehindSwap(t *testing.T) {
	ms := int64(time.Millisecond)
	p := &Profile{LinkBps: 1e9}
	for i := range 3 {
		p.Layers = append(p.Layers, Layer{Index: i, ForwardNS: 10 * ms, BackwardNS: 20 * ms})
	}
	p.Layers[2].ForwardNS = 5 * ms
	moved := []uint64{10e6, 10e6, 0}
	if got := p.exposed(moved, 0); got != 20*ms {
		t.Errorf("without the job's copy: exposed %v, want 20ms (the two copies back)", time.Duration(got))
	}
	p.Layers[2].CopiesAfterForward = [2]uint64{1e6, 0}
	if got := p.exposed(moved, 0); got != 25*ms {
		t.Errorf("with the loss read back: exposed %v, want 25ms", time.Duration(got))
	}
	p.Layers[2].CopiesAfterForward = [2]uint64{0, 1e6} // to the device: the other lane, nothing ahead of it
	if got := p.exposed(moved, 0); got != 20*ms {
		t.Errorf("a copy to the device: exposed %v, want 20ms", time.Duration(got))
	}
}

// Candidates that fit come first, by exposed transfer, then bytes moved, fewer layers, shallower prefetch;
// those that do not, by their peak.
func TestBetter(t *testing.T) {
	fit := func(layers, prefetch int, moved uint64, exposed int64) Candidate {
		return Candidate{Layers: make([]int, layers), Prefetch: prefetch, MovedBytes: moved, ExposedNS: exposed, Fits: true}
	}
	for i, c := range []struct {
		a, b Candidate
	}{
		{fit(3, 1, 100, 5), Candidate{PeakBytes: 1}},
		{fit(3, 1, 100, 5), fit(1, 0, 10, 6)},
		{fit(3, 1, 100, 5), fit(2, 0, 200, 5)},
		{fit(2, 1, 100, 5), fit(3, 0, 100, 5)},
		{fit(2, 0, 100, 5), fit(2, 1, 100, 5)},
		{Candidate{PeakBytes: 1, ExposedNS: 9}, Candidate{PeakBytes: 2}},
	} {
		if !better(c.a, c.b) || better(c.b, c.a) {
			t.Errorf("case %d: %+v should come before %+v", i, c.a, c.b)
		}
	}
}

func TestSpanAndMedian(t *testing.T) {
	for want, layers := range map[string][]int{"none": nil, "0-5": {0, 1, 2, 3, 4, 5}, "0,2-3,7": {0, 2, 3, 7}} {
		if got := Span(layers); got != want {
			t.Errorf("Span(%v) = %q, want %q", layers, got, want)
		}
	}
	if m := median([]int64{100, 5, 3, 4}); m != 4 { // the first (warm-up) step left out
		t.Errorf("median = %d, want 4", m)
	}
}

// Which forms state which candidates, on 10 layers: MindFormers needs a prefetch of 1 to 9 and layer
// i + prefetch in the model; hyper-parallel chains nothing without prefetch; the agent takes any.
func TestTargetsExpress(t *testing.T) {
	swap := func(prefetch int, layers ...int) Candidate { return Candidate{Layers: layers, Prefetch: prefetch} }
	for i, c := range []struct {
		c             Candidate
		agent, mf, hp bool
	}{
		{swap(0), true, true, true},
		{swap(0, 0, 1, 2), true, false, true},
		{swap(1, 0, 1, 2), true, true, true},
		{swap(1, 7, 8), true, true, true},
		{swap(1, 8, 9), true, false, false},
		{swap(2, 7), true, true, true},
		{swap(2, 8), true, false, false},
		{swap(10, 0), true, false, false},
		{Candidate{Recompute: true, Layers: []int{9}}, true, true, true},
		{swap(1, 0, 2, 4), true, false, false},
		{swap(0, 0, 2), true, false, false},
	} {
		for _, want := range []struct {
			t  target
			ok bool
		}{{forAgent, c.agent}, {forMindFormers, c.mf}, {forHyperParallel, c.hp}} {
			if got := want.t.expresses(c.c, 10); got != want.ok {
				t.Errorf("case %d, target %d: expresses %+v = %v", i, want.t, c.c, got)
			}
		}
	}
	if got := specs([]int{0, 1, 2, 5, 7, 8}); got != "'0-2', '5', '7-8'" {
		t.Errorf("specs = %s", got)
	}
}

// Graph mode's backward_prefetch counts operators: a layer's copy back is launched at the backward enter of
// the swapped layer prefetch places after it, so its entry counts the backward kernels from there to it;
// layers with one count share an entry, and the last swapped layer (restored at its own enter) gets 1.
func TestGraphYAMLOperatorsAhead(t *testing.T) {
	p := &Plan{mf: forMindFormersGraph, Profile: Profile{NumLayers: 5}}
	for i := range 5 {
		p.Profile.Layers = append(p.Profile.Layers, Layer{Index: i, BackwardKernels: int64(10 + i)})
	}
	c := Candidate{Layers: []int{0, 1, 2, 4}, Prefetch: 2, Fits: true}
	p.Ranked = []Candidate{c}
	// layer 4: 1; layer 2: layers 3, 4 (13 + 14); layer 1: layers 2-4 (12 + 13 + 14); layer 0: layers 1, 2
	if got := p.operatorsAhead(c); fmt.Sprint(got) != "[23 39 27 1]" {
		t.Errorf("operators ahead %v", got)
	}
	y := p.GraphYAML()
	for _, want := range []string{"swap_config:\n  swap: True\n", "- backward_prefetch: 1\n      layers: [4]\n",
		"- backward_prefetch: 27\n      layers: [2]\n", "- backward_prefetch: 39\n      layers: [1]\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("graph YAML lacks %q:\n%s", want, y)
		}
	}
	// no prefetch, and recompute, have no graph form
	if forMindFormersGraph.expresses(Candidate{Layers: []int{1}}, 5) ||
		forMindFormersGraph.expresses(Candidate{Layers: []int{1}, Recompute: true, Prefetch: 1}, 5) ||
		!forMindFormersGraph.expresses(Candidate{Layers: []int{0, 2}, Prefetch: 1}, 5) {
		t.Error("graph mode's expresses")
	}
}
