// salvage_test.go proves Resync and Salvage: one damaged byte anywhere after the header costs at most
// the batch it is in (never an earlier or later one, never a wrong event), and the gap says where.
package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// batchStarts returns the file offset of every batch frame in data.
func batchStarts(t *testing.T, data []byte, headerEnd int) []int {
	t.Helper()
	var out []int
	for off := headerEnd; off < len(data); {
		out = append(out, off)
		off += frameSize + int(binary.LittleEndian.Uint32(data[off+4:]))
	}
	return out
}

func TestSalvageFlippedByte(t *testing.T) {
	want := kindEvents()
	const per = 4
	data := encodeV1(t, testHeader, want, per)
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	starts := batchStarts(t, data, headerEnd)
	for off := headerEnd; off < len(data); off++ {
		k := 0 // the damaged batch
		for k+1 < len(starts) && starts[k+1] <= off {
			k++
		}
		lo, hi := k*per, min((k+1)*per, len(want))
		h, got, gaps, err := Salvage(bytes.NewReader(flip(data, off)))
		if errors.Is(err, ErrTruncated) && k == len(starts)-1 && len(gaps) == 0 && len(got) == lo {
			continue // a damaged length in the last batch reads as a batch cut off by the end of the file
		}
		if err != nil || h.PID != testHeader.PID {
			t.Fatalf("flip at %d: err %v", off, err)
		}
		// Every event of the other batches, in order.
		wantHere := append(append([]Event(nil), want[:lo]...), want[hi:]...)
		if len(got) != len(wantHere) {
			t.Fatalf("flip at %d (batch %d): %d events, want %d", off, k, len(got), len(wantHere))
		}
		for i := range got {
			if !sameEvent(&got[i], &wantHere[i]) {
				t.Fatalf("flip at %d: event %d differs", off, i)
			}
		}
		if len(gaps) != 1 {
			t.Fatalf("flip at %d: gaps %+v", off, gaps)
		}
		g := gaps[0]
		inCount := off >= starts[k]+8 && off < starts[k]+12 // the frame's count itself is damaged
		if g.Batch != k || g.Offset != int64(starts[k]) || g.After != lo || !errors.Is(g.Err, ErrCorrupt) && !errors.Is(g.Err, ErrTruncated) ||
			(!inCount && g.Events != hi-lo && g.Events != -1) {
			t.Fatalf("flip at %d: gap %+v, want batch %d at %d with %d events after event %d", off, g, k, starts[k], hi-lo, lo)
		}
		wantBytes := len(data) - starts[k]
		if k+1 < len(starts) {
			wantBytes = starts[k+1] - starts[k]
		}
		if g.Bytes != int64(wantBytes) {
			t.Fatalf("flip at %d: gap of %d bytes, want %d", off, g.Bytes, wantBytes)
		}
		if hi < len(want) && g.ToTS != want[hi].TS || hi == len(want) && g.ToTS != -1 {
			t.Fatalf("flip at %d: gap ToTS %d", off, g.ToTS)
		}
	}
}

func TestSalvagePayloadFlipNamesTheBatch(t *testing.T) {
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 4)
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	starts := batchStarts(t, data, headerEnd)
	_, got, gaps, err := Salvage(bytes.NewReader(flip(data, starts[2]+frameSize+2)))
	if err != nil || len(got) != len(want)-4 || len(gaps) != 1 {
		t.Fatalf("%d events, gaps %+v, err %v", len(got), gaps, err)
	}
	s := gaps[0].String()
	for _, w := range []string{"batch 2 at offset", "4 events lost", "after event 8", "checksum mismatch"} {
		if !strings.Contains(s, w) {
			t.Errorf("gap %q lacks %q", s, w)
		}
	}
	// Next alone still stops at the damage, as before.
	if _, err := readPrefix(flip(data, starts[2]+frameSize+2)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Next without Resync: %v", err)
	}
}

func TestSalvageTruncatedAndClean(t *testing.T) {
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 4)
	// A cut last batch is truncation, not a gap.
	_, got, gaps, err := Salvage(bytes.NewReader(data[:len(data)-2]))
	if !errors.Is(err, ErrTruncated) || len(gaps) != 0 || len(got) != len(want)/4*4 {
		t.Fatalf("cut: %d events, gaps %v, err %v", len(got), gaps, err)
	}
	// Damage and then a cut: the gap and the truncation are both reported.
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	starts := batchStarts(t, data, headerEnd)
	dc := flip(data, starts[1]+frameSize+1)[:len(data)-2]
	_, got, gaps, err = Salvage(bytes.NewReader(dc))
	if !errors.Is(err, ErrTruncated) || len(gaps) != 1 || len(got) != len(want)/4*4-4 {
		t.Fatalf("damage then cut: %d events, gaps %v, err %v", len(got), gaps, err)
	}
	// A clean file has no gaps; Resync with nothing to skip reports io.EOF.
	r, _ := NewReader(bytes.NewReader(data))
	for {
		var ev Event
		if err := r.Next(&ev); err != nil {
			break
		}
	}
	if _, err := r.Resync(); err != io.EOF {
		t.Errorf("Resync at a clean end: %v", err)
	}
}

