// engine_test.go proves the state machine, the schedule, prefetch, the pool, the policies on the RoPE
// scenario of issue 294, the edge semantics and concurrent use, with the real memcpy mover.
package offload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"swapagent/trace"
	"swapagent/tracker"
)

func TestTransition(t *testing.T) {
	legal := map[[2]State]bool{{Device, D2H}: true, {D2H, Host}: true, {Host, H2D}: true, {H2D, Device}: true}
	for from := Device; from <= H2D+1; from++ {
		for to := Device; to <= H2D+1; to++ {
			err := Transition(from, to)
			if legal[[2]State{from, to}] != (err == nil) {
				t.Errorf("%v -> %v: %v", from, to, err)
			}
			if err != nil && !errors.Is(err, ErrState) {
				t.Errorf("%v -> %v: %v is not ErrState", from, to, err)
			}
		}
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{PolicySafe, PolicyOutputsOnly, PolicyOff} {
		if q, err := ParsePolicy(p.String()); err != nil || q != p {
			t.Errorf("%v: %v %v", p, q, err)
		}
	}
	if _, err := ParsePolicy("bogus"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bogus policy: %v", err)
	}
}

// What each policy asks of the rest, in one table: the agent, the C side and the framework's side act on
// these answers, never on the policy's name.
func TestPolicyAnswers(t *testing.T) {
	for _, c := range []struct {
		p                                  Policy
		queueing                           Queueing
		holders, keepInputs, movesExternal bool
	}{
		{PolicySafe, QueueUntilMove, true, true, false},
		{PolicyOutputsOnly, QueueNone, false, false, true},
		{PolicyOff, QueueAll, true, false, false},
	} {
		if q, h, k, m := c.p.Queueing(), c.p.WantsHolders(), c.p.KeepsInputs(), c.p.MovesExternal(); q != c.queueing ||
			h != c.holders || k != c.keepInputs || m != c.movesExternal {
			t.Errorf("%v: queueing %v, holders %v, keeps inputs %v, moves external %v; want %+v", c.p, q, h, k, m, c)
		}
		if a := c.p.Asks(); a.Holders != c.holders || a.KeepInputs != c.keepInputs {
			t.Errorf("%v: asks %+v", c.p, a)
		}
	}
	e := NewEngine(Config{Policy: PolicySafe, MinBytes: 4096}, NewMemcpyMover(), nil, nil)
	if q, below := e.Queueing(); q != QueueUntilMove || below != 4096 {
		t.Errorf("engine queueing %v below %d, want until-move below 4096", q, below)
	}
}

// TestSchedule follows one step of three groups through every state, checking bytes bitwise at the end.
func TestSchedule(t *testing.T) {
	f := newFW(t)
	mv := NewMemcpyMover()
	var evs []Event
	var mu sync.Mutex
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1}, mv, f, ObserverFunc(func(ev Event) {
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
	}))
	ls := f.stack(3, 2, 64<<10)
	f.forward(t, e, ls[0])
	for _, h := range ls[0].hs {
		if s := state(t, e, h); s != D2H {
			t.Fatalf("g0 after its exit: %v", s)
		}
	}
	f.forward(t, e, ls[1])
	for i, h := range ls[0].hs {
		if s := state(t, e, h); s != Host || ls[0].saves[i].buf != nil {
			t.Fatalf("g0 after g1 exit: %v, released %v", s, ls[0].saves[i].buf == nil)
		}
	}
	f.forward(t, e, ls[2])
	if s := state(t, e, ls[1].hs[0]); s != Host {
		t.Fatalf("g1 after g2 exit: %v", s)
	}
	if s := state(t, e, ls[2].hs[0]); s != D2H {
		t.Fatalf("g2 after its exit: %v", s)
	}
	// The first backward completes g2's pending offload, restores g2 and prefetches g1.
	if err := e.BackwardEnter("g2"); err != nil {
		t.Fatal(err)
	}
	want := map[int]State{0: Host, 1: H2D, 2: Device}
	for i, l := range ls {
		for _, h := range l.hs {
			if s := state(t, e, h); s != want[i] {
				t.Fatalf("after backward_enter(g2): g%d is %v, want %v", i, s, want[i])
			}
		}
	}
	for i := 2; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
	st := e.Stats()
	if st.OffloadedStorages != 6 || st.OffloadedBytes != 6*64<<10 || st.RestoredBytes != st.OffloadedBytes ||
		st.Kept.Input != 0 || st.ReleasedExternal != 0 || st.SavedBytes != 0 || st.SavedBytesPeak < 4*64<<10 {
		t.Fatalf("stats %+v", st)
	}
	if g := st.Groups["g1"]; g.Offloaded != 2 || g.Saves != 2 || g.Restored != 2 {
		t.Fatalf("group stats %+v", g)
	}
	if _, err := e.State(ls[0].hs[0]); !errors.Is(err, ErrHandle) {
		t.Fatalf("state after backward_exit: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := map[EventKind]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
	}
	if kinds[EvClassify] != 6 || kinds[EvRelease] != 6 || kinds[EvRestore] != 6 || kinds[EvState] != 24 {
		t.Fatalf("events %v", kinds)
	}
}

