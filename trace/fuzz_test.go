// fuzz_test.go owns FuzzReader: any input must be read without a panic, fail only with the
// documented errors, and whatever the reader accepts must re-encode to the same header and events.
// Each input is tried twice: as a whole file, and as the payload of a batch with a valid frame
// (first byte + 1 = event count), so the event decoder is reached despite the checksums.
package trace

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func FuzzReader(f *testing.F) {
	good := encode(f, testHeader, kindEvents(), 4)
	synth := encode(f, benchHeader, synthEvents(300), 50)
	f.Add(good)
	f.Add(synth)
	f.Add(encode(f, Header{}, nil, 0))
	f.Add(good[:len(good)/2])
	f.Add(good[:headerSize+3])
	f.Add(synth[:len(synth)-7])
	f.Add(flip(good, len(good)-5))
	f.Add([]byte{})
	f.Add([]byte("SWTRACE\x00garbage that is not a header at all"))
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	if golden, err := os.ReadFile(filepath.Join("testdata", "v1.swtrace")); err == nil {
		f.Add(golden)
	}
	if golden, err := os.ReadFile(filepath.Join("testdata", "v2.swtrace")); err == nil {
		f.Add(golden)
	}
	head1 := encodeV1(f, testHeader, nil, 0)
	head2 := encode(f, testHeader, nil, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkTrace(t, data)
		if len(data) > 0 {
			checkTrace(t, append(bytes.Clone(head1), batchBytes(data[1:], uint32(data[0])+1)...))
			// The same payload as a version-2 batch, compressed into a good block.
			var z bytes.Buffer
			enc, err := newEncoder(&z)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = enc.Write(batchBytes(data[1:], uint32(data[0])+1))
			_ = enc.Close()
			checkTrace(t, append(bytes.Clone(head2), appendBlock(nil, nil, z.Bytes(), uint32(data[0])+1, flagNewStream)...))
		}
	})
}

func checkTrace(t *testing.T, data []byte) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		if !errors.Is(err, ErrFormat) {
			t.Fatalf("NewReader: %v does not match ErrFormat", err)
		}
		return
	}
	var evs []Event
	var stop error
	for {
		var ev Event
		if stop = r.Next(&ev); stop != nil {
			break
		}
		evs = append(evs, ev)
	}
	if stop != io.EOF && !errors.Is(stop, ErrCorrupt) && !errors.Is(stop, ErrTruncated) {
		t.Fatalf("Next stopped with %v, not EOF, ErrCorrupt or ErrTruncated", stop)
	}
	var ev Event
	if again := r.Next(&ev); again != stop {
		t.Fatalf("Next after %v returned %v", stop, again)
	}

	// Round trip: what was accepted re-encodes and reads back the same.
	var buf bytes.Buffer
	w, err := NewWriter(&buf, r.Header())
	if err != nil {
		t.Fatalf("re-encoding an accepted header: %v", err)
	}
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatalf("re-encoding accepted event %d: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("re-encoded trace: %v", err)
	}
	h1 := r.Header()
	h1.Version = Version // re-encoding writes the current version
	if !sameHeader(r2.Header(), h1) {
		t.Fatalf("header changed: %+v, then %+v", r.Header(), r2.Header())
	}
	again, err := readPrefix(buf.Bytes())
	if err != nil || len(again) != len(evs) {
		t.Fatalf("re-encoded trace: %d of %d events, %v", len(again), len(evs), err)
	}
	for i := range evs {
		if !sameEvent(&again[i], &evs[i]) {
			t.Fatalf("event %d changed: %+v, then %+v", i, evs[i], again[i])
		}
	}
}
