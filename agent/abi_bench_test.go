// abi_bench_test.go is the profile of a control call's cost inside the agent (issue 16): one region of
// 38 saves (the bench-companions Llama layer's), exited, unpacked and finished, per iteration, under the
// policies off and safe, with host storages (a companion run with include_cpu) and device storages, and
// the parts a call is made of timed alone (the proof of a group name and of a host range, the drain, a
// trace record). `go test -run - -bench . ./agent/` prints ns per saved tensor.
package agent

import (
	"fmt"
	"io"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

const benchSaves = 38 // saved storages per region: the bench's Llama layer

type nopOps struct{}

func (nopOps) Release(int64, uint64, uint64) error { return nil }
func (nopOps) Restore(_ int64, _ uint64) (uint64, error) {
	return 0, fmt.Errorf("%w: not in a bench", offload.ErrRuntime)
}

func benchAgent(b *testing.B, policy string, minBytes uint64) (*Agent, *fakeNative) {
	n := &fakeNative{t0: time.Now()}
	p, err := offload.ParsePolicy(policy)
	if err != nil {
		b.Fatal(err)
	}
	a := New(Config{Policy: p, Out: b.TempDir(), Prefetch: 1, MinBytes: minBytes, Level: zapcore.ErrorLevel,
		Rank: -1}, n, io.Discard, nil)
	a.StartEngine(offload.NewMemcpyMover())
	a.SetStorageOps(nopOps{})
	b.Cleanup(a.Shutdown)
	return a, n
}

// BenchmarkRegion runs one region of benchSaves saves per iteration (enter, saves, exit, backward enter,
// one unpack per handle, backward exit) and reports ns per save: the agent's whole part of a saved tensor,
// the region calls included. Nothing moves (off, or safe with every storage small).
func BenchmarkRegion(b *testing.B) {
	for _, pol := range []string{"off", "safe"} {
		for _, where := range []string{"host", "device"} {
			for _, batch := range []bool{false, true} {
				name := pol + "/" + where + "/save"
				if batch {
					name += "_n"
				}
				benchRegion(b, name, pol, where, batch)
			}
		}
	}
}

func benchRegion(b *testing.B, name, pol, where string, batch bool) {
	b.Run(name, func(b *testing.B) {
		a, n := benchAgent(b, pol, 1<<40)
		mem := make([]byte, benchSaves*4096)
		if where == "device" {
			n.push(fnMalloc, addr(mem), uint64(len(mem)))
		}
		ptrs := make([]uint64, benchSaves)
		for i := range ptrs {
			ptrs[i] = addr(mem) + uint64(i)*4096
		}
		hs, sizes := make([]int64, benchSaves), make([]uint64, benchSaves)
		for i := range sizes {
			sizes[i] = 4096
		}
		in := []uint64{ptrs[0], ptrs[1]}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			a.RegionEnter("layer.0", in, 1)
			if batch {
				a.SaveN("layer.0", ptrs, sizes, nil, hs)
			} else {
				for k, p := range ptrs {
					hs[k] = a.Save("layer.0", p, 4096, 0)
				}
			}
			a.RegionExit("layer.0", ptrs[2:3])
			a.BackwardEnter("layer.0")
			for _, h := range hs {
				a.Unpack(h)
			}
			a.BackwardExit("layer.0")
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchSaves), "ns/save")
	})
}

// BenchmarkParts times what a call is made of, each alone: the proof of a group name (its full read, as
// every call made it, against the check of a name read before at the same address: shim/exports.go), of a
// host range (through the kernel, against the index a save now uses), the drain and a trace record.
func BenchmarkParts(b *testing.B) {
	name := []byte("layer.10\x00")
	host := make([]byte, 4096)
	b.Run("group name, full read", func(b *testing.B) { // up to trace.MaxGroup+1 bytes, two pages
		hm := tracker.NewHostMaps(tracker.ProcMaps)
		var buf [trace.MaxGroup + 1]byte
		for i := 0; i < b.N; i++ {
			hm.Read(buf[:], addr(name))
		}
	})
	b.Run("group name, cached check", func(b *testing.B) { // its bytes and NUL only
		hm := tracker.NewHostMaps(tracker.ProcMaps)
		buf := make([]byte, len(name))
		for i := 0; i < b.N; i++ {
			hm.Read(buf, addr(name))
		}
	})
	b.Run("host range, kernel proof", func(b *testing.B) { // HostMaps.Covers: what a save made
		hm := tracker.NewHostMaps(tracker.ProcMaps)
		for i := 0; i < b.N; i++ {
			hm.Covers(addr(host), uint64(len(host)), false)
		}
	})
	b.Run("host range, index", func(b *testing.B) { // HostMaps.Indexed: what a save makes
		hm := tracker.NewHostMaps(tracker.ProcMaps)
		for i := 0; i < b.N; i++ {
			hm.Indexed(addr(host), uint64(len(host)), false)
		}
	})
	b.Run("drain", func(b *testing.B) {
		a, _ := benchAgent(b, "off", 0)
		for i := 0; i < b.N; i++ {
			a.begin(live)
		}
	})
	b.Run("record", func(b *testing.B) {
		a, _ := benchAgent(b, "off", 0)
		a.begin(live)
		for i := 0; i < b.N; i++ {
			a.record(trace.KindSave, "layer.0", 1, 1, nil, addr(host), 4096, 0, 0)
		}
	})
}

// BenchmarkDescribe times SWAPAGENT_CALL_DESCRIBE of a region's saved storages (dtype and shape, no path), as
// the companions call it before each region exit: ns per described storage.
func BenchmarkDescribe(b *testing.B) {
	a, n := benchAgent(b, "off", 1<<40)
	mem := make([]byte, benchSaves*4096)
	n.push(fnMalloc, addr(mem), uint64(len(mem)))
	ptrs, descs := make([]uint64, benchSaves), make([]string, benchSaves)
	for i := range ptrs {
		ptrs[i] = addr(mem) + uint64(i)*4096
		descs[i] = "\tfloat32\t2,32,16"
	}
	a.RegionEnter("layer.0", ptrs[:1], 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if c := a.Describe("layer.0", ptrs, descs); c != trace.CodeOK {
			b.Fatalf("describe: %d", c)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchSaves), "ns/storage")
}