func TestPrefetchDepth(t *testing.T) {
	for depth, want := range map[int][]State{
		// states of g0..g3 after backward_enter(g3), then after backward_enter(g2)
		0: {Host, Host, Host, Device, Host, Host, Device},
		1: {Host, Host, H2D, Device, Host, H2D, Device},
		2: {Host, H2D, H2D, Device, H2D, H2D, Device},
	} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			f := newFW(t)
			e := NewEngine(Config{Prefetch: depth}, NewMemcpyMover(), f, nil)
			ls := f.stack(4, 1, 8192)
			for _, l := range ls {
				f.forward(t, e, l)
			}
			if err := e.BackwardEnter("g3"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				if s := state(t, e, ls[i].hs[0]); s != want[i] {
					t.Errorf("after g3: g%d %v, want %v", i, s, want[i])
				}
			}
			f.backward(t, e, ls[3])
			if err := e.BackwardEnter("g2"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if s := state(t, e, ls[i].hs[0]); s != want[4+i] {
					t.Errorf("after g2: g%d %v, want %v", i, s, want[4+i])
				}
			}
			for i := 2; i >= 0; i-- {
				f.backward(t, e, ls[i])
			}
		})
	}
}

func TestUnpackRestoresGroup(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	ls := f.stack(3, 2, 4096)
	for _, l := range ls {
		f.forward(t, e, l)
	}
	// No backward_enter: the first unpack of g1 restores all of g1 and prefetches g0.
	base, err := e.Unpack(ls[1].hs[1])
	if err != nil || base != ls[1].saves[1].ptr() {
		t.Fatalf("unpack: %#x %v", base, err)
	}
	if s := state(t, e, ls[1].hs[0]); s != Device {
		t.Fatalf("sibling handle %v", s)
	}
	if s := state(t, e, ls[0].hs[0]); s != H2D {
		t.Fatalf("prefetched g0 %v", s)
	}
	if s := state(t, e, ls[2].hs[0]); s != Host {
		t.Fatalf("g2 (pending offload completed) %v", s)
	}
	for i := 2; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
}

func TestPoolReuseAcrossSteps(t *testing.T) {
	f := newFW(t)
	mv := NewMemcpyMover()
	e := NewEngine(DefaultConfig(), mv, f, nil)
	ls := f.stack(4, 3, 100000)
	f.step(t, e, ls)
	first := e.Stats()
	for i := 0; i < 3; i++ {
		f.step(t, e, ls)
	}
	st := e.Stats()
	if st.HostAllocs != first.HostAllocs || st.HostReuses < 3*12 || st.OffloadedStorages != 4*12 {
		t.Fatalf("pool: first %+v now %+v", first, st)
	}
	if mv.Buffers() != int(st.HostAllocs) || st.HostBytes != st.HostAllocs*sizeClass(100000) {
		t.Fatalf("buffers %d allocs %d bytes %d", mv.Buffers(), st.HostAllocs, st.HostBytes)
	}
	if err := e.Close(); err != nil || mv.Buffers() != 0 {
		t.Fatalf("close: %v, %d buffers left", err, mv.Buffers())
	}
}

