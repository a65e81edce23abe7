// trace_test.go owns the format's behaviour tests: round trips of every Kind, the header, damaged
// and cut files, limits, errors, FindTraces and the checked-in v1 golden file.
package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/v1.swtrace")

func sameEvent(a, b *Event) bool {
	return a.Kind == b.Kind && a.TS == b.TS && a.TID == b.TID && a.Fn == b.Fn && a.Group == b.Group &&
		a.Handle == b.Handle && a.Ret == b.Ret && a.Args == b.Args && slices.Equal(a.Ptrs, b.Ptrs) && a.Text == b.Text
}

func sameHeader(a, b Header) bool {
	return a.Version == b.Version && a.PID == b.PID && a.Host == b.Host && a.Rank == b.Rank &&
		a.StartUnix == b.StartUnix && slices.Equal(a.Argv, b.Argv)
}

// readAll reads a trace that must be whole.
func readAll(t testing.TB, data []byte) []Event {
	t.Helper()
	evs, err := readPrefix(data)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// readPrefix returns what a reader delivers from data and the error that stopped it (nil at EOF).
func readPrefix(data []byte) ([]Event, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var evs []Event
	for {
		var ev Event
		if err := r.Next(&ev); err == io.EOF {
			return evs, nil
		} else if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// kindEvents holds one event of every Kind laid out as event.go says, plus extreme values.
func kindEvents() []Event {
	big := uint64(math.MaxUint64)
	return []Event{
		{Kind: KindMeta, Text: "policy=safe prefetch=1 min_bytes=0 rank=-1 argv=python train.py"},
		{Kind: KindFunc, Fn: 7, Text: "aclrtMalloc"},
		{Kind: KindFunc, Fn: math.MaxUint16, Text: "aclnnMatmul"},
		{Kind: KindGroup, Group: 1, Text: "layer.0"},
		{Kind: KindCall, TS: 10, TID: 99, Fn: 7, Args: [6]uint64{0x100000000000, 4096, 0}},
		{Kind: KindCall, TS: 5, TID: math.MaxUint32, Fn: math.MaxUint16, Ret: -1,
			Args: [6]uint64{big, 0, big, 1, big - 1, 0x8000000000000000}},
		{Kind: KindRegionEnter, TS: 20, Group: 1, Ptrs: []uint64{0x100000000000, 0x100000001000, 1, big}, Args: [6]uint64{2}},
		{Kind: KindSave, TS: 21, Group: 1, Handle: 1, Args: [6]uint64{0x100000000000, 4096, 1, 3}},
		{Kind: KindRegionExit, TS: 22, Group: 1, Ptrs: []uint64{0x100000002000}},
		{Kind: KindProtect, TS: 23, Group: math.MaxUint32, Ptrs: []uint64{0}},
		{Kind: KindClassify, TS: 24, Group: 1, Handle: 1, Args: [6]uint64{0x100000000000, 4096, 0, 3}},
		{Kind: KindState, TS: 25, Handle: 1, Args: [6]uint64{0, 1, 0x100000000000, 4096}},
		{Kind: KindBackwardEnter, TS: 26, Group: 1},
		{Kind: KindUnpack, TS: 27, Handle: math.MinInt64, Ret: math.MaxInt64},
		{Kind: KindUnpack, TS: 28, Handle: math.MaxInt64, Ret: math.MinInt64},
		{Kind: KindBackwardExit, TS: 29, Group: 1},
		{Kind: KindFault, TS: math.MinInt64, Text: `{"kernel":"aclnnAdd","addr":0,"size":1048576}`},
		{Kind: KindStats, TS: math.MaxInt64, Text: `{"offloaded_storages":3}`},
		{Kind: KindLog, TS: -5, Text: "warn: bad SWAPAGENT_PREFETCH=x, using 1 — ünïcode"},
		{Kind: KindLost, TS: 30, Args: [6]uint64{12345}},
		{Kind: 200, TS: 31, Text: "a kind this build does not know still round-trips"},
		{Kind: KindCall, TS: 32, TID: 99, Fn: 7}, // all-zero args after non-zero ones
		{Kind: KindLost},
	}
}

var testHeader = Header{PID: 1234, Host: "host-a", Rank: -1, StartUnix: 1_700_000_000_123_456_789,
	Argv: []string{"python", "-m", "train", ""}}

func TestRoundTripEveryKind(t *testing.T) {
	want := kindEvents()
	seen := map[Kind]bool{}
	for _, ev := range want {
		seen[ev.Kind] = true
	}
	for k := KindCall; k <= KindLost; k++ {
		if !seen[k] {
			t.Fatalf("kindEvents lacks %v", k)
		}
	}
	for _, every := range []int{0, 1, 2, 5} {
		data := encode(t, testHeader, want, every)
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		h := testHeader
		h.Version = Version
		if !sameHeader(r.Header(), h) {
			t.Errorf("header: got %+v, want %+v", r.Header(), h)
		}
		got := readAll(t, data)
		if len(got) != len(want) {
			t.Fatalf("flush every %d: read %d events, want %d", every, len(got), len(want))
		}
		for i := range want {
			if !sameEvent(&got[i], &want[i]) {
				t.Errorf("flush every %d, event %d (%v): got %+v, want %+v", every, i, want[i].Kind, got[i], want[i])
			}
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{},
		{Version: 9, PID: math.MaxInt32, Host: strings.Repeat("h", 300), Rank: 7, StartUnix: -1},
		testHeader,
	} {
		data := encode(t, h, nil, 0)
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		h.Version = Version
		if !sameHeader(r.Header(), h) {
			t.Errorf("got %+v, want %+v", r.Header(), h)
		}
		var ev Event
		if err := r.Next(&ev); err != io.EOF {
			t.Errorf("trace with no events: Next = %v, want io.EOF", err)
		}
	}
}

// TestTruncatedEveryOffset cuts a small multi-batch trace at every byte: the reader delivers
// exactly the events of the batches before the cut, and reports ErrTruncated inside a batch.
func TestTruncatedEveryOffset(t *testing.T) {
	want := kindEvents()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	// A file cut inside the first header is no trace; one cut inside its copy, after it, one with no event.
	headerEnd := headerSize + int(binary.LittleEndian.Uint32(buf.Bytes()[12:]))
	// ends[i] is the file size after batch i; counts[i] the events in batches 0..i.
	var ends, counts []int
	for i := range want {
		if err := w.Add(&want[i]); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 || i == len(want)-1 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			ends = append(ends, buf.Len())
			counts = append(counts, i+1)
		}
	}
	data := buf.Bytes()
	for cut := 0; cut <= len(data); cut++ {
		got, err := readPrefix(data[:cut])
		if cut < headerEnd {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("cut at %d (inside the header): err = %v, want ErrFormat", cut, err)
			}
			continue
		}
		complete, atBoundary := 0, cut <= 2*headerEnd
		for i, end := range ends {
			if end <= cut {
				complete = counts[i]
			}
			atBoundary = atBoundary || end == cut
		}
		if atBoundary && err != nil {
			t.Fatalf("cut at %d (batch boundary): err = %v, want nil", cut, err)
		}
		if !atBoundary && !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d: err = %v, want ErrTruncated", cut, err)
		}
		if len(got) != complete {
			t.Fatalf("cut at %d: %d events delivered, want %d", cut, len(got), complete)
		}
		for i := range got {
			if !sameEvent(&got[i], &want[i]) {
				t.Fatalf("cut at %d: event %d differs", cut, i)
			}
		}
	}
}

// TestBadHeader damages the header and its copy alike: nothing is left to read.
func TestBadHeader(t *testing.T) {
	good := encode(t, testHeader, kindEvents(), 0)
	hl := headerSize + int(binary.LittleEndian.Uint32(good[12:]))
	both := func(f func([]byte, int) []byte) []byte { return f(f(good, 0), hl) }
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "empty file"},
		{"short", good[:3], "ends inside the header"},
		{"wrong magic", append([]byte("#!/bin/sh\necho not a trace\n"), good[2*hl:]...), "bad magic"},
		{"short wrong magic", []byte("PK"), "bad magic"},
		{"future version", both(func(b []byte, at int) []byte { return setU32(b, at+8, Version+1) }),
			fmt.Sprintf("unsupported trace version %d", Version+1)},
		{"huge header", both(func(b []byte, at int) []byte { return setU32(b, at+12, math.MaxUint32) }),
			"header length 4294967295 exceeds"},
		{"header checksum", both(func(b []byte, at int) []byte { return flip(b, at+21) }), "header checksum mismatch"},
	} {
		_, err := NewReader(bytes.NewReader(tc.data))
		if !errors.Is(err, ErrFormat) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want ErrFormat mentioning %q", tc.name, err, tc.msg)
		}
	}
	path := filepath.Join(t.TempDir(), "empty"+FileSuffix)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(path); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile(empty file) = %v, want ErrFormat naming the path", err)
	}
	if _, _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}

