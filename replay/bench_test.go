// bench_test.go measures the simulation's throughput (events per second on one core) over a synthetic
// multi-step decoder trace with the real trace's mix (about 95% runtime calls).
package replay

import (
	"runtime"
	"testing"
	"time"

	"swapagent/offload"
	"swapagent/trace"
)

// benchEvents builds steps training steps of a 12-layer decoder, 11 of them swapped.
func benchEvents(steps int) []trace.Event {
	b := newBuilder("safe")
	b.Call("aclInit", 0)
	b.Malloc(chunk, 64<<20)
	act := func(l, k int) uint64 { return actBase + uint64(l*8+k)*actSz }
	for s := 0; s < steps; s++ {
		x := act(0, 7)
		var handles [][]int64
		for l := 0; l < 11; l++ {
			g := "layer." + itoa(l)
			b.ABI(trace.KindRegionEnter, g, 0, []uint64{x, cosAddr, sinAddr}, 1)
			var hs []int64
			for k := 0; k < 4; k++ {
				hs = append(hs, b.Save(g, act(l, k), actSz, 0), b.Save(g, wAddr+uint64(k)*0x800, 2048, 1))
			}
			hs = append(hs, b.Save(g, cosAddr, ropeSz, 0), b.Save(g, sinAddr, ropeSz, 0), b.Save(g, x, actSz, 0))
			for k := 0; k < 12; k++ {
				b.op("aclnnMul", [2]uint64{cosAddr, ropeSz}, [2]uint64{act(l, k%4), actSz}, [2]uint64{act(l, (k+1)%4), actSz})
			}
			b.ABI(trace.KindRegionExit, g, 0, []uint64{act(l, 3)})
			handles = append(handles, hs)
			x = act(l, 3)
		}
		for l := 10; l >= 0; l-- {
			g := "layer." + itoa(l)
			b.ABI(trace.KindBackwardEnter, g, 0, nil)
			for _, h := range handles[l] {
				b.ABI(trace.KindUnpack, "", h, nil)
			}
			for k := 0; k < 12; k++ {
				b.op("aclnnMatmul", [2]uint64{sinAddr, ropeSz}, [2]uint64{act(l, k%4), actSz}, [2]uint64{act(l, (k+2)%4), actSz})
			}
			b.ABI(trace.KindBackwardExit, g, 0, nil)
		}
	}
	b.Free(chunk)
	return b.Events
}

func BenchmarkSimulate(b *testing.B) {
	events := benchEvents(20)
	h := trace.Header{Version: trace.Version, PID: 1, Rank: -1}
	prev := runtime.GOMAXPROCS(1) // one core, as the figure is quoted
	defer runtime.GOMAXPROCS(prev)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		r := Simulate(h, events, Options{Policy: offload.PolicySafe})
		if r.Released == 0 {
			b.Fatal("nothing released")
		}
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(len(events))*float64(b.N)/el, "events/s")
	b.ReportMetric(float64(len(events)), "events/op")
}

func BenchmarkSimulateOutputsOnly(b *testing.B) {
	events := benchEvents(20)
	h := trace.Header{Version: trace.Version, PID: 1, Rank: -1}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		Simulate(h, events, Options{Policy: offload.PolicyOutputsOnly})
	}
	b.ReportMetric(float64(len(events))*float64(b.N)/time.Since(start).Seconds(), "events/s")
}
