// recorded_bench_test.go measures the format on real traces, the ones `make bench-trace` records from
// decoder-sim at each trace level (SWAPAGENT_BENCH_TRACES names their directory): bytes per event and per
// runtime call, side by side with zstd -3 on the uncompressed version-1 rows of the same events, and the
// writer's speed, compression included. Without the variable there is nothing to measure and they say so.
package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// recorded returns the traces of SWAPAGENT_BENCH_TRACES by level (the directory's subdirectories).
func recorded(tb testing.TB) map[string]string {
	dir := os.Getenv("SWAPAGENT_BENCH_TRACES")
	if dir == "" {
		tb.Skip("SWAPAGENT_BENCH_TRACES is not set: `make bench-trace` records the traces this measures")
	}
	out := map[string]string{}
	for _, level := range []string{"all", "memory", "off"} {
		files, err := FindTraces(filepath.Join(dir, level))
		if err != nil || len(files) != 1 {
			tb.Fatalf("level %s: want one trace, got %v (%v)", level, files, err)
		}
		out[level] = files[0]
	}
	return out
}

// runtimeCalls is the stats' count of intercepted runtime calls: every call, kept in the trace or not.
func runtimeCalls(evs []Event) uint64 {
	var n uint64
	for i := range evs {
		if evs[i].Kind != KindStats {
			continue
		}
		var st Stats
		if json.Unmarshal([]byte(evs[i].Text), &st) == nil && st.Runtime != nil {
			n = 0
			for _, c := range st.Runtime.Calls {
				n += c
			}
		}
	}
	return n
}

func TestRecordedSizes(t *testing.T) {
	traces := recorded(t)
	levels := make([]string, 0, len(traces))
	for l := range traces {
		levels = append(levels, l)
	}
	sort.Strings(levels)
	zstd3, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"all", "memory", "off"} {
		path := traces[level]
		h, evs, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		calls := runtimeCalls(evs)
		v1 := encodeV1(t, h, evs, 0)
		z := zstd3.EncodeAll(v1, nil)
		fmt.Printf("trace level %-6s %8d events, %8d runtime calls: %8d bytes, %.2f B/event, %.2f B/runtime call"+
			" | version 1 rows %.2f B/event, zstd -3 of them %.2f B/event\n", level, len(evs), calls, fi.Size(),
			float64(fi.Size())/float64(len(evs)), float64(fi.Size())/float64(max(calls, 1)),
			float64(len(v1))/float64(len(evs)), float64(len(z))/float64(len(evs)))
	}
}

// BenchmarkWriteRecorded is the writer on the level-all trace, compression included, on one core: one
// writer for the whole run, each event copied into the one Event the drain reuses, as the agent's drain
// decodes its ring. When events come fast, batches end at 64 KiB (the writer's own flush, long before the
// agent's 50 ms interval); at decoder-sim's pace the interval ends them every 1,500 events or so. It reports
// events per second of wall time and per second of CPU time.
func BenchmarkWriteRecorded(b *testing.B) {
	b.Run("64KiB-batches", func(b *testing.B) { benchWriteRecorded(b, 0, false) })
	b.Run("1500-event-batches", func(b *testing.B) { benchWriteRecorded(b, 1500, false) })
	// As the agent writes: segmented under the default limit, so every event also feeds the snapshot.
	b.Run("segmented-64KiB-batches", func(b *testing.B) { benchWriteRecorded(b, 0, true) })
	b.Run("segmented-1500-event-batches", func(b *testing.B) { benchWriteRecorded(b, 1500, true) })
}

// discardSegments are segment files that keep nothing.
type discardSegments struct{}

func (discardSegments) Create(int) (io.WriteCloser, error) { return nopCloser{io.Discard}, nil }
func (discardSegments) Remove(int) error                   { return nil }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// adder is what the benchmark drives: a Writer or a SegmentedWriter.
type adder interface {
	Add(*Event) error
	Flush() error
	Close() error
}

func benchWriteRecorded(b *testing.B, flushEvery int, segmented bool) {
	h, evs, err := ReadFile(recorded(b)["all"])
	if err != nil {
		b.Fatal(err)
	}
	out := &countWriter{w: io.Discard}
	var w adder
	if segmented {
		w, err = NewSegmentedWriter(nopCloser{out}, h, DefaultLimit, discardSegments{})
	} else {
		w, err = NewWriter(out, h)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	var ev Event
	for i := range b.N {
		ev = evs[i%len(evs)]
		if err := w.Add(&ev); err != nil {
			b.Fatal(err)
		}
		if flushEvery > 0 && i%flushEvery == flushEvery-1 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/(cpuTime(b)-cpu0).Seconds(), "events/cpu-s")
	b.ReportMetric(float64(out.n)/float64(b.N), "bytes/event")
}

// cpuTime is the process's CPU time so far (user and system, every thread). Events per CPU second is the
// writer's rate on one core whatever else the machine runs: a shared machine takes the core away now and
// then, which wall time counts and CPU time does not.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
