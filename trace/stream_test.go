// stream_test.go proves the compressed layer of version 2: a damaged byte anywhere costs at most the rest
// of its chunk (one batch when every batch is a chunk), never an earlier batch and never a wrong event; a
// file cut anywhere keeps every batch whose block is whole.
package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// blockStarts returns the file offset of every block of a version-2 file, and the header's end.
func blockStarts(t *testing.T, data []byte) (starts []int, headerEnd int) {
	t.Helper()
	headerEnd = headerSize + int(binary.LittleEndian.Uint32(data[12:]))
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

func TestStreamFlippedByte(t *testing.T) {
	want := kindEvents()
	const per = 4
	for _, tc := range []struct {
		name  string
		chunk int // bytes of batches per zstd frame
	}{{"every batch a chunk", 1}, {"one chunk", 1 << 20}} {
		data := encodeChunked(t, want, per, tc.chunk)
		starts, headerEnd := blockStarts(t, data)
		batches := (len(want) + per - 1) / per
		for off := headerEnd; off < len(data); off++ {
			k := 0 // the damaged block; block i holds batch i, the last one only the end of the zstd frame
			for k+1 < len(starts) && starts[k+1] <= off {
				k++
			}
			_, got, gaps, err := Salvage(bytes.NewReader(flip(data, off)))
			if err != nil && !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: flip at %d: %v", tc.name, off, err)
			}
			// Kept: the batches before the damage, and with chunks of one batch every batch after it.
			lo := min(k*per, len(want))
			wantHere := want[:lo]
			if tc.chunk == 1 && k < batches {
				wantHere = append(append([]Event(nil), want[:lo]...), want[min(lo+per, len(want)):]...)
			}
			if k >= batches { // the frame's end block: every event is already in
				wantHere = want
			}
			if len(got) != len(wantHere) {
				t.Fatalf("%s: flip at %d (block %d): %d events, want %d (gaps %+v, err %v)", tc.name, off, k,
					len(got), len(wantHere), gaps, err)
			}
			for i := range got {
				if !sameEvent(&got[i], &wantHere[i]) {
					t.Fatalf("%s: flip at %d: event %d differs", tc.name, off, i)
				}
			}
			if len(got) < len(want) && len(gaps) == 0 && !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: flip at %d: %d events lost without a gap or a cut end", tc.name, off, len(want)-len(got))
			}
			if k < batches && len(gaps) == 1 && gaps[0].Offset != int64(starts[k]) {
				t.Fatalf("%s: flip at %d: gap at %d, want the block at %d", tc.name, off, gaps[0].Offset, starts[k])
			}
		}
	}
}