// TestHeaderCopy: any one byte of the header or of its copy, set to any value, costs nothing: every event is read.
func TestHeaderCopy(t *testing.T) {
	want := kindEvents()
	good := encode(t, testHeader, want, 4)
	hl := headerSize + int(binary.LittleEndian.Uint32(good[12:]))
	for off := range 2 * hl {
		for _, v := range []byte{0, 0xff, good[off] ^ 1, good[off] ^ 0x80, 3} {
			bad := bytes.Clone(good)
			bad[off] = v
			f, err := Read("t", bytes.NewReader(bad))
			if err != nil || f.Count != len(want) || f.Damaged() || !sameHeader(f.Header, Header{Version: Version,
				PID: testHeader.PID, Host: testHeader.Host, Rank: testHeader.Rank, StartUnix: testHeader.StartUnix,
				Argv: testHeader.Argv}) {
				t.Fatalf("byte %d set to %#x: %v, %+v", off, v, err, f)
			}
		}
	}
}

func setU32(b []byte, off int, v uint32) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint32(b[off:], v)
	return b
}

func flip(b []byte, off int) []byte {
	b = bytes.Clone(b)
	b[off] ^= 0x40
	return b
}

// TestFlippedByte damages every byte after the header in turn: the reader stops at the damaged
// batch with ErrCorrupt (ErrTruncated when a damaged length points past the end), having delivered
// exactly the events of the batches before it, never a wrong one.
func TestFlippedByte(t *testing.T) {
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 4)
	headerEnd := len(encodeV1(t, testHeader, nil, 0))
	firstFrame := headerEnd
	payloadByte := firstFrame + frameSize + 3
	_, err := readPrefix(flip(data, payloadByte))
	wantMsg := "trace: batch 0 at offset " + strconv.Itoa(firstFrame) + ": checksum mismatch"
	if !errors.Is(err, ErrCorrupt) || err.Error() != wantMsg {
		t.Fatalf("flipped payload byte: err = %v, want %q", err, wantMsg)
	}
	for off := headerEnd; off < len(data); off++ {
		got, err := readPrefix(flip(data, off))
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("flip at %d: err = %v, want ErrCorrupt or ErrTruncated", off, err)
		}
		if len(got) >= len(want) || len(got)%4 != 0 {
			t.Fatalf("flip at %d: %d events delivered, want a whole number of the batches before it", off, len(got))
		}
		for i := range got {
			if !sameEvent(&got[i], &want[i]) {
				t.Fatalf("flip at %d: event %d differs", off, i)
			}
		}
	}
	for off := 0; off < headerEnd; off++ {
		if _, err := readPrefix(flip(data, off)); !errors.Is(err, ErrFormat) {
			t.Fatalf("flip at %d (header): err = %v, want ErrFormat", off, err)
		}
	}
}

