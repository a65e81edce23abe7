// segment_test.go proves the flight recorder: the newest segments within the limit are kept, a reader of
// them sees exactly the events written after the dropped ones, and the snapshot each segment opens with
// holds exactly what was live when it began.
package trace

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type dirFiles struct{ first string }

func (d dirFiles) Create(k int) (io.WriteCloser, error) { return os.Create(SegmentPath(d.first, k)) }
func (d dirFiles) Remove(k int) error                   { return os.Remove(SegmentPath(d.first, k)) }

// churnEvents is a run of steps: each allocates, creates tensors and opens a region that saves, then frees
// half of what it allocated, so the live set moves on while some allocations outlive many segments.
func churnEvents(steps int) []Event {
	evs := []Event{
		{Kind: KindMeta, Text: "policy=safe"},
		{Kind: KindFunc, Fn: 1, Text: "aclrtMalloc"},
		{Kind: KindFunc, Fn: 2, Text: "aclrtFree"},
		{Kind: KindFunc, Fn: 3, Text: "aclCreateTensor"},
		{Kind: KindFunc, Fn: 4, Text: "aclDestroyTensor"},
		{Kind: KindFunc, Fn: 5, Text: "aclnnMul"},
		{Kind: KindGroup, Group: 1, Text: "layer.0"},
	}
	ts := int64(0)
	add := func(ev Event) {
		ts += 1000 + int64(len(evs)%7)*13
		ev.TS = ts
		evs = append(evs, ev)
	}
	ptr := uint64(0x100000000000)
	var live []uint64
	for s := range steps {
		for i := range 8 {
			ptr += 0x10000
			live = append(live, ptr)
			add(Event{Kind: KindCall, Fn: 1, Args: [6]uint64{ptr, 0x10000}})
			add(Event{Kind: KindCall, Fn: 3, Args: [6]uint64{uint64(0x5000 + s*8 + i), ptr, 0x10000}})
			add(Event{Kind: KindCall, Fn: 5, Args: [6]uint64{0, 0, 0, 7}})
			add(Event{Kind: KindCall, Fn: 4, Args: [6]uint64{uint64(0x5000 + s*8 + i)}})
		}
		add(Event{Kind: KindRegionEnter, Group: 1, Ptrs: []uint64{live[0]}, Args: [6]uint64{1}})
		add(Event{Kind: KindSave, Group: 1, Handle: int64(s + 1), Args: [6]uint64{live[len(live)-1], 0x10000}})
		add(Event{Kind: KindRegionExit, Group: 1, Ptrs: []uint64{live[len(live)-2]}})
		for len(live) > 4*(s%3+1) {
			add(Event{Kind: KindCall, Fn: 2, Args: [6]uint64{live[len(live)-1]}})
			live = live[:len(live)-1]
		}
		if s%50 == 0 {
			add(Event{Kind: KindStats, Text: `{"step":` + string(rune('0'+s%10)) + `}`})
		}
	}
	return evs
}

