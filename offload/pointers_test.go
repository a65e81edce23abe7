package offload

import (
	"errors"
	"testing"

	"swapagent/tracker"
)

// badRestore is a framework whose restore op returns a base that is not memory, then behaves.
type badRestore struct {
	*fw
	bad int // restores left that return garbage
}

func (b *badRestore) Restore(h int64, n uint64) (uint64, error) {
	if b.bad > 0 {
		b.bad--
		return 0x12345678, nil
	}
	return b.fw.Restore(h, n)
}

// With the pointer rule on (the agent's engine), a save of garbage is EINVAL and leaves the region as it
// was; a restore op that hands back garbage is ERUNTIME with the bytes kept on host, never copied, and a
// later unpack restores them; a restore op that hands back a new base is followed.
func TestPointerRule(t *testing.T) {
	f := newFW(t)
	ops := &badRestore{fw: f, bad: 1}
	e := NewEngine(Config{Prefetch: 0}, NewMemcpyMover(), ops, nil)
	e.Tracker().CheckPointers(tracker.NewHostMaps(tracker.ProcMaps))
	x, y := f.tensor("x", 8192), f.tensor("y", 8192)
	if err := e.RegionEnter("g", nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ p, n uint64 }{{0x12345678, 4096}, {x.ptr(), 1 << 44}, {^uint64(0) - 64, 4096}} {
		h, err := e.Save("g", c.p, c.n, 0)
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, tracker.ErrPointer) || h != 0 {
			t.Fatalf("save of %#x (%d bytes): %d %v, want ErrInvalid", c.p, c.n, h, err)
		}
	}
	hx, err := e.Save("g", x.ptr(), 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.bind(hx, x)
	hy, _ := e.Save("g", y.ptr(), 8192, 0)
	f.bind(hy, y)
	if err := e.RegionExit("g", nil); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Saves != 2 {
		t.Fatalf("saves %d: refused saves counted", st.Saves)
	}
	if err := e.RegionEnter("k", nil, 0); err != nil { // completes g's offload
		t.Fatal(err)
	}
	if err := e.RegionExit("k", nil); err != nil {
		t.Fatal(err)
	}
	if state(t, e, hx) != Host || f.released(x) != 1 {
		t.Fatalf("x: state %v, released %d", state(t, e, hx), f.released(x))
	}
	if err := e.BackwardEnter("g"); !errors.Is(err, ErrRuntime) {
		t.Fatalf("backward_enter with a garbage restore: %v, want ErrRuntime", err)
	}
	if s := state(t, e, hx); s != Host && s != Device {
		t.Fatalf("x after a garbage restore: %v", s)
	}
	for _, tc := range []struct {
		h int64
		x *tensor
	}{{hx, x}, {hy, y}} {
		base, err := e.Unpack(tc.h)
		if err != nil || base == 0 || base != tc.x.ptr() {
			t.Fatalf("unpack %s: %#x %v (tensor at %#x)", tc.x.name, base, err, tc.x.ptr())
		}
		if string(Bytes(base, 8192)) != string(tc.x.want) {
			t.Fatalf("%s: bytes differ after restore", tc.x.name)
		}
	}
	if st := e.Stats(); st.Errors == 0 {
		t.Fatal("the garbage restore was not counted as an error")
	}
}

// Through the kernel, a memcpy from or into memory that is not there is an error, not a fault.
func TestMemcpyMoverRefusesMissingMemory(t *testing.T) {
	m := NewMemcpyMover()
	buf, err := m.AllocHost(8192)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8192)
	src[8191] = 7
	if _, err := m.CopyOut(buf.Addr, AddrOf(src), 8192); err != nil || Bytes(buf.Addr, 8192)[8191] != 7 {
		t.Fatalf("copy out: %v", err)
	}
	if vmRefused.Load() {
		t.Skip("process_vm_readv refused here: memcpy falls back to a plain copy")
	}
	if _, err := m.CopyOut(buf.Addr, 0x12345678, 4096); !errors.Is(err, ErrRuntime) {
		t.Fatalf("copy out of unmapped memory: %v, want ErrRuntime", err)
	}
	if _, err := m.CopyIn(0x12345678, buf.Addr, 4096); !errors.Is(err, ErrRuntime) {
		t.Fatalf("copy into unmapped memory: %v, want ErrRuntime", err)
	}
}

// Regions may nest: a storage an open region saves while another group's copy of it runs is shared, so
// the completion must not release it (found by the ABI fuzzer: the open region's unpack got address 0).
func TestSavedWhileCopyRunsIsKept(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{}, NewMemcpyMover(), f, nil)
	s := f.tensor("s", 8192)
	if err := e.RegionEnter("a", nil, 0); err != nil {
		t.Fatal(err)
	}
	ha, _ := e.Save("a", s.ptr(), 8192, 0)
	f.bind(ha, s)
	if err := e.RegionExit("a", nil); err != nil { // a's copy of s starts
		t.Fatal(err)
	}
	if err := e.RegionEnter("outer", nil, 0); err != nil {
		t.Fatal(err)
	}
	ho, _ := e.Save("outer", s.ptr(), 8192, 0)
	f.bind(ho, s)
	if err := e.RegionEnter("inner", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.RegionExit("inner", nil); err != nil { // completes a's offload while outer holds s
		t.Fatal(err)
	}
	if f.released(s) != 0 {
		t.Fatal("a storage an open region saved was released")
	}
	if b, err := e.Unpack(ho); err != nil || b != s.ptr() {
		t.Fatalf("unpack in the open region: %#x %v", b, err)
	}
	if err := e.RegionExit("outer", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.KeepReason(ho); r != int(tracker.Shared) {
		t.Fatalf("outer's handle: reason %d, want shared", r)
	}
	for _, g := range []string{"outer", "a"} {
		if err := e.BackwardEnter(g); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := e.Unpack(ha); err != nil || b != s.ptr() || string(Bytes(b, 8192)) != string(s.want) {
		t.Fatalf("unpack in a's backward: %#x %v", b, err)
	}
}

// A storage whose copy back a prefetch launched, saved and unpacked in a region still open: the unpack
// finishes that copy (the job's streams wait for it) before handing out the base (found by the ABI fuzzer:
// the bytes had not landed).
func TestUnpackInOpenRegionFinishesPrefetch(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	s := f.tensor("s", 8192)
	for _, g := range []string{"a", "b"} {
		if err := e.RegionEnter(g, nil, 0); err != nil {
			t.Fatal(err)
		}
		if g == "a" {
			h, _ := e.Save("a", s.ptr(), 8192, 0)
			f.bind(h, s)
		}
		if err := e.RegionExit(g, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RegionEnter("c", nil, 0); err != nil { // b's exit released s; this one completes nothing
		t.Fatal(err)
	}
	if err := e.BackwardEnter("b"); err != nil { // prefetches a: s restored, its copy back launched
		t.Fatal(err)
	}
	hc, err := e.Save("c", s.ptr(), 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.bind(hc, s)
	if st := state(t, e, hc); st != H2D {
		t.Fatalf("c's handle before unpack: %v, want h2d (a's copy back of the same storage)", st)
	}
	if b, err := e.Unpack(hc); err != nil || b != s.ptr() || string(Bytes(b, 8192)) != string(s.want) {
		t.Fatalf("unpack in c's open region: %#x %v", b, err)
	}
	if st := state(t, e, hc); st != Device {
		t.Fatalf("after unpack: %v, want device", st)
	}
}