// batchBytes frames a hand-made payload with a valid checksum.
func batchBytes(payload []byte, count uint32) []byte {
	b := make([]byte, frameSize, frameSize+len(payload))
	copy(b, batchMagic[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[8:], count)
	crc := crc32.Update(0, castagnoli, b[4:12])
	binary.LittleEndian.PutUint32(b[12:], crc32.Update(crc, castagnoli, payload))
	return append(b, payload...)
}

// TestAbsurdLengths feeds lengths and counts that would need huge allocations: each is refused
// as corrupt before anything that size is allocated.
func TestAbsurdLengths(t *testing.T) {
	head := encodeV1(t, testHeader, nil, 0)
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	hugeFrame := batchBytes([]byte{1, 0}, 1)
	binary.LittleEndian.PutUint32(hugeFrame[4:], math.MaxUint32)
	for _, tc := range []struct {
		name string
		tail []byte
		msg  string
	}{
		{"frame of 4 GiB", hugeFrame, "exceeds the 16777216-byte limit"},
		{"2^60 pointers", batchBytes(cat([]byte{byte(KindRegionEnter)}, uv(bitPtrs), uv(1<<60), []byte{0, 0}), 1), "pointer count"},
		{"pointers past the batch", batchBytes(cat([]byte{byte(KindRegionEnter)}, uv(bitPtrs), uv(1000), []byte{0, 0}), 1), "does not fit"},
		{"text of 2^62 bytes", batchBytes(cat([]byte{byte(KindLog)}, uv(bitText), uv(1<<62), []byte("abc")), 1), "text length"},
		{"text past the batch", batchBytes(cat([]byte{byte(KindLog)}, uv(bitText), uv(100), []byte("abc")), 1), "does not fit"},
		{"count beyond bytes", batchBytes([]byte{1, 0}, 1<<30), "cannot fill"},
		{"zero count", batchBytes(nil, 0), "cannot fill"},
		{"unknown bit", batchBytes(cat([]byte{1}, uv(1<<20)), 1), "presence bitmap"},
		{"kind zero", batchBytes([]byte{0, 0}, 1), "kind 0"},
		{"thread id over 32 bits", batchBytes(cat([]byte{1}, uv(bitTID), uv(1<<40)), 1), "thread id"},
		{"trailing bytes", batchBytes([]byte{1, 0, 7}, 1), "after the last event"},
		{"fewer events than counted", batchBytes([]byte{1, bitTS, 2, 1, bitTS, 2}, 3), "ends before its last event"},
	} {
		_, err := readPrefix(append(bytes.Clone(head), tc.tail...))
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want ErrCorrupt mentioning %q", tc.name, err, tc.msg)
		}
	}
	// A header claiming 2^40 arguments or a huge host name is refused as ErrFormat.
	for _, payload := range [][]byte{
		cat(uv(0), uv(0), uv(0), uv(0), uv(1<<40)),
		cat(uv(0), uv(1<<50), []byte("host")),
	} {
		b := make([]byte, headerSize)
		copy(b, fileMagic[:])
		binary.LittleEndian.PutUint32(b[8:], Version)
		binary.LittleEndian.PutUint32(b[12:], uint32(len(payload)))
		binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(payload, castagnoli))
		if _, err := NewReader(bytes.NewReader(append(b, payload...))); !errors.Is(err, ErrFormat) {
			t.Errorf("header %x: err = %v, want ErrFormat", payload, err)
		}
	}
}

