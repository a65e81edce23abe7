package offload

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// orderMover is a MemcpyMover that logs the ordering calls the engine makes, so a test can check the
// protocol of docs/design.md ("Stream ordering") call by call.
type orderMover struct {
	*MemcpyMover
	log  []string
	next Copy
}

func (m *orderMover) After(streams []uint64) error {
	m.log = append(m.log, fmt.Sprintf("after%v", streams))
	return nil
}

func (m *orderMover) CopyOut(dst, src, n uint64) (Copy, error) {
	_, err := m.MemcpyMover.CopyOut(dst, src, n)
	m.next++
	m.log = append(m.log, fmt.Sprintf("out#%d", m.next))
	return m.next, err
}

func (m *orderMover) CopyIn(dst, src, n uint64) (Copy, error) {
	_, err := m.MemcpyMover.CopyIn(dst, src, n)
	m.next++
	m.log = append(m.log, fmt.Sprintf("in#%d", m.next))
	return m.next, err
}

func (m *orderMover) Wait(c Copy) error {
	m.log = append(m.log, fmt.Sprintf("wait#%d", c))
	return nil
}

func (m *orderMover) Before(c Copy, streams []uint64) error {
	m.log = append(m.log, fmt.Sprintf("before#%d%v", c, streams))
	return nil
}

func (m *orderMover) take() string {
	s := strings.Join(m.log, " ")
	m.log = nil
	return s
}

// TestStreamOrdering checks each rule: copies out start after the region's streams, the release follows
// a host wait for the copy out, copies back start after every stream's queued work, and every stream
// waits for a copy back on the device, with no host wait on the way back.
func TestStreamOrdering(t *testing.T) {
	f := newFW(t)
	mv := &orderMover{MemcpyMover: NewMemcpyMover()}
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1}, mv, f, nil)
	st := e.Streams()
	st.Use(7) // a stream used before any region: not a region stream
	ls := f.stack(3, 1, 64<<10)

	if err := e.RegionEnter("g0", ptrs(ls[0].pos), 1); err != nil {
		t.Fatal(err)
	}
	st.Use(1)
	st.Use(2)
	h0, _ := e.Save("g0", ls[0].saves[0].ptr(), 64<<10, 0)
	f.bind(h0, ls[0].saves[0])
	if err := e.RegionExit("g0", ptrs(ls[0].outs)); err != nil {
		t.Fatal(err)
	}
	if got, want := mv.take(), "after[1 2] out#1"; got != want {
		t.Errorf("g0 exit: %q, want %q", got, want)
	}

	// g1 runs on stream 1 only and declares stream 3 (a stream the agent cannot see).
	if err := e.SetGroupStreams("g1", []uint64{3}); err != nil {
		t.Fatal(err)
	}
	if err := e.RegionEnter("g1", ptrs(ls[1].pos), 1); err != nil {
		t.Fatal(err)
	}
	st.Use(1)
	h1, _ := e.Save("g1", ls[1].saves[0].ptr(), 64<<10, 0)
	f.bind(h1, ls[1].saves[0])
	if err := e.RegionExit("g1", ptrs(ls[1].outs)); err != nil {
		t.Fatal(err)
	}
	// The previous offload completes (host wait, then release) before this group's copies launch.
	if got, want := mv.take(), "wait#1 after[1 3] out#2"; got != want {
		t.Errorf("g1 exit: %q, want %q", got, want)
	}
	if f.released(ls[0].saves[0]) != 1 {
		t.Fatal("g0's storage not released after its copy completed")
	}

	// Backward of g1: complete its offload, bring it back after every stream, order every stream after
	// the copy back; prefetch g0 the same way, without the streams' wait (that comes at g0's turn).
	if err := e.BackwardEnter("g1"); err != nil {
		t.Fatal(err)
	}
	all := "[1 2 7]"
	want := "wait#2 after" + all + " in#3 before#3" + all + " after" + all + " in#4"
	if got := mv.take(); got != want {
		t.Errorf("g1 backward: %q, want %q", got, want)
	}
	if b, err := e.Unpack(h1); err != nil || b != ls[1].saves[0].ptr() {
		t.Fatalf("unpack g1: %#x %v", b, err)
	}
	if err := e.BackwardExit("g1"); err != nil {
		t.Fatal(err)
	}
	if err := e.BackwardEnter("g0"); err != nil {
		t.Fatal(err)
	}
	if got, want := mv.take(), "before#4"+all; got != want {
		t.Errorf("g0 backward: %q, want %q", got, want)
	}
	if strings.Contains(strings.Join(mv.log, " "), "wait#3") {
		t.Error("the host waited for a copy back")
	}
}