// TestSalvageGarbageBetweenBatches: bytes that are no batch at all (a damaged length swallowed or a
// stray write) are skipped up to the next good batch.
func TestSalvageGarbageBetweenBatches(t *testing.T) {
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 4)
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	starts := batchStarts(t, data, headerEnd)
	junk := append([]byte("SWBTSWBT"), bytes.Repeat([]byte{0xAB}, 100000)...)
	mixed := append(append(bytes.Clone(data[:starts[3]]), junk...), data[starts[3]:]...)
	_, got, gaps, err := Salvage(bytes.NewReader(mixed))
	if err != nil || len(got) != len(want) || len(gaps) != 1 || gaps[0].Bytes != int64(len(junk)) || gaps[0].Events != -1 {
		t.Fatalf("%d events, gaps %+v, err %v", len(got), gaps, err)
	}
}

// TestReadRule: the one rule every command reads traces by, and the words of its errors and warnings.
func TestReadRule(t *testing.T) {
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 4)
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	starts := batchStarts(t, data, headerEnd)
	last := starts[len(starts)-1]

	// A cut end keeps every earlier batch and says how many bytes it dropped.
	f, err := Read("x.swtrace", bytes.NewReader(data[:len(data)-2]))
	if err != nil || !f.Truncated || len(f.Events) != len(want)/4*4 || f.Cut != int64(len(data)-2-last) {
		t.Fatalf("cut: %+v, %v", f, err)
	}
	w := f.Warnings()
	if len(w) != 1 || w[0] != fmt.Sprintf("x.swtrace: trace ends mid-batch (process killed?): %d events read, "+
		"the last %d bytes dropped", len(f.Events), f.Cut) {
		t.Errorf("warnings %q", w)
	}
	// A damaged batch is skipped and named; the rest is read.
	f, err = Read("x.swtrace", bytes.NewReader(flip(data, starts[1]+frameSize+1)))
	if err != nil || f.Truncated || len(f.Gaps) != 1 || len(f.Events) != len(want)-4 {
		t.Fatalf("damaged: %+v, %v", f, err)
	}
	if w := f.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "x.swtrace: corrupt batch 1 at offset ") {
		t.Errorf("warnings %q", w)
	}
	// Errors: one line naming the input, matching the sentinel.
	only := encodeV1(t, testHeader, want[:3], 0)
	for _, c := range []struct {
		name string
		data []byte
		is   error
		says string
	}{
		{"empty", nil, ErrFormat, "x.swtrace: empty, not a trace"},
		{"not a trace", []byte("hello, world\n"), ErrFormat, "x.swtrace: not a readable trace (not a swapagent trace (bad magic))"},
		{"only batch corrupt", flip(only, headerEnd+frameSize+1), ErrCorrupt, "x.swtrace: corrupt trace, no event could be read (batch 0 at offset"},
		{"cut in the first batch", data[:headerEnd+5], ErrTruncated, "x.swtrace: trace ends inside its first batch, no events to report (batch 0 at offset"},
	} {
		f, err := Read("x.swtrace", bytes.NewReader(c.data))
		if f != nil || !errors.Is(err, c.is) || !strings.HasPrefix(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, %v; want %q", c.name, f, err, c.says)
		}
	}
	// A header and no batch is a trace with no events, not an error.
	if f, err := Read("x.swtrace", bytes.NewReader(data[:headerEnd])); err != nil || len(f.Events) != 0 || f.Truncated {
		t.Errorf("header only: %+v, %v", f, err)
	}
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || err.Error() != dir+": is a directory" {
		t.Errorf("Load(dir): %v", err)
	}
	if _, err := Load(dir + "/nope.swtrace"); err == nil || strings.Count(err.Error(), "nope.swtrace") != 1 {
		t.Errorf("Load(missing): %v", err)
	}
}

// FuzzSalvage: any input is salvaged without a panic, ending only with the documented errors, and
// every gap lies inside the input.
func FuzzSalvage(f *testing.F) {
	good := encode(f, testHeader, kindEvents(), 4)
	f.Add(good)
	f.Add(flip(good, len(good)/2))
	f.Add(append(bytes.Clone(good[:len(good)/2]), good...))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, gaps, err := Salvage(bytes.NewReader(data))
		if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("Salvage: %v", err)
		}
		for _, g := range gaps {
			if g.Offset < 0 || g.Bytes <= 0 || !g.Decompressed && g.Offset+g.Bytes > int64(len(data)) {
				t.Fatalf("gap %+v outside %d bytes", g, len(data))
			}
		}
	})
}