func TestWriterLimits(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []Event{
		{Kind: 0},
		{Kind: KindLog, Text: strings.Repeat("x", MaxText+1)},
		{Kind: KindProtect, Ptrs: make([]uint64, MaxPtrs+1)},
	} {
		if err := w.Add(&ev); err == nil {
			t.Errorf("Add(%v with %d text bytes, %d ptrs) accepted", ev.Kind, len(ev.Text), len(ev.Ptrs))
		}
	}
	// The largest allowed event still fits in a batch the reader accepts.
	biggest := []Event{
		{Kind: KindCall, Fn: 1, Args: [6]uint64{1}},
		{Kind: KindLog, Text: strings.Repeat("x", MaxText)},
		{Kind: KindProtect, Ptrs: make([]uint64, MaxPtrs)},
	}
	for i := range biggest[2].Ptrs {
		biggest[2].Ptrs[i] = uint64(i) * 0x9e3779b97f4a7c15 // deltas of full width
	}
	for i := range biggest {
		if err := w.Add(&biggest[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(&biggest[0]); err == nil {
		t.Error("Add after Close accepted")
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	got := readAll(t, buf.Bytes())
	if len(got) != 3 || !sameEvent(&got[2], &biggest[2]) || !sameEvent(&got[1], &biggest[1]) {
		t.Errorf("largest events did not round-trip")
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestWriterErrorSticks(t *testing.T) {
	if _, err := NewWriter(&failWriter{}, testHeader); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("NewWriter on a failing writer: %v", err)
	}
	w, err := NewWriter(&failWriter{n: 1}, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{Kind: KindLost, Args: [6]uint64{1}}
	if err := w.Add(&ev); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "trace: write batch: disk full") {
		t.Fatalf("Flush = %v", err)
	}
	if err := w.Add(&ev); err == nil {
		t.Error("Add after a failed write accepted")
	}
}

// TestAutoFlush: a long run of Adds is split into batches without any Flush call.
func TestAutoFlush(t *testing.T) {
	evs := synthEvents(50_000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() < 4*flushBytes {
		t.Fatalf("only %d bytes written before Close: no automatic batches", buf.Len())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, buf.Bytes()); len(got) != len(evs) {
		t.Fatalf("read %d events, want %d", len(got), len(evs))
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	want := kindEvents()
	data := encodeV1(t, testHeader, want, 5)
	path := filepath.Join(dir, "h.1.swtrace")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h, got, err := ReadFile(path)
	if err != nil || h.PID != testHeader.PID || len(got) != len(want) {
		t.Fatalf("ReadFile = %+v, %d events, %v", h, len(got), err)
	}
	if err := os.WriteFile(path, data[:len(data)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	_, got, err = ReadFile(path)
	if !errors.Is(err, ErrTruncated) || len(got) != len(want)/5*5 || !strings.HasPrefix(err.Error(), path+": trace: batch 4 at offset ") {
		t.Fatalf("ReadFile(cut) = %d events, %v", len(got), err)
	}
}

func TestFindTraces(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.2.swtrace", "a.rank0.1.swtrace", "a.1.log", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.swtrace"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := FindTraces(dir)
	want := []string{filepath.Join(dir, "a.rank0.1.swtrace"), filepath.Join(dir, "b.2.swtrace")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("FindTraces(dir) = %v, %v; want %v", got, err, want)
	}
	one := filepath.Join(dir, "notes.txt")
	if got, err := FindTraces(one); err != nil || !slices.Equal(got, []string{one}) {
		t.Errorf("FindTraces(file) = %v, %v", got, err)
	}
	if got, err := FindTraces(filepath.Join(dir, "sub.swtrace")); err != nil || got == nil || len(got) != 0 {
		t.Errorf("FindTraces(empty dir) = %#v, %v; want an empty slice", got, err)
	}
	if _, err := FindTraces(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("FindTraces(missing) = %v, want ErrNotExist", err)
	}
}

func TestKindString(t *testing.T) {
	if KindRegionEnter.String() != "region_enter" || KindLost.String() != "lost" || Kind(99).String() != "kind(99)" {
		t.Errorf("Kind.String: %v %v %v", KindRegionEnter, KindLost, Kind(99))
	}
}

// TestGolden pins the formats: each checked-in file must decode to kindEvents, and encoding kindEvents must
// give the same bytes as the file of the version written (for the compressed versions, the same batches once
// decompressed: the compressor's own bytes may change with its library). A change that breaks it needs a new
// Version; the files of older versions stay, read only.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		data  []byte
		bytes func([]byte) []byte
	}{
		{"v1.swtrace", encodeV1(t, testHeader, kindEvents(), 8), func(b []byte) []byte { return b }},
		{"v2.swtrace", nil, nil},
		{"v3.swtrace", nil, nil},
		{"v4.swtrace", encode(t, testHeader, kindEvents(), 8), func(b []byte) []byte { return decompressed(t, b) }},
	} {
		path := filepath.Join("testdata", tc.file)
		if *update && tc.data != nil {
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		h, got, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := kindEvents()
		if h.Host != testHeader.Host || len(got) != len(want) {
			t.Fatalf("golden %s: header %+v, %d events", tc.file, h, len(got))
		}
		for i := range want {
			if !sameEvent(&got[i], &want[i]) {
				t.Errorf("golden %s event %d: got %+v, want %+v", tc.file, i, got[i], want[i])
			}
		}
		if tc.data == nil {
			continue
		}
		if old, _ := os.ReadFile(path); !bytes.Equal(tc.bytes(old), tc.bytes(tc.data)) {
			t.Errorf("encoding kindEvents no longer matches testdata/%s: the format changed (bump Version, or run with -update if that is intended)", tc.file)
		}
	}
}

// decompressed returns the header and the decompressed batches of a compressed file.
func decompressed(t *testing.T, data []byte) []byte {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil || r.stream == nil {
		t.Fatalf("not a compressed trace: %v", err)
	}
	rest, err := io.ReadAll(r.r)
	if err != nil {
		t.Fatal(err)
	}
	hlen := 2 * (int(binary.LittleEndian.Uint32(data[12:])) + headerSize) // the header and its copy
	return append(bytes.Clone(data[:hlen]), rest...)
}