func TestSizeClass(t *testing.T) {
	for n, want := range map[uint64]uint64{1: 4096, 4096: 4096, 4097: 4608, 1 << 20: 1 << 20, 1<<20 + 1: 1<<20 + 1<<17, 100000: 106496} {
		if c := sizeClass(n); c != want {
			t.Errorf("sizeClass(%d) = %d, want %d", n, c, want)
		}
	}
}

func TestDuplicateMovesOnce(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	x := f.tensor("x", 8192)
	l := &layer{name: "g", saves: []*tensor{x, x, x}}
	f.forward(t, e, l)
	if r, _ := e.KeepReason(l.hs[1]); r != int(tracker.Duplicate) {
		t.Fatalf("second save reason %d", r)
	}
	if r, _ := e.KeepReason(l.hs[0]); r != int(tracker.Internal) {
		t.Fatalf("first save reason %d", r)
	}
	if err := e.BackwardEnter("g"); err != nil {
		t.Fatal(err)
	}
	if f.released(x) != 1 {
		t.Fatalf("released %d times", f.released(x))
	}
	f.backward(t, e, l)
	st := e.Stats()
	if st.OffloadedStorages != 1 || st.OffloadedBytes != 8192 || st.Kept.Duplicate != 2 || st.RestoredBytes != 8192 {
		t.Fatalf("stats %+v", st)
	}
}

// rope builds the issue 294 model: 11 swapped layers (layer.0..layer.10) receiving the hidden state
// positionally and RoPE cos/sin (1 MiB each) as keyword inputs that every layer saves for backward.
// layer.11 is not wrapped: it calls nothing.
func rope(f *fw) (ls []*layer, cos, sin *tensor, internal []*tensor) {
	cos, sin = f.tensor("cos", 1<<20), f.tensor("sin", 1<<20)
	hidden := f.tensor("h0", 32<<10)
	for i := 0; i <= 10; i++ {
		a, b := f.tensor(fmt.Sprintf("layer.%d.attn", i), 64<<10), f.tensor(fmt.Sprintf("layer.%d.mlp", i), 48<<10)
		out := f.tensor(fmt.Sprintf("h%d", i+1), 32<<10)
		ls = append(ls, &layer{name: fmt.Sprintf("layer.%d", i), pos: []*tensor{hidden}, kw: []*tensor{cos, sin},
			saves: []*tensor{hidden, cos, sin, a, b}, outs: []*tensor{out}})
		internal = append(internal, a, b)
		hidden = out
	}
	return
}

func TestRoPESafe(t *testing.T) {
	f := newFW(t)
	// A threshold below every activation of rope's (some are under the default 64 KiB): all internals move.
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1, MinBytes: 1024}, NewMemcpyMover(), f, nil)
	ls, cos, sin, internal := rope(f)
	for _, l := range ls {
		f.forward(t, e, l)
		for i := 0; i < 3; i++ { // hidden, cos, sin
			if r, _ := e.KeepReason(l.hs[i]); r != int(tracker.Input) || state(t, e, l.hs[i]) != Device {
				t.Fatalf("%s save %d: reason %d", l.name, i, r)
			}
		}
	}
	if cos.buf == nil || sin.buf == nil || !bytes.Equal(cos.buf, cos.want) {
		t.Fatal("RoPE storage released under safe")
	}
	hi, err := e.Info(ls[3].hs[1])
	if err != nil || hi.Storage.Owner() != "keyword input of layer.0..layer.10" {
		t.Fatalf("owner %q %v", hi.Storage.Owner(), err)
	}
	for i := len(ls) - 1; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
	st := e.Stats()
	var moved uint64
	for _, x := range internal {
		moved += uint64(len(x.want))
	}
	if st.Kept.Input != 33 || st.OffloadedBytes != moved || st.OffloadedStorages != 22 || st.ReleasedExternal != 0 {
		t.Fatalf("stats: kept %+v offloaded %d (want %d) external %d", st.Kept, st.OffloadedBytes, moved, st.ReleasedExternal)
	}
	if f.released(cos)+f.released(sin) != 0 {
		t.Fatal("RoPE released")
	}
}

