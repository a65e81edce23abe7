// stream_test.go proves the compressed layer: a damaged byte anywhere after the header costs nothing (its
// block is rebuilt from its group's parity, or it held none) and is reported as repaired; damage the parity
// cannot undo (two blocks of one group) costs at most the rest of its chunk, never an earlier batch and never
// a wrong event; a file cut anywhere keeps every batch whose block is whole.
package trace

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// blockStarts returns the file offset of every block of a version-2 file, and the header's end.
func blockStarts(t *testing.T, data []byte) (starts []int, headerEnd int) {
	t.Helper()
	headerEnd = headerSize + int(binary.LittleEndian.Uint32(data[12:]))
	if binary.LittleEndian.Uint32(data[8:]) >= 4 {
		headerEnd *= 2 // the header's copy
	}
	for off := headerEnd; off < len(data); {
		starts = append(starts, off)
		off += blockFrame + int(binary.LittleEndian.Uint32(data[off+4:]))
	}
	return starts, headerEnd
}

// encodeChunked is encode with the writer's zstd frames restarting every chunk bytes of batches.
func encodeChunked(t *testing.T, evs []Event, per, chunk int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriterOptions(&buf, testHeader, Options{ChunkBytes: chunk})
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if (i+1)%per == 0 {
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

// blocks is a version-3 file's blocks, in file order, with the data blocks' first batch index (-1 for a
// parity block).
type fileBlock struct {
	start, end int
	parity     bool
	batch      int // the batch the block holds, -1 when it holds none (parity, a frame's end)
}

func blocksOf(t *testing.T, data []byte) []fileBlock {
	t.Helper()
	starts, _ := blockStarts(t, data)
	var out []fileBlock
	batch := 0
	for i, off := range starts {
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		b := fileBlock{start: off, end: end, parity: [4]byte(data[off:]) == parityMagic, batch: -1}
		if !b.parity && binary.LittleEndian.Uint32(data[off+8:]) > 0 {
			b.batch = batch
			batch++
		}
		out = append(out, b)
	}
	return out
}

// closeAt is the file offset of the close mark (the last data block).
func closeAt(data []byte, blocks []fileBlock) int {
	for _, b := range blocks {
		if !b.parity && binary.LittleEndian.Uint32(data[b.start+12:])&flagClosed != 0 {
			return b.start
		}
	}
	return len(data)
}

func TestStreamFlippedByte(t *testing.T) {
	want := kindEvents()
	const per = 4
	for _, tc := range []struct {
		name  string
		chunk int // bytes of batches per zstd frame
	}{{"every batch a chunk", 1}, {"one chunk", 1 << 20}} {
		data := encodeChunked(t, want, per, tc.chunk)
		blocks := blocksOf(t, data)
		for _, b := range blocks {
			for off := b.start; off < b.end; off++ {
				f, err := Read("t", bytes.NewReader(flip(data, off)))
				if err != nil {
					t.Fatalf("%s: flip at %d: %v", tc.name, off, err)
				}
				if b.start > closeAt(data, blocks) {
					// The parity after the close mark is never read: damage there is not even seen.
					if f.Count != len(want) || f.Damaged() {
						t.Fatalf("%s: flip at %d, after the close mark: %d events, damaged %v", tc.name, off, f.Count,
							f.Damaged())
					}
					continue
				}
				if len(f.Events) != len(want) || len(f.Gaps) != 0 || f.Truncated || len(f.Repairs) != 1 {
					t.Fatalf("%s: flip at %d: %d of %d events, gaps %v, truncated %v, repairs %v", tc.name, off,
						len(f.Events), len(want), f.Gaps, f.Truncated, f.Repairs)
				}
				for i := range want {
					if !sameEvent(&f.Events[i], &want[i]) {
						t.Fatalf("%s: flip at %d: event %d differs", tc.name, off, i)
					}
				}
				r := f.Repairs[0]
				wantEvents := 0
				if b.batch >= 0 {
					wantEvents = min(per, len(want)-b.batch*per)
				}
				if r.Offset != int64(b.start) || r.Events != wantEvents {
					t.Fatalf("%s: flip at %d (block at %d): repair %+v, want offset %d and %d events", tc.name, off,
						b.start, r, b.start, wantEvents)
				}
			}
		}
	}
}

// Damage its parity cannot undo (two bursts of one group further apart than a row) costs the rest of the
// chunk; the count is exact all the same, from the blocks' event numbers and the close mark.
func TestStreamBeyondParity(t *testing.T) {
	want := synthEvents(60000)
	data := encodeChunked(t, want, 1500, 1<<20)
	blocks := blocksOf(t, data)
	// Two data blocks of the first group, a few rows apart.
	a := blocks[1]
	b := a
	for _, c := range blocks[2:] {
		if c.parity {
			t.Fatal("the first group is too short for this test")
		}
		if c.start-a.start > 3*parityRow {
			b = c
			break
		}
	}
	f, err := Read("t", bytes.NewReader(flip(flip(data, a.start+blockFrame+1), b.start+blockFrame+1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Events) != 1500 || len(f.Gaps) != 1 || len(f.Repairs) != 0 {
		t.Fatalf("%d events, want 1500; gaps %v, repairs %v", len(f.Events), f.Gaps, f.Repairs)
	}
	if g := f.Gaps[0]; g.Offset != int64(a.start) || g.Events != len(want)-1500 || g.First != 1500 {
		t.Fatalf("gap %+v, want it at %d with the exact count of the events after #1500 (%d)", g, a.start,
			len(want)-1500)
	}
}

// On a trace whose groups span many rows, a flipped byte and a burst of damage up to a row long are undone
// wherever they fall.
func TestStreamBursts(t *testing.T) {
	want := synthEvents(60000)
	data := encodeChunked(t, want, 1500, 1<<20)
	starts, headerEnd := blockStarts(t, data)
	if len(starts) < 8 {
		t.Fatalf("only %d blocks", len(starts))
	}
	for i := range 20 {
		off := headerEnd + (len(data)-headerEnd)*i/20
		for _, n := range []int{1, 100, parityRow - 1} {
			bad := bytes.Clone(data)
			for j := off; j < min(off+n, len(bad)); j++ {
				bad[j] ^= byte(0x5c + j)
			}
			f, err := Read("t", bytes.NewReader(bad))
			if err != nil {
				t.Fatalf("burst of %d at %d: %v", n, off, err)
			}
			if len(f.Events) != len(want) || len(f.Gaps) != 0 || f.Truncated || len(f.Repairs) == 0 {
				t.Fatalf("burst of %d at %d: %d of %d events, gaps %v, truncated %v, repairs %v", n, off,
					len(f.Events), len(want), f.Gaps, f.Truncated, f.Repairs)
			}
			for k := range want {
				if !sameEvent(&f.Events[k], &want[k]) {
					t.Fatalf("burst of %d at %d: event %d differs", n, off, k)
				}
			}
		}
	}
}

// A damaged parity block costs nothing, and the group after it is still repaired from its own.
func TestStreamDamagedParityThenBlock(t *testing.T) {
	want := synthEvents(60000)
	data := encodeChunked(t, want, 1500, 1<<20)
	blocks := blocksOf(t, data)
	var par, after int
	for i, b := range blocks {
		if b.parity && par == 0 {
			par, after = b.start+blockFrame+7, blocks[i+2].start+blockFrame+9
		}
	}
	f, err := Read("t", bytes.NewReader(flip(flip(data, par), after)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Events) != len(want) || len(f.Gaps) != 0 || len(f.Repairs) != 2 || f.Repairs[0].Blocks != 0 ||
		f.Repairs[1].Blocks != 1 {
		t.Fatalf("%d of %d events, gaps %v, repairs %+v", len(f.Events), len(want), f.Gaps, f.Repairs)
	}
}