// liveAt is the device allocations live after events[:n]: their pointers, sorted.
func liveAt(evs []Event) []uint64 {
	live := map[uint64]bool{}
	for _, ev := range evs {
		if ev.Kind == KindCall && ev.Fn == 1 {
			live[ev.Args[0]] = true
		}
		if ev.Kind == KindCall && ev.Fn == 2 {
			delete(live, ev.Args[0])
		}
	}
	var out []uint64
	for p := range live {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// writeSegments writes 3000 churn events, flushed every 300, as a trace of segments kept within limit in
// dir, and closes it; it returns the first segment's path, the events and the segments kept on disk.
func writeSegments(t *testing.T, dir string, limit int64) (first string, evs []Event, cur, oldest int) {
	t.Helper()
	first = filepath.Join(dir, "h.7"+FileSuffix)
	f, err := os.Create(first)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewSegmentedWriter(f, testHeader, limit, dirFiles{first})
	if err != nil {
		t.Fatal(err)
	}
	evs = churnEvents(3000)
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if i%300 == 299 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Current().Close(); err != nil {
		t.Fatal(err)
	}
	cur, oldest = w.Segments()
	return first, evs, cur, oldest
}

func TestSegmentsKeepTheNewest(t *testing.T) {
	dir := t.TempDir()
	const limit = 64 << 10
	first, evs, cur, oldest := writeSegments(t, dir, limit)
	if oldest == 0 || cur < oldest+2 {
		t.Fatalf("segments %d..%d: the limit should have dropped some and kept several", oldest, cur)
	}
	// On disk: the kept segments only, within the limit plus the one written last.
	var total, last int64
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for k := oldest; k <= cur; k++ {
		fi, err := os.Stat(SegmentPath(first, k))
		if err != nil {
			t.Fatalf("segment %d: %v", k, err)
		}
		total, last = total+fi.Size(), fi.Size()
	}
	if len(files) != cur-oldest+1 || total-last > limit {
		t.Fatalf("%d files for segments %d..%d, %d bytes of closed segments (limit %d)", len(files), oldest, cur,
			total-last, limit)
	}
	found, err := FindTraces(dir)
	if err != nil || len(found) != 1 || found[0] != SegmentPath(first, oldest) {
		t.Fatalf("FindTraces = %v, %v; want the oldest kept segment alone", found, err)
	}

	// Read from any segment: the same whole trace.
	for _, from := range []string{found[0], SegmentPath(first, cur)} {
		got, err := Load(from)
		if err != nil {
			t.Fatal(err)
		}
		if got.Header.Segment != oldest || len(got.Segments) != cur-oldest+1 || got.Bytes != total || got.From == 0 {
			t.Fatalf("Load(%s): segment %d, %d files, %d bytes, from %d", from, got.Header.Segment, len(got.Segments),
				got.Bytes, got.From)
		}
		// The first events are the snapshot; after it, exactly the written events from where it began.
		mark := got.Events[0]
		if mark.Kind != KindSegment || int(mark.Args[0]) != oldest {
			t.Fatalf("first event %+v, want the segment mark", mark)
		}
		snap := got.Events[1 : 1+mark.Args[1]]
		rest := got.Events[1+mark.Args[1]:]
		at := slices.IndexFunc(evs, func(e Event) bool { return e.TS == rest[0].TS })
		if at < 0 || len(rest) != len(evs)-at {
			t.Fatalf("after the snapshot %d events, want the %d written from %d", len(rest), len(evs)-at, at)
		}
		for i := range rest {
			if !sameEvent(&rest[i], &evs[at+i]) {
				t.Fatalf("event %d after the snapshot differs: %+v, want %+v", i, rest[i], evs[at+i])
			}
		}
		// The snapshot: every name and the metadata, the latest stats, and exactly the live allocations.
		if !slices.Equal(liveAt(snap), liveAt(evs[:at])) {
			t.Fatalf("snapshot allocations %x, want %x", liveAt(snap), liveAt(evs[:at]))
		}
		kinds := map[Kind]int{}
		for _, ev := range snap {
			kinds[ev.Kind]++
		}
		if kinds[KindFunc] != 5 || kinds[KindGroup] != 1 || kinds[KindMeta] != 1 || kinds[KindStats] != 1 ||
			kinds[KindRegionEnter] != 1 || kinds[KindSave] != 1 {
			t.Fatalf("snapshot kinds %v", kinds)
		}
		if ws := got.Warnings(); len(ws) != 1 || !strings.Contains(ws[0], "segment(s) were dropped") ||
			!strings.Contains(ws[0], "covers +") {
			t.Fatalf("warnings %q", ws)
		}
	}
}

func TestSegmentNames(t *testing.T) {
	for _, tc := range []struct {
		path, first string
		k           int
	}{
		{"/d/h.1.swtrace", "/d/h.1.swtrace", 0},
		{"/d/h.1+3.swtrace", "/d/h.1.swtrace", 3},
		{"/d/a.rank2.9+12.swtrace", "/d/a.rank2.9.swtrace", 12},
		{"/d/h.1+03.swtrace", "/d/h.1+03.swtrace", 0}, // not a name the writer makes
		{"/d/h.1+0.swtrace", "/d/h.1+0.swtrace", 0},
		{"/d/h.1+x.swtrace", "/d/h.1+x.swtrace", 0},
		{"/d/notes.txt", "/d/notes.txt", 0},
	} {
		first, k := splitSegment(tc.path)
		if first != tc.first || k != tc.k {
			t.Errorf("splitSegment(%s) = %s, %d; want %s, %d", tc.path, first, k, tc.first, tc.k)
		}
		if tc.k > 0 && SegmentPath(tc.first, tc.k) != tc.path {
			t.Errorf("SegmentPath(%s, %d) = %s", tc.first, tc.k, SegmentPath(tc.first, tc.k))
		}
	}
}

// A process killed as it rotates (the last segment closed, the next one not yet on disk) never closed its
// trace: a segment's close mark says the trace goes on, so the reader says where the written events end.
func TestKilledBetweenSegmentsIsNotClosed(t *testing.T) {
	first, _, cur, oldest := writeSegments(t, t.TempDir(), 64<<10)
	if cur < oldest+2 {
		t.Fatalf("segments %d..%d: the test needs several", oldest, cur)
	}
	oldestPath := SegmentPath(first, oldest)
	whole, err := Load(oldestPath)
	if err != nil || !whole.Finished() || whole.Damaged() {
		t.Fatalf("the whole trace: %v, finished %v, damaged %v", err, whole != nil && whole.Finished(), whole != nil && whole.Damaged())
	}
	if err := os.Remove(SegmentPath(first, cur)); err != nil { // as if killed before the last segment was made
		t.Fatal(err)
	}
	got, err := Load(oldestPath)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Closed || !got.GoesOn || got.Finished() || !got.Damaged() {
		t.Fatalf("closed %v, goes on %v, finished %v, damaged %v: a trace whose next segment never came is not finished",
			got.Closed, got.GoesOn, got.Finished(), got.Damaged())
	}
	ws := strings.Join(got.Warnings(), "\n")
	want := fmt.Sprintf("trace not closed (process killed?): events after #%d ", got.End)
	if !strings.Contains(ws, want) || got.End == 0 || got.End >= whole.End {
		t.Fatalf("warnings %q; want %q, before the whole trace's end #%d", ws, want, whole.End)
	}
}

// TestTraceJoinedToALaterSegmentIsSaid: another trace appended to a segment after the first (files joined) is
// said as for a trace of one file: what a later segment's reading found is the trace's too.
func TestTraceJoinedToALaterSegmentIsSaid(t *testing.T) {
	dir := t.TempDir()
	first, _, cur, oldest := writeSegments(t, dir, 64<<10)
	other := closedTrace(t, false)
	last := SegmentPath(first, cur)
	size := int64(0)
	if fi, err := os.Stat(last); err == nil {
		size = fi.Size()
	}
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(other); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := Load(SegmentPath(first, oldest))
	want := Joined{Name: last, At: size, Bytes: int64(len(other))}
	if err != nil || len(got.Joined) != 1 || got.Joined[0] != want || !got.Damaged() {
		t.Fatalf("%v: joined %+v, want %+v; damaged %v", err, got.Joined, want, got.Damaged())
	}
}