// closedTrace is a closed trace of kindEvents and, with big, events whose text does not compress, each in a
// block of its own: blocks (and their parity) larger than the reader's buffers.
func closedTrace(t *testing.T, big bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	evs := kindEvents()
	if big {
		rng := rand.New(rand.NewPCG(1, 2))
		for range 4 {
			b := make([]byte, 48<<10)
			for i := range b {
				b[i] = 'a' + byte(rng.IntN(26))
			}
			evs = append(evs, Event{Kind: KindMeta, Text: string(b)})
		}
	}
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if big {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTraceAfterCloseIsSaid: nothing after a trace's close mark (and its parity) is read; a second trace there
// (files joined with cat) is said, where it starts and its bytes, and the file counts as damaged (an input
// left out). A trace alone, stray bytes after it and a damaged byte in the parity after its close mark say
// nothing: no event of a trace is in them.
func TestTraceAfterCloseIsSaid(t *testing.T) {
	for _, big := range []bool{false, true} {
		one, two := closedTrace(t, big), closedTrace(t, !big)
		damaged := slices.Clone(one)
		damaged[len(damaged)-3] ^= 0x40 // in the parity block's second copy, after the close mark
		for _, c := range []struct {
			name  string
			data  []byte
			extra int
		}{{"alone", one, 0}, {"joined", append(slices.Clone(one), two...), len(two)},
			{"stray bytes", append(slices.Clone(one), "garbage"...), 0}, {"parity damaged", damaged, 0},
			{"parity damaged, joined", append(slices.Clone(damaged), two...), len(two)}} {
			f, err := Read("t", bytes.NewReader(c.data))
			if err != nil {
				t.Fatal(err)
			}
			if f.Count != len(kindEvents())+map[bool]int{true: 4}[big] || !f.Closed {
				t.Fatalf("big %v, %s: %d events read, closed %v", big, c.name, f.Count, f.Closed)
			}
			var said []string
			for _, w := range f.Warnings() {
				if strings.Contains(w, "another trace follows") {
					said = append(said, w)
				}
			}
			want := fmt.Sprintf("t: another trace follows this one at byte %d (files joined?): its %d bytes not read",
				len(c.data)-c.extra, c.extra)
			if c.extra == 0 && (len(said) != 0 || f.Damaged()) ||
				c.extra > 0 && (len(said) != 1 || !strings.HasPrefix(said[0], want) || !f.Damaged()) {
				t.Errorf("big %v, %s: warnings %q, damaged %v", big, c.name, f.Warnings(), f.Damaged())
			}
		}
	}
}

// TestRepairSaysWhatWasDamaged: a repair names the damaged blocks' own bytes and events, one block or
// several, not the stretch read up to the parity that mended them.
func TestRepairSaysWhatWasDamaged(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	type block struct{ start, end, events int }
	var blocks []block
	evs := kindEvents()
	for i := 0; i < 40; i++ {
		for j := 0; j < 3; j++ {
			if err := w.Add(&evs[(3*i+j)%len(evs)]); err != nil {
				t.Fatal(err)
			}
		}
		at := buf.Len()
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		size := int(binary.LittleEndian.Uint32(buf.Bytes()[at+4:]))
		blocks = append(blocks, block{at, at + blockFrame + size, 3})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	for _, c := range []struct {
		name        string
		first, last int // the blocks damaged
	}{{"one block", 5, 5}, {"three blocks", 5, 7}} {
		d := slices.Clone(data)
		from, to := blocks[c.first].start+blockFrame+2, blocks[c.last].end-3
		if c.first == c.last {
			to = from + 1
		}
		for i := from; i < to; i++ {
			d[i] ^= 0x5a
		}
		f, err := Read("t", bytes.NewReader(d))
		if err != nil || len(f.Gaps) != 0 || f.Count != 120 {
			t.Fatalf("%s: %v, gaps %v, %d events", c.name, err, f.Gaps, f.Count)
		}
		want := Repair{Offset: int64(blocks[c.first].start), Bytes: int64(blocks[c.last].end - blocks[c.first].start),
			Blocks: c.last - c.first + 1, Events: 3 * (c.last - c.first + 1)}
		if len(f.Repairs) != 1 || f.Repairs[0] != want {
			t.Errorf("%s: repairs %+v, want %+v", c.name, f.Repairs, want)
		}
	}
}

// TestTraceAfterAnUnclosedOne: a trace its process never closed (killed), then another (files joined): the
// first ends where the other's header is, its unwritten end said as for any killed process, the other said
// where it starts, with its bytes; no damage is made up of the other's blocks. The same with the first one's
// last block cut short.
func TestTraceAfterAnUnclosedOne(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	evs := kindEvents()
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	killed, two := buf.Bytes(), closedTrace(t, false) // no Close: the events of the last, unflushed batch are lost
	read := len(evs) / 4 * 4
	for _, c := range []struct {
		name  string
		first []byte
		count int
		gaps  int // the block cut short: damage at the trace's end
	}{{"killed", killed, read, 0}, {"killed mid-block", killed[:len(killed)-5], read - 4, 1}} {
		f, err := Read("t", bytes.NewReader(append(slices.Clone(c.first), two...)))
		if err != nil {
			t.Fatal(err)
		}
		want := Joined{Name: "t", At: int64(len(c.first)), Bytes: int64(len(two))}
		if f.Count != c.count || len(f.Gaps) != c.gaps || f.Refused != 0 || len(f.Joined) != 1 || f.Joined[0] != want {
			t.Errorf("%s: %d events (want %d), gaps %v, refused %d, joined %+v (want %+v)", c.name, f.Count, c.count,
				f.Gaps, f.Refused, f.Joined, want)
		}
	}
}
