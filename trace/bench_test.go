// bench_test.go owns the synthetic workload trace and the figures measured on it: bytes per
// event (asserted <= 16 by TestCompactness), and write and read speed (benchmarks, printed only).
package trace

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Function ids of the synthetic trace, as the shim would assign them (in order of first use).
const (
	fnMalloc = iota + 1
	fnFree
	fnCreateTensor
	fnDestroyTensor
	fnMemcpyAsync
	fnSyncStream
	fnMatmul
	fnAdd
	fnSoftmax
	fnRmsNorm
)

var synthFns = []string{"", "aclrtMalloc", "aclrtFree", "aclCreateTensor", "aclDestroyTensor",
	"aclrtMemcpyAsync", "aclrtSynchronizeStream", "aclnnMatmul", "aclnnAdd", "aclnnSoftmax", "aclnnRmsNorm"}

// synthEvents returns about n events shaped like a decoder layer's runtime traffic: device
// allocations around 0x100000000000 with 64-byte alignment and sizes of a few KiB to a few MiB,
// tensor creations over live storages, a kernel launch every few microseconds, frees, occasional
// copies, syncs and region events, from a main thread and a few helpers.
func synthEvents(n int) []Event {
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]Event, 0, n+64)
	evs = append(evs, Event{Kind: KindMeta, Text: "policy=safe prefetch=1 min_bytes=1048576 rank=0"})
	for fn := 1; fn < len(synthFns); fn++ {
		evs = append(evs, Event{Kind: KindFunc, Fn: uint16(fn), Text: synthFns[fn]})
	}
	const stream = 0xaaaad0001000
	tids := []uint32{31337, 31337, 31337, 31337, 31337, 31337, 31401, 31402}
	type alloc struct{ ptr, size uint64 }
	var live []alloc
	next := uint64(0x100000000000)
	ts := int64(1_000_000)
	executor := uint64(0xaaaae5a01000)
	tensorSlots := uint64(0xaaaae7000000)
	call := func(fn uint16, ret int64, args ...uint64) {
		ev := Event{Kind: KindCall, Fn: fn, TID: tids[rng.IntN(len(tids))], TS: ts, Ret: ret}
		copy(ev.Args[:], args)
		evs = append(evs, ev)
		ts += 150 + rng.Int64N(400)
	}
	malloc := func() alloc {
		size := (uint64(4096) << rng.IntN(10)) + uint64(rng.IntN(4096))&^63
		var a alloc
		if len(live) > 256 {
			i := rng.IntN(len(live))
			a = live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			call(fnFree, 0, a.ptr)
			if a.size < size { // reuse the freed range when it fits, as a caching allocator would
				a = alloc{next, size}
				next += (size + 511) &^ 511
			}
		} else {
			a = alloc{next, size}
			next += (size + 511) &^ 511
		}
		a.size = size
		live = append(live, a)
		call(fnMalloc, 0, a.ptr, size, 0)
		return a
	}
	layer := uint32(0)
	for len(evs) < n {
		if rng.IntN(4) == 0 || len(live) < 8 {
			malloc()
		}
		// Two to four tensors over live storages, then one launch, then the tensors go.
		nt := 2 + rng.IntN(3)
		var tensors [4]uint64
		for i := range nt {
			a := live[rng.IntN(len(live))]
			tensors[i] = tensorSlots + uint64(rng.IntN(64))*0x70
			call(fnCreateTensor, int64(tensors[i]), tensors[i], a.ptr, a.size, 1, 0, a.size/2)
		}
		ws, wsSize := uint64(0), uint64(0)
		if rng.IntN(3) == 0 {
			w := live[rng.IntN(len(live))]
			ws, wsSize = w.ptr, w.size
		}
		executor += uint64(rng.IntN(8)) * 0x40
		call(uint16(fnMatmul+rng.IntN(4)), 0, ws, wsSize, executor, stream, uint64(nt))
		ts += 2000 + rng.Int64N(6000)
		for i := range nt {
			call(fnDestroyTensor, 0, tensors[i])
		}
		switch rng.IntN(50) {
		case 0:
			a := live[rng.IntN(len(live))]
			call(fnMemcpyAsync, 0, a.ptr, 0xffff80001000, a.size, 2, a.size, stream)
		case 1:
			call(fnSyncStream, 0, stream)
		case 2:
			g := layer%12 + 1
			layer++
			if layer <= 12 {
				evs = append(evs, Event{Kind: KindGroup, Group: g, Text: "layer." + strconv.Itoa(int(g-1))})
			}
			in := []uint64{live[0].ptr, live[1].ptr, live[2].ptr}
			evs = append(evs, Event{Kind: KindRegionEnter, TS: ts, TID: 31337, Group: g, Ptrs: in, Args: [6]uint64{2}})
			for i := range 4 {
				a := live[rng.IntN(len(live))]
				evs = append(evs, Event{Kind: KindSave, TS: ts + int64(i), TID: 31337, Group: g,
					Handle: int64(layer*8 + uint32(i)), Args: [6]uint64{a.ptr, a.size, 0, 1}})
			}
			evs = append(evs, Event{Kind: KindRegionExit, TS: ts + 9, TID: 31337, Group: g, Ptrs: in[2:]})
		}
	}
	return evs
}

func encode(t testing.TB, h Header, evs []Event, flushEvery int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if flushEvery > 0 && (i+1)%flushEvery == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Bytes() != uint64(buf.Len()) || w.Events() != uint64(len(evs)) {
		t.Fatalf("counters: %d bytes %d events, want %d and %d", w.Bytes(), w.Events(), buf.Len(), len(evs))
	}
	return buf.Bytes()
}

var benchHeader = Header{PID: 4242, Host: "node-07", Rank: 3, StartUnix: 1_700_000_000_000_000_000,
	Argv: []string{"python", "train.py", "--layers", "12"}}

// TestCompactness prints the mean encoded size of an event of the synthetic trace and holds it
// to the 16-byte target.
func TestCompactness(t *testing.T) {
	evs := synthEvents(200_000)
	data := encode(t, benchHeader, evs, 0)
	per := float64(len(data)) / float64(len(evs))
	t.Logf("synthetic trace: %d events, %d bytes, %.2f bytes/event", len(evs), len(data), per)
	if per > 16 {
		t.Errorf("%.2f bytes/event, target <= 16", per)
	}
	got := readAll(t, data)
	if len(got) != len(evs) {
		t.Fatalf("read %d events, wrote %d", len(got), len(evs))
	}
	for i := range evs {
		if !sameEvent(&got[i], &evs[i]) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], evs[i])
		}
	}
}

// BenchmarkWrite reports the writer's throughput on the synthetic trace (one core, a discarding
// sink that counts bytes).
func BenchmarkWrite(b *testing.B) {
	evs := synthEvents(1 << 16)
	w, err := NewWriter(io.Discard, benchHeader)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := w.Add(&evs[i&(1<<16-1)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "events/s")
	b.ReportMetric(float64(w.Bytes())/float64(b.N), "bytes/event")
}

// BenchmarkRead reports the reader's throughput on the synthetic trace held in memory.
func BenchmarkRead(b *testing.B) {
	evs := synthEvents(1 << 16)
	data := encode(b, benchHeader, evs, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)) / int64(len(evs)))
	b.ResetTimer()
	start := time.Now()
	var r *Reader
	var ev Event
	for i := 0; i < b.N; i++ {
		if r == nil {
			var err error
			if r, err = NewReader(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Next(&ev); err == io.EOF {
			r = nil
			i--
		} else if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
