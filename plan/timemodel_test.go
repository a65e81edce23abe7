package plan

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// uniform is a profile of n layers of forward f and backward b ms over a 1 GB/s link (1 MB a ms).
func uniform(n int, f, b int64) *Profile {
	p := &Profile{LinkBps: 1e9}
	for i := range n {
		p.Layers = append(p.Layers, Layer{Index: i, ForwardNS: f * ms, BackwardNS: b * ms})
	}
	return p
}

// A set with a gap, worked by hand (4 layers of 10 ms forward and backward, 15 ms copies, layers 0, 1, 3
// swapped): the forward waits 5 ms for layer 0's copy out at layer 1's exit; the backward waits for layer
// 3's copy out and its copy back (15 + 15 ms). With prefetch 1, layer 0's copy back is launched at layer 1's
// backward enter and exposes 5 ms; with prefetch 2 it was launched at layer 3's, behind layer 1's, and
// lands in time. Without prefetch layers 1 and 0 each wait for theirs.
func TestExposedDepthOnASetWithAGap(t *testing.T) {
	p := uniform(4, 10, 10)
	moved := []uint64{15e6, 15e6, 0, 15e6}
	for prefetch, want := range []int64{65 * ms, 40 * ms, 35 * ms} {
		if got := p.exposed(moved, prefetch); got != want {
			t.Errorf("prefetch %d: exposed %v, want %v", prefetch, time.Duration(got), time.Duration(want))
		}
	}
}

// Each recorded step runs on its own times: two steps whose layers 1 and 2 swap a 5 ms and a 15 ms
// backward have the medians of a step where prefetch 1 and 2 tie (20 ms), but in the first one layer 0's
// copy back, launched at layer 1's short backward, is 5 ms late with prefetch 1 and in time with prefetch
// 2 (launched at layer 2's): 25 and 20 ms; in the second both expose 25 ms. The mean: 25 and 22.5 ms.
func TestExposedRunsEachRecordedStep(t *testing.T) {
	p := uniform(3, 10, 10)
	moved := []uint64{10e6, 10e6, 10e6}
	for prefetch := 1; prefetch <= 2; prefetch++ {
		if got := p.exposed(moved, prefetch); got != 20*ms {
			t.Errorf("medians, prefetch %d: exposed %v, want 20ms", prefetch, time.Duration(got))
		}
	}
	step := func(b ...int64) stepTimes {
		st := stepTimes{fwd: []int64{10 * ms, 10 * ms, 10 * ms}, gapF: make([]int64, 3), gapB: make([]int64, 3)}
		for _, x := range b {
			st.bwd = append(st.bwd, x*ms)
		}
		return st
	}
	p.steps = []stepTimes{step(10, 5, 15), step(10, 15, 5)}
	for prefetch, want := range map[int]int64{1: 25 * ms, 2: 22*ms + ms/2} {
		if got := p.exposed(moved, prefetch); got != want {
			t.Errorf("per step, prefetch %d: exposed %v, want %v", prefetch, time.Duration(got), time.Duration(want))
		}
	}
}

// A range's position: the last swapped layer's copies out are waited for at the backward's first restore,
// so a range that ends at the last layer (needed first in backward) waits for them, less the loss between
// forward and backward (a recorded gap), where one ending earlier has them hidden by the later layers.
func TestExposedSeesPosition(t *testing.T) {
	p := uniform(4, 10, 10)
	end := []uint64{0, 0, 10e6, 10e6}
	mid := []uint64{0, 10e6, 10e6, 0}
	if e, m := p.exposed(end, 1), p.exposed(mid, 1); e != m+10*ms {
		t.Errorf("range at the end: exposed %v, in the middle %v: want 10ms more", time.Duration(e), time.Duration(m))
	}
	st := stepTimes{fwd: make([]int64, 4), gapF: make([]int64, 4), bwd: make([]int64, 4), gapB: make([]int64, 4)}
	for i := range 4 {
		st.fwd[i], st.bwd[i] = 10*ms, 10*ms
	}
	st.gapF[3] = 4 * ms // the loss
	p.steps = []stepTimes{st}
	if e, m := p.exposed(end, 1), p.exposed(mid, 1); e != m+6*ms {
		t.Errorf("with the loss: at the end %v, in the middle %v: want 6ms more", time.Duration(e), time.Duration(m))
	}
}

// recordedSteps reads each step's times from the spans: the gaps between one layer's exit and the next
// one's enter, the last layer's to its own backward; the first step is left out.
func TestRecordedSteps(t *testing.T) {
	// two layers, two steps: step s starts at 100*s; forward 0: +0..+10, forward 1: +12..+20,
	// backward 1: +25..+35, backward 0: +37..+50.
	var enters, spans [2][][]int64
	for _, span := range [][4]int64{{0, 10, 37, 13}, {12, 8, 25, 10}} {
		for ph := range 2 {
			var e, s []int64
			for step := range 2 {
				e = append(e, int64(100*step)+span[2*ph])
				s = append(s, span[2*ph+1])
			}
			enters[ph], spans[ph] = append(enters[ph], e), append(spans[ph], s)
		}
	}
	got := recordedSteps(enters, spans)
	if len(got) != 1 {
		t.Fatalf("steps %d, want 1 (the first left out)", len(got))
	}
	st := got[0]
	if st.fwd[0] != 10 || st.fwd[1] != 8 || st.bwd[0] != 13 || st.bwd[1] != 10 || st.gapF[0] != 2 ||
		st.gapF[1] != 5 || st.gapB[1] != 2 || st.gapB[0] != 0 {
		t.Errorf("step times %+v", st)
	}
	spans[1][0] = spans[1][0][:1] // a backward missing in a step: no per-step times
	if recordedSteps(enters, spans) != nil {
		t.Error("spans that do not line up gave per-step times")
	}
}