func TestRoPEOutputsOnly(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Policy: PolicyOutputsOnly, Prefetch: 1, MinBytes: DefaultMinBytes}, NewMemcpyMover(), f, nil)
	ls, cos, sin, _ := rope(f)
	cosAddr := cos.ptr()
	f.forward(t, e, ls[0])
	if r, _ := e.KeepReason(ls[0].hs[1]); r != int(tracker.Internal) {
		t.Fatalf("cos under outputs-only: reason %d", r)
	}
	f.forward(t, e, ls[1]) // layer.1 saves cos/sin too, then layer.0's offload completes: released
	if cos.buf != nil || sin.buf != nil || f.released(cos) != 1 {
		t.Fatal("RoPE not released by layer.0's offload completion")
	}
	if s := state(t, e, ls[1].hs[1]); s != Host {
		t.Fatalf("layer.1's cos handle rides on layer.0's unit: %v", s)
	}
	for _, l := range ls[2:] {
		f.forward(t, e, l) // cos/sin are empty now: skipped like hyper-parallel skips empty storages
	}
	rec, ok := e.Tracker().FindRecent(cosAddr + 100)
	if !ok || rec.Kind != tracker.RecReleased || rec.Group != "layer.0" || rec.Size != 1<<20 {
		t.Fatalf("release history of cos: %+v %v", rec, ok)
	}
	if rs := e.Tracker().FindSize(1<<20, 0); len(rs) != 2 {
		t.Fatalf("releases of 1 MiB: %+v", rs)
	}
	st := e.Stats()
	if st.ReleasedExternal < 2 || st.Kept.Input != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Backward completes: each storage is released once and restored once.
	for i := len(ls) - 1; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
	if f.released(cos) != 1 || f.released(sin) != 1 {
		t.Fatalf("cos released %d, sin %d", f.released(cos), f.released(sin))
	}
}

func TestPolicyOff(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Policy: PolicyOff, Prefetch: 1, MinBytes: 1024}, NewMemcpyMover(), f, nil)
	ls, cos, _, _ := rope(f)
	for _, l := range ls {
		f.forward(t, e, l)
		for _, h := range l.hs {
			if s := state(t, e, h); s != Device {
				t.Fatalf("%s: %v under off", l.name, s)
			}
		}
	}
	if r, _ := e.KeepReason(ls[0].hs[3]); r != int(tracker.Internal) {
		t.Fatalf("classification still recorded: %d", r)
	}
	for i := len(ls) - 1; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
	st := e.Stats()
	if st.OffloadedStorages != 0 || st.Internal != 22 || st.Kept.Input != 33 || f.restores != 0 || cos.buf == nil {
		t.Fatalf("stats %+v", st)
	}
}

func TestNoStorageOpsDegrades(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), nil, nil)
	ls := f.stack(3, 2, 4096)
	f.step(t, e, ls) // never breaks: everything stays on device
	st := e.Stats()
	if st.KeptNoOps != 6 || st.OffloadedStorages != 0 || st.Internal != 6 {
		t.Fatalf("stats %+v", st)
	}
	// Registered later: the next step swaps.
	e.SetStorageOps(f)
	f.step(t, e, ls)
	if st := e.Stats(); st.OffloadedStorages != 6 {
		t.Fatalf("after SetStorageOps: %+v", st)
	}
	// Ops removed while storages are released: the restore cannot happen, and that is reported.
	for _, l := range ls {
		f.forward(t, e, l)
	}
	e.SetStorageOps(nil)
	if err := e.BackwardEnter("g1"); !errors.Is(err, ErrNoOps) {
		t.Fatalf("backward without ops: %v", err)
	}
	if _, err := e.Unpack(ls[0].hs[0]); !errors.Is(err, ErrNoOps) {
		t.Fatalf("unpack without ops: %v", err)
	}
	e.SetStorageOps(f)
	for i := 2; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
}