// TestUnorderedDropsOrdering: the test-only switch removes After and Before, nothing else.
func TestUnorderedDropsOrdering(t *testing.T) {
	f := newFW(t)
	mv := &orderMover{MemcpyMover: NewMemcpyMover()}
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1, Unordered: true}, mv, f, nil)
	e.Streams().Use(1)
	f.step(t, e, f.stack(3, 2, 4096))
	log := mv.take()
	if strings.Contains(log, "after") || strings.Contains(log, "before") {
		t.Errorf("unordered engine ordered: %s", log)
	}
	if !strings.Contains(log, "out#") || !strings.Contains(log, "in#") || !strings.Contains(log, "wait#") {
		t.Errorf("unordered engine did not move: %s", log)
	}
}

func TestStreamsSince(t *testing.T) {
	var s Streams
	s.Use(5)
	m := s.Mark()
	s.Use(2)
	s.Use(9)
	s.Use(2)
	if got := s.Since(m); !slices.Equal(got, []uint64{2, 9}) {
		t.Errorf("since: %v", got)
	}
	s.Destroyed(9)
	if got := s.All(); !slices.Equal(got, []uint64{2, 5}) {
		t.Errorf("all: %v", got)
	}
}

// TestNoStreamHostWaits: with no stream known (a job of synchronous calls only: sa-regress), nothing on the
// device orders the job's next read after a copy back, so the host waits for it before the unpack
// returns. Without this a synchronous read right after the unpack saw the storage's fresh, empty memory.
func TestNoStreamHostWaits(t *testing.T) {
	f := newFW(t)
	mv := &orderMover{MemcpyMover: NewMemcpyMover()}
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1}, mv, f, nil)
	ls := f.stack(2, 1, 64<<10)
	var hs []int64
	for i, l := range ls {
		g := fmt.Sprintf("g%d", i)
		if err := e.RegionEnter(g, ptrs(l.pos), 1); err != nil {
			t.Fatal(err)
		}
		h, _ := e.Save(g, l.saves[0].ptr(), 64<<10, 0)
		f.bind(h, l.saves[0])
		hs = append(hs, h)
		if err := e.RegionExit(g, ptrs(l.outs)); err != nil {
			t.Fatal(err)
		}
	}
	if f.released(ls[0].saves[0]) != 1 {
		t.Fatal("g0's storage was not released")
	}
	mv.take()
	if err := e.BackwardEnter("g1"); err != nil {
		t.Fatal(err)
	}
	if b, err := e.Unpack(hs[1]); err != nil || b != ls[1].saves[0].ptr() {
		t.Fatalf("unpack g1: %#x %v", b, err)
	}
	if err := e.BackwardExit("g1"); err != nil {
		t.Fatal(err)
	}
	if err := e.BackwardEnter("g0"); err != nil {
		t.Fatal(err)
	}
	if b, err := e.Unpack(hs[0]); err != nil || b != ls[0].saves[0].ptr() {
		t.Fatalf("unpack g0: %#x %v", b, err)
	}
	log := mv.take()
	if strings.Contains(log, "before") {
		t.Errorf("ordered against streams nobody used: %s", log)
	}
	for _, in := range regexp.MustCompile(`in#(\d+)`).FindAllStringSubmatch(log, -1) {
		if !strings.Contains(log, "wait#"+in[1]) {
			t.Errorf("copy back %s was not waited for by the host: %s", in[0], log)
		}
	}
	if !strings.Contains(log, "in#") {
		t.Errorf("nothing came back: %s", log)
	}
}
