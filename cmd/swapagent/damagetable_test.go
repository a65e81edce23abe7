// damagetable_test.go proves that a reader counts exactly what damage cost: on a real decoder-sim trace (one
// file, and one split into segments), for each kind of damage, the events read plus the events reported lost
// are the events written, nothing is read twice or out of order, and report exits 3 whenever anything was
// lost.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// fileBlock is one block of a version-4 trace file, as its frame says.
type fileBlock struct {
	start, end int
	parity     bool
	flags      uint32
	first      uint64 // a data block's first event index
	events     uint32
}

// blocksIn parses the blocks of an intact version-4 trace and returns them and the end of the header's copy.
func blocksIn(t *testing.T, data []byte) ([]fileBlock, int) {
	t.Helper()
	if v := binary.LittleEndian.Uint32(data[8:]); v != trace.Version || trace.Version < 4 {
		t.Fatalf("trace version %d: this test reads version 4's block layout", v)
	}
	headerEnd := 2 * (20 + int(binary.LittleEndian.Uint32(data[12:])))
	var out []fileBlock
	for off := headerEnd; off < len(data); {
		b := fileBlock{start: off, parity: string(data[off:off+4]) == "SWZP"}
		b.end = off + 20 + int(binary.LittleEndian.Uint32(data[off+4:]))
		b.events = binary.LittleEndian.Uint32(data[off+8:])
		b.flags = binary.LittleEndian.Uint32(data[off+12:])
		if !b.parity {
			b.first = binary.LittleEndian.Uint64(data[off+20:])
		}
		out = append(out, b)
		off = b.end
	}
	return out, headerEnd
}

// frameStarts returns the blocks that start a zstd frame.
func frameStarts(blocks []fileBlock) []fileBlock {
	var out []fileBlock
	for _, b := range blocks {
		if !b.parity && b.flags&1 != 0 {
			out = append(out, b)
		}
	}
	return out
}

func sameEv(a, b *trace.Event) bool {
	return a.Kind == b.Kind && a.TS == b.TS && a.TID == b.TID && a.Fn == b.Fn && a.Group == b.Group &&
		a.Handle == b.Handle && a.Ret == b.Ret && a.Args == b.Args && slices.Equal(a.Ptrs, b.Ptrs) && a.Text == b.Text
}

// inOrder reports whether got is want with some events left out: nothing twice, nothing out of order.
func inOrder(got, want []trace.Event) bool {
	j := 0
	for i := range got {
		for j < len(want) && !sameEv(&got[i], &want[j]) {
			j++
		}
		if j == len(want) {
			return false
		}
		j++
	}
	return true
}

// damageCase is one damaged copy of a trace: its files, written into a directory of their own.
type damageCase struct {
	name  string
	files map[string][]byte // base name -> content
	// cutAt is, for a trace whose tail is gone, the index of the first event that is not in the file: the
	// reader must say the events after it were never written (or are unreadable), and read exactly those before.
	cutAt int
}