func TestEdges(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	x := f.tensor("x", 4096)
	if _, err := e.Save("g", x.ptr(), 4096, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("save outside region: %v", err)
	}
	if err := e.RegionExit("g", nil); !errors.Is(err, ErrOrder) {
		t.Fatalf("exit without enter: %v", err)
	}
	if err := e.BackwardEnter("nobody"); !errors.Is(err, ErrGroup) {
		t.Fatalf("backward_enter unknown: %v", err)
	}
	if err := e.BackwardExit("nobody"); !errors.Is(err, ErrGroup) {
		t.Fatalf("backward_exit unknown: %v", err)
	}
	if err := e.Protect("nobody", nil); !errors.Is(err, ErrGroup) {
		t.Fatalf("protect unknown: %v", err)
	}
	if _, err := e.Unpack(1 << 60); !errors.Is(err, ErrHandle) {
		t.Fatalf("unpack unknown: %v", err)
	}
	if _, err := e.KeepReason(-1); !errors.Is(err, ErrHandle) {
		t.Fatalf("keep_reason unknown: %v", err)
	}
	if err := e.RegionEnter("", nil, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty group: %v", err)
	}
	if err := e.RegionEnter("g", []uint64{1}, 2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nPositional > n: %v", err)
	}
	if err := e.RegionEnter("g", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.RegionEnter("g", nil, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("double enter: %v", err)
	}
	if _, err := e.Save("g", 0, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty save: %v", err)
	}
	h1, _ := e.Save("g", x.ptr(), 4096, 0)
	f.bind(h1, x)
	y := f.tensor("y", 4096)
	h2, _ := e.Save("g", y.ptr(), 4096, 0)
	f.bind(h2, y)
	if h1 <= 0 || h2 <= h1 {
		t.Fatalf("handles %d %d", h1, h2)
	}
	// Unpack of a handle still on device just returns its base.
	if b, err := e.Unpack(h1); err != nil || b != x.ptr() {
		t.Fatalf("unpack in region: %#x %v", b, err)
	}
	if err := e.BackwardEnter("g"); !errors.Is(err, ErrOrder) {
		t.Fatalf("backward_enter inside region: %v", err)
	}
	if err := e.RegionExit("g", nil); err != nil {
		t.Fatal(err)
	}
	// A second group's exit completes g's offload; protecting a released storage is ErrState.
	if err := e.RegionEnter("k", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.RegionExit("k", nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Protect("g", []uint64{AddrOf(x.want) ^ 1, 0}); err != nil {
		t.Fatalf("protect of nothing: %v", err)
	}
	xp := uint64(0)
	if hi, err := e.Info(h1); err == nil {
		xp = hi.Storage.Addr
	}
	if err := e.Protect("g", []uint64{xp}); !errors.Is(err, ErrState) {
		t.Fatalf("protect after release: %v", err)
	}
	if r, _ := e.KeepReason(h1); r != int(tracker.Protected) {
		t.Fatalf("reason after protect: %d", r)
	}
	// The new base is what unpack returns.
	b, err := e.Unpack(h1)
	if err != nil || b != x.ptr() || !bytes.Equal(x.buf, x.want) {
		t.Fatalf("unpack after restore: %#x (tensor %#x) %v", b, x.ptr(), err)
	}
	if err := e.BackwardExit("g"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.State(h1); !errors.Is(err, ErrHandle) {
		t.Fatalf("state after backward_exit: %v", err)
	}
	// Groups are reused next step.
	if err := e.RegionEnter("g", nil, 0); err != nil {
		t.Fatalf("next step: %v", err)
	}
	if err := e.RegionExit("g", nil); err != nil {
		t.Fatal(err)
	}
}

// TestSharedFoundLater: a storage g0 offloads that g1 saves too is kept by both before any release.
func TestSharedFoundLater(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	x := f.tensor("x", 16384)
	a, b := f.tensor("a", 16384), f.tensor("b", 16384)
	l0 := &layer{name: "g0", saves: []*tensor{x, a}}
	l1 := &layer{name: "g1", saves: []*tensor{x, b}}
	f.forward(t, e, l0)
	if s := state(t, e, l0.hs[0]); s != D2H {
		t.Fatalf("x in g0: %v", s)
	}
	f.forward(t, e, l1)
	for _, h := range []int64{l0.hs[0], l1.hs[0]} {
		if r, _ := e.KeepReason(h); r != int(tracker.Shared) || state(t, e, h) != Device {
			t.Fatalf("handle %d: reason %d state %v", h, r, state(t, e, h))
		}
	}
	if f.released(x) != 0 || f.released(a) != 1 {
		t.Fatalf("released x %d a %d", f.released(x), f.released(a))
	}
	f.backward(t, e, l1)
	f.backward(t, e, l0)
	if st := e.Stats(); st.ReleasedExternal != 0 || st.Kept.Shared != 2 || st.Internal != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestProtectBeforeAndAfterExit(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, nil)
	x, y := f.tensor("x", 8192), f.tensor("y", 8192)
	if err := e.RegionEnter("g", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Protect("g", []uint64{x.ptr()}); err != nil {
		t.Fatal(err)
	}
	hx, _ := e.Save("g", x.ptr(), 8192, 0)
	hy, _ := e.Save("g", y.ptr(), 8192, 0)
	f.bind(hx, x)
	f.bind(hy, y)
	if err := e.RegionExit("g", nil); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.KeepReason(hx); r != int(tracker.Protected) {
		t.Fatalf("x reason %d", r)
	}
	if s := state(t, e, hy); s != D2H {
		t.Fatalf("y %v", s)
	}
	// Protected after exit, before the release: the offload is undone.
	if err := e.Protect("g", []uint64{y.ptr()}); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.KeepReason(hy); r != int(tracker.Protected) || state(t, e, hy) != Device {
		t.Fatalf("y after protect: %d %v", r, state(t, e, hy))
	}
	if err := e.BackwardEnter("g"); err != nil {
		t.Fatal(err)
	}
	if f.released(y) != 0 || e.Stats().OffloadedStorages != 0 {
		t.Fatal("protected storage released")
	}
}

// TestGenerationInEngine: a storage released by an offload whose address is then reused by a new tensor
// is a different storage with a new generation.
func TestGenerationInEngine(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{}, NewMemcpyMover(), f, nil)
	x := f.tensor("x", 8192)
	old := x.ptr()
	l0 := &layer{name: "g0", saves: []*tensor{x}}
	f.forward(t, e, l0)
	f.forward(t, e, &layer{name: "g1"}) // completes g0: x released
	if x.buf != nil {
		t.Fatal("x not released")
	}
	// A new tensor at the released address (the pool reused it).
	z := &tensor{name: "z", buf: Bytes(old, 8192), want: make([]byte, 8192)}
	copy(z.want, z.buf)
	keep := l0.saves // keeps x's old memory alive through z's view
	if err := e.RegionEnter("g2", nil, 0); err != nil {
		t.Fatal(err)
	}
	hz, err := e.Save("g2", z.ptr(), 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	iz, _ := e.Info(hz)
	ix, _ := e.Info(l0.hs[0])
	if iz.Storage.ID == ix.Storage.ID || iz.Storage.Gen != 2 || ix.Storage.Gen != 1 || !ix.Storage.Released {
		t.Fatalf("x %+v z %+v", ix.Storage, iz.Storage)
	}
	_ = keep
}

func TestConcurrent(t *testing.T) {
	f := newFW(t)
	e := NewEngine(DefaultConfig(), NewMemcpyMover(), f, nil)
	const workers, steps = 4, 20
	stacks := make([][]*layer, workers)
	for w := range stacks {
		stacks[w] = f.stack(3, 2, 8192)
		for i, l := range stacks[w] {
			l.name = fmt.Sprintf("w%d.layer.%d", w, i)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(ls []*layer) {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs <- fmt.Errorf("%v", r)
				}
			}()
			for s := 0; s < steps; s++ {
				f.step(t, e, ls)
			}
		}(stacks[w])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.mu.Lock()
			hs := make([]int64, 0, len(f.byHandle))
			for h := range f.byHandle {
				hs = append(hs, h)
			}
			f.mu.Unlock()
			for _, h := range hs {
				_, _ = e.State(h) // forgotten handles answer ErrHandle
				_, _ = e.KeepReason(h)
			}
			_ = e.Stats()
			_, _ = json.Marshal(e.Stats())
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := e.Stats(); st.OffloadedBytes != st.RestoredBytes || st.SavedBytes != 0 || st.ReleasedExternal != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestObserverMayCallBack(t *testing.T) {
	f := newFW(t)
	var e *Engine
	n := 0
	e = NewEngine(Config{Prefetch: 1}, NewMemcpyMover(), f, ObserverFunc(func(ev Event) {
		n++
		if ev.Handle > 0 {
			_, _ = e.State(ev.Handle)
		}
		_ = e.Stats()
	}))
	f.step(t, e, f.stack(2, 1, 4096))
	if n == 0 {
		t.Fatal("no events")
	}
}

func TestStatsJSON(t *testing.T) {
	e := NewEngine(DefaultConfig(), NewMemcpyMover(), nil, nil)
	e.AddFault(trace.Fault{Kernel: "aclnnMul", Addr: 0, Size: 1 << 20, Storage: "0x1000#1", ReleasedBy: "layer.0",
		Owner: "keyword input of layer.0..layer.10"})
	e.SetPeakDeviceBytes(123)
	b, err := json.Marshal(e.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"offloaded_storages", "offloaded_bytes", "restored_bytes", "kept", "released_external",
		"peak_device_bytes", "faults", "wait_ns", "saved_bytes_peak", "groups"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats JSON lacks %q: %s", k, b)
		}
	}
	kept := m["kept"].(map[string]any)
	for _, k := range []string{"input", "output", "protected", "param", "shared", "small", "duplicate"} {
		if _, ok := kept[k]; !ok {
			t.Errorf("kept lacks %q", k)
		}
	}
	fs := m["faults"].([]any)
	f0 := fs[0].(map[string]any)
	for _, k := range []string{"kernel", "addr", "size", "storage", "released_by", "owner"} {
		if _, ok := f0[k]; !ok {
			t.Errorf("fault lacks %q", k)
		}
	}
	if m["peak_device_bytes"].(float64) != 123 || !strings.Contains(string(b), `"policy":"safe"`) {
		t.Errorf("stats JSON %s", b)
	}
	// An empty engine still says faults: [].
	b, _ = json.Marshal(NewEngine(Config{}, nil, nil, nil).Stats())
	if !strings.Contains(string(b), `"faults":[]`) {
		t.Errorf("empty faults: %s", b)
	}
}

func TestMemcpyMover(t *testing.T) {
	m := NewMemcpyMover()
	b, err := m.AllocHost(100)
	if err != nil || b.Addr == 0 {
		t.Fatal(err)
	}
	src := []byte("0123456789")
	if _, err := m.CopyOut(b.Addr, AddrOf(src), 10); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 10)
	if _, err := m.CopyIn(AddrOf(dst), b.Addr, 10); err != nil || string(dst) != "0123456789" {
		t.Fatalf("%q %v", dst, err)
	}
	if _, err := m.CopyOut(b.Addr, 0, 10); err == nil {
		t.Fatal("copy from address 0 accepted")
	}
	if err := m.FreeHost(b); err != nil || m.FreeHost(b) == nil {
		t.Fatal("free twice accepted")
	}
}

func BenchmarkStep(b *testing.B) {
	f := newFW(b)
	f.fast = true
	e := NewEngine(DefaultConfig(), NewMemcpyMover(), f, nil)
	ls, _, _, internal := rope(f)
	ls = append(ls, &layer{name: "layer.11", pos: []*tensor{ls[10].outs[0]}}) // 12 groups
	var moved int64
	for _, x := range internal {
		moved += int64(len(x.want))
	}
	b.SetBytes(2 * moved) // out and back
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f.step(b, e, ls)
	}
}