// recordTrace runs decoder-sim for 20 steps under the agent with extra settings and returns its trace files.
func recordTrace(t *testing.T, env ...string) map[string][]byte {
	t.Helper()
	out := t.TempDir()
	r := testenv.Run(t, 2*time.Minute, testenv.AgentEnv(t, out, env...), testenv.Path(t, testenv.DecoderSim),
		"--steps", "20")
	if r.Code != 0 {
		t.Fatalf("decoder-sim: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	paths, _ := filepath.Glob(filepath.Join(out, "*.swtrace"))
	files := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = data
	}
	return files
}

func TestDamageTable(t *testing.T) {
	one := recordTrace(t)
	if len(one) != 1 {
		t.Fatalf("%d trace files, want 1", len(one))
	}
	var name string
	var data []byte
	for name, data = range one {
	}
	blocks, headerEnd := blocksIn(t, data)
	frames := frameStarts(blocks)
	if len(frames) < 2 {
		t.Fatalf("%d zstd frames: the test needs two", len(frames))
	}
	with := func(b []byte) map[string][]byte { return map[string][]byte{name: b} }
	splice := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	var cases []damageCase

	// One flipped byte at many offsets: a dozen in the header and its copy, the rest spread over the blocks.
	for i := range 48 {
		off := headerEnd * i / 12
		if i >= 12 {
			off = headerEnd + (len(data)-headerEnd)*(i-12)/36
		}
		bad := bytes.Clone(data)
		bad[off] ^= 0x5a
		cases = append(cases, damageCase{name: fmt.Sprintf("flip at %d", off), files: with(bad), cutAt: -1})
	}
	// Every aligned 4 KiB page after the first, zeroed.
	for off := 4096; off < len(data); off += 4096 {
		bad := bytes.Clone(data)
		clear(bad[off:min(off+4096, len(bad))])
		cases = append(cases, damageCase{name: fmt.Sprintf("zeroed page at %d", off), files: with(bad), cutAt: -1})
	}
	// Cut at block boundaries and inside blocks: what is before the cut is read, the rest is said to be gone.
	for _, i := range []int{1, 2, len(blocks) / 3, len(blocks) / 2, len(blocks) - 3} {
		b := blocks[i]
		firstGone := 0 // the first event of the first data block cut away
		for _, c := range blocks[i:] {
			if !c.parity {
				firstGone = int(c.first)
				break
			}
		}
		cases = append(cases,
			damageCase{name: fmt.Sprintf("cut at block %d", i), files: with(data[:b.start]), cutAt: firstGone},
			damageCase{name: fmt.Sprintf("cut inside block %d", i), files: with(data[:(b.start+b.end)/2]), cutAt: firstGone})
	}
	// A data block in the middle of a frame, twice.
	mid := blocks[len(blocks)/3]
	for mid.parity {
		mid = blocks[slices.Index(blocks, mid)+1]
	}
	cases = append(cases, damageCase{name: "duplicated block", cutAt: -1,
		files: with(splice(data[:mid.end], data[mid.start:mid.end], data[mid.end:]))})
	// The first frame, twice; the second frame before the first; garbage over the end of the first frame (more
	// than the parity undoes) before the intact second one; garbage inserted before it.
	f0, f1 := frames[0].start, frames[1].start
	f2 := len(data)
	if len(frames) > 2 {
		f2 = frames[2].start
	}
	cases = append(cases,
		damageCase{name: "duplicated frame", cutAt: -1, files: with(splice(data[:f1], data[f0:f1], data[f1:]))},
		damageCase{name: "swapped frames", cutAt: -1, files: with(splice(data[:f0], data[f1:f2], data[f0:f1], data[f2:]))},
		damageCase{name: "gap before an intact frame", cutAt: -1,
			files: with(splice(data[:f1-20000], bytes.Repeat([]byte{0x77}, 20000), data[f1:]))},
		damageCase{name: "garbage before an intact frame", cutAt: -1,
			files: with(splice(data[:f1], bytes.Repeat([]byte("SWZB garbage "), 300), data[f1:]))},
	)

	// Segments: a trace split by a limit that keeps all of them.
	segs := recordTrace(t, "SWAPAGENT_TRACE_LIMIT=1M")
	if len(segs) < 3 {
		t.Fatalf("%d segments, want 3 or more", len(segs))
	}
	names := make([]string, 0, len(segs))
	for n := range segs {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return len(a) - len(b) }) // base, base+1, base+2, ...
	slices.SortStableFunc(names[1:], strings.Compare)
	without := func(drop string, set map[string][]byte) map[string][]byte {
		out := map[string][]byte{}
		for n, d := range segs {
			if n != drop {
				out[n] = d
			}
		}
		for n, d := range set {
			out[n] = d
		}
		return out
	}
	s1, s2 := names[1], names[2]
	cases = append(cases,
		damageCase{name: "missing segment", cutAt: -1, files: without(s1, nil)},
		damageCase{name: "truncated segment", cutAt: -1, files: without("", map[string][]byte{s1: segs[s1][:len(segs[s1])/2]})},
		damageCase{name: "duplicated segment", cutAt: -1,
			files: without("", map[string][]byte{strings.Replace(s1, "+1.", "+9.", 1): segs[s1]})},
		damageCase{name: "swapped segments", cutAt: -1, files: without("", map[string][]byte{s1: segs[s2], s2: segs[s1]})},
	)
	for off := 4096; off < len(segs[s1]); off += 4096 {
		bad := bytes.Clone(segs[s1])
		clear(bad[off:min(off+4096, len(bad))])
		cases = append(cases, damageCase{name: fmt.Sprintf("zeroed page at %d of a segment", off), cutAt: -1,
			files: without("", map[string][]byte{s1: bad})})
	}

	// load writes files into a directory of their own and reads the trace they make.
	load := func(files map[string][]byte) (string, *trace.File, error) {
		dir := t.TempDir()
		first := ""
		for n, d := range files {
			if err := os.WriteFile(filepath.Join(dir, n), d, 0o644); err != nil {
				t.Fatal(err)
			}
			if first == "" || len(n) < len(first) {
				first = n
			}
		}
		f, err := trace.Load(filepath.Join(dir, first))
		return dir, f, err
	}
	intact := func(files map[string][]byte) *trace.File {
		_, f, err := load(files)
		if err != nil || f.Damaged() || !f.Closed {
			t.Fatalf("intact trace: %v, damaged %v, closed %v", err, f != nil && f.Damaged(), f != nil && f.Closed)
		}
		return f
	}
	wantOne, wantSegs := intact(one), intact(segs)
	for i, tc := range cases {
		want := wantOne
		if len(tc.files) > 1 {
			want = wantSegs
		}
		dir, f, err := load(tc.files)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		lost := f.Lost()
		if !inOrder(f.Events, want.Events) {
			t.Errorf("%s: events read twice or out of order", tc.name)
		}
		switch {
		case tc.cutAt >= 0:
			// The tail is gone: read and lost account for everything before it, and the reader says where it ends.
			if f.Count+lost != tc.cutAt || int(f.End) != tc.cutAt || f.Closed {
				t.Errorf("%s: %d read + %d lost, end #%d, closed %v; want the %d events before the cut and no close",
					tc.name, f.Count, lost, f.End, f.Closed, tc.cutAt)
			}
		case f.Count+lost != want.Count || !f.Closed:
			t.Errorf("%s: %d read + %d lost = %d, want %d (closed %v)\n%s", tc.name, f.Count, lost, f.Count+lost,
				want.Count, f.Closed, strings.Join(f.Warnings(), "\n"))
		}
		for _, g := range f.Gaps {
			if g.Events < 0 {
				t.Errorf("%s: a gap of unknown size: %s", tc.name, g)
			}
		}
		if strings.HasPrefix(tc.name, "flip") || strings.HasPrefix(tc.name, "zeroed") {
			if lost != 0 || f.Count != want.Count {
				t.Errorf("%s: %d events lost (%d read of %d): this damage is repaired\n%s", tc.name, lost, f.Count,
					want.Count, strings.Join(f.Warnings(), "\n"))
			}
		}
		// report, on a sample (every case would take long): exit 3 whenever anything was lost, the same counts.
		if i%7 != 0 && lost == 0 && tc.cutAt < 0 {
			continue
		}
		r := swapagent(t, nil, "report", "--format", "json", dir)
		var doc struct {
			Processes []struct {
				Events     int    `json:"events"`
				EndEvent   uint64 `json:"end_event"`
				LostRanges []struct {
					Events int `json:"events"`
				} `json:"lost_ranges"`
			}
		}
		if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
			t.Errorf("%s: report: exit %d, %v\n%s", tc.name, r.Code, err, r.Stderr)
			continue
		}
		p, counted := doc.Processes[0], 0
		for _, g := range p.LostRanges {
			counted += g.Events
		}
		if p.Events != f.Count || counted != lost || p.EndEvent != f.End {
			t.Errorf("%s: report says %d events, %d lost, end #%d; the reader %d, %d, #%d", tc.name, p.Events, counted,
				p.EndEvent, f.Count, lost, f.End)
		}
		if (lost > 0 || tc.cutAt >= 0) && r.Code != 3 {
			t.Errorf("%s: %d events lost, report exit %d, want 3\n%s", tc.name, lost, r.Code, r.Stderr)
		}
	}
}

// A copy of a process's trace under another name, or a file named twice, is read once: the copy is left out
// with one line and exit 3, never counted as a second process.
func TestCopyOfATraceIsReadOnce(t *testing.T) {
	files := recordTrace(t)
	if len(files) != 1 {
		t.Fatalf("%d trace files, want one", len(files))
	}
	dir := t.TempDir()
	var data []byte
	for _, b := range files {
		data = b
	}
	a := writeFile(t, dir, "a.swtrace", data)
	writeFile(t, dir, "b.swtrace", data)
	for _, args := range [][]string{{"report", "--format", "json", dir}, {"report", "--format", "json", a, a}} {
		r := swapagent(t, nil, args...)
		var got struct {
			Processes []struct {
				PID int `json:"pid"`
			} `json:"processes"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || r.Code != 3 || len(got.Processes) != 1 ||
			strings.Count(r.Stderr, "a copy, left out") != 1 {
			t.Fatalf("%v: exit %d, %d processes (%v)\n%s", args, r.Code, len(got.Processes), err, r.Stderr)
		}
	}
}
