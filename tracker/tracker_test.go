// tracker_test.go proves the ownership rules, generations, containment lookups and the history.
package tracker

import (
	"errors"
	"math/rand"
	"testing"

	"swapagent/trace"
)

func TestKeepReasons(t *testing.T) {
	const p, q = 0x1000, 0x9000
	cases := []struct {
		name      string
		inputs    []uint64
		nPos      int
		outputs   []uint64
		protect   []uint64
		flags     uint32
		size      uint64
		otherLive bool // another live group saved the same storage
		want      Reason
		keyword   bool
	}{
		{name: "internal", size: 4096, want: Internal},
		{name: "positional input", inputs: []uint64{p}, nPos: 1, size: 4096, want: Input},
		{name: "keyword input", inputs: []uint64{q, p}, nPos: 1, size: 4096, want: Input, keyword: true},
		{name: "output", outputs: []uint64{p}, size: 4096, want: Output},
		{name: "protected", protect: []uint64{p}, size: 4096, want: Protected},
		{name: "param", flags: FlagParam, size: 4096, want: Param},
		{name: "shared", otherLive: true, size: 4096, want: Shared},
		{name: "small", size: 10, want: Small},
		{name: "input beats output", inputs: []uint64{p}, nPos: 1, outputs: []uint64{p}, size: 4096, want: Input},
		{name: "output beats protected", outputs: []uint64{p}, protect: []uint64{p}, size: 4096, want: Output},
		{name: "protected beats param", protect: []uint64{p}, flags: FlagParam, size: 4096, want: Protected},
		{name: "param beats shared", flags: FlagParam, otherLive: true, size: 4096, want: Param},
		{name: "shared beats small", otherLive: true, size: 10, want: Shared},
		{name: "input beats everything", inputs: []uint64{p}, nPos: 1, outputs: []uint64{p}, protect: []uint64{p},
			flags: FlagParam, otherLive: true, size: 10, want: Input},
		{name: "other pointer is not input", inputs: []uint64{q}, nPos: 1, size: 4096, want: Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := New()
			if c.otherLive {
				mustNil(t, tr.EnterRegion("other", nil, 0))
				if _, err := tr.Save("other", p, c.size, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := tr.ExitRegion("other", nil, 0); err != nil {
					t.Fatal(err)
				}
			}
			mustNil(t, tr.EnterRegion("g", c.inputs, c.nPos))
			if c.protect != nil {
				if _, err := tr.Protect("g", c.protect); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tr.Save("g", p, c.size, c.flags); err != nil {
				t.Fatal(err)
			}
			cls, err := tr.ExitRegion("g", c.outputs, 64)
			if err != nil || len(cls) != 1 {
				t.Fatalf("exit: %v %v", cls, err)
			}
			if cls[0].Reason != c.want || cls[0].Keyword != c.keyword {
				t.Fatalf("reason %v keyword %v, want %v %v (mask %b)", cls[0].Reason, cls[0].Keyword, c.want, c.keyword, cls[0].Match)
			}
			if !cls[0].Match.Has(c.want) && c.want != Internal {
				t.Fatalf("mask %b lacks %v", cls[0].Match, c.want)
			}
		})
	}
}

func TestDuplicateSharesStorage(t *testing.T) {
	tr := New()
	mustNil(t, tr.EnterRegion("g", []uint64{0x1000}, 1))
	a, err := tr.Save("g", 0x5000, 8192, 0)
	mustNil(t, err)
	b, err := tr.Save("g", 0x5000, 8192, 0)
	mustNil(t, err)
	if a.Duplicate || !b.Duplicate || a.Storage != b.Storage {
		t.Fatalf("saves %+v %+v", a, b)
	}
	cls, err := tr.ExitRegion("g", nil, 0)
	mustNil(t, err)
	if cls[0].Reason != Internal || cls[1].Reason != Duplicate {
		t.Fatalf("reasons %v %v", cls[0].Reason, cls[1].Reason)
	}
}

func TestGenerations(t *testing.T) {
	tr := New()
	save := func(g string, ptr uint64) Saved {
		t.Helper()
		mustNil(t, tr.EnterRegion(g, nil, 0))
		s, err := tr.Save(g, ptr, 4096, 0)
		mustNil(t, err)
		_, err = tr.ExitRegion(g, nil, 0)
		mustNil(t, err)
		return s
	}
	tr.Alloc(0x10000, 1<<20)
	s1 := save("a", 0x10000)
	s2 := save("b", 0x10000) // same live storage, another group
	if s1.Storage != s2.Storage || s1.Gen != 1 {
		t.Fatalf("same storage expected: %+v %+v", s1, s2)
	}
	// The runtime frees and re-allocates the address: a new storage, and the old one is marked freed.
	if _, ok := tr.Free(0x10000); !ok {
		t.Fatal("free of a known allocation failed")
	}
	tr.Alloc(0x10000, 1<<20)
	s3 := save("c", 0x10000)
	if s3.Storage == s1.Storage || s3.Gen != 2 {
		t.Fatalf("address reuse must be a new generation: %+v after %+v", s3, s1)
	}
	if si, _ := tr.Storage(s1.Storage); !si.Freed {
		t.Fatalf("old storage not marked freed: %+v", si)
	}
	// Released by an offload, then a new tensor at the same base: new generation again.
	mustNil(t, tr.Released(s3.Storage, "c"))
	s4 := save("d", 0x10000)
	if s4.Storage == s3.Storage || s4.Gen != 3 {
		t.Fatalf("save after release: %+v", s4)
	}
	// Once no live group holds it, a storage is forgotten: a later save is a new generation.
	mustNil(t, tr.Forget("d"))
	s5 := save("d", 0x10000)
	if s5.Gen != 4 {
		t.Fatalf("save after forget: %+v", s5)
	}
	// A size change at a held base is a different storage too.
	s6 := save("e", 0x10000)
	mustNil(t, tr.EnterRegion("f", nil, 0))
	s7, err := tr.Save("f", 0x10000, 8192, 0)
	mustNil(t, err)
	if s6.Storage != s5.Storage || s7.Storage == s6.Storage {
		t.Fatalf("size change: %+v %+v %+v", s5, s6, s7)
	}
}

func TestOwnerAndHistory(t *testing.T) {
	tr := New()
	const cos, sin, hid = 0x100000, 0x200000, 0x300000
	var first Saved
	for i := 0; i <= 10; i++ {
		g := "layer." + itoa(i)
		mustNil(t, tr.EnterRegion(g, []uint64{hid + uint64(i), cos, sin}, 1))
		s, err := tr.Save(g, cos, 1<<20, 0)
		mustNil(t, err)
		if i == 0 {
			first = s
		}
		cls, err := tr.ExitRegion(g, nil, 0)
		mustNil(t, err)
		if cls[0].Reason != Input || !cls[0].Keyword {
			t.Fatalf("%s: %+v", g, cls[0])
		}
	}
	si, ok := tr.Storage(first.Storage)
	if !ok || si.Owner() != "keyword input of layer.0..layer.10" || len(si.Holders) != 11 {
		t.Fatalf("owner %q holders %v", si.Owner(), si.Holders)
	}
	if got, ok := tr.LookupStorage(cos + 100); !ok || got.ID != first.Storage {
		t.Fatalf("lookup storage: %+v %v", got, ok)
	}
	mustNil(t, tr.Released(first.Storage, "layer.0"))
	if _, ok := tr.LookupStorage(cos); ok {
		t.Fatal("a released storage is not on device")
	}
	r, ok := tr.FindRecent(cos + 4)
	if !ok || r.Kind != RecReleased || r.Group != "layer.0" || r.Storage != first.Storage || r.Size != 1<<20 {
		t.Fatalf("history: %+v %v", r, ok)
	}
	if rs := tr.FindSize(1<<20, 5); len(rs) != 1 || rs[0].Base != cos {
		t.Fatalf("by size: %+v", rs)
	}
	if err := tr.Released(first.Storage, "layer.1"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second release: %v", err)
	}
	mustNil(t, tr.Restored(first.Storage, 0x700000))
	if b, ok := tr.Base(first.Storage); !ok || b != 0x700000 {
		t.Fatalf("restored base %#x %v", b, ok)
	}
	si, _ = tr.Storage(first.Storage)
	if si.Released || si.ReleasedBy != "layer.0" || si.Name() != "0x100000#1" {
		t.Fatalf("after restore: %+v %s", si, si.Name())
	}
}

func TestHistoryRing(t *testing.T) {
	tr := New()
	for i := 0; i < HistoryCap+10; i++ {
		tr.Alloc(uint64(0x1000+i*0x100), 0x100)
		tr.Free(uint64(0x1000 + i*0x100))
	}
	if h := tr.History(0); len(h) != HistoryCap || h[0].Base != uint64(0x1000+(HistoryCap+9)*0x100) {
		t.Fatalf("ring: %d records, newest %+v", len(h), h[0])
	}
}

func TestAllocLookup(t *testing.T) {
	tr := New()
	tr.Alloc(0x1000, 0x1000)
	tr.Alloc(0x4000, 0x2000)
	tr.Alloc(0x3000, 0x1000)
	for _, c := range []struct {
		addr uint64
		base uint64
		ok   bool
	}{{0xfff, 0, false}, {0x1000, 0x1000, true}, {0x1fff, 0x1000, true}, {0x2000, 0, false},
		{0x3800, 0x3000, true}, {0x4000, 0x4000, true}, {0x5fff, 0x4000, true}, {0x6000, 0, false}, {0, 0, false}} {
		a, ok := tr.Lookup(c.addr)
		if ok != c.ok || a.Base != c.base {
			t.Errorf("lookup %#x: %+v %v, want %#x %v", c.addr, a, ok, c.base, c.ok)
		}
	}
	// An overlapping allocation means a missed free: the old one goes.
	tr.Alloc(0x4800, 0x100)
	if a, ok := tr.Lookup(0x4000); ok {
		t.Fatalf("stale allocation kept: %+v", a)
	}
	if _, ok := tr.Free(0x4001); ok {
		t.Fatal("free of a non-base address succeeded")
	}
	if n, b := tr.Allocations(); n != 3 || b != 0x2100 {
		t.Fatalf("live %d %#x", n, b)
	}
}

func TestOrderErrors(t *testing.T) {
	tr := New()
	if _, err := tr.Save("g", 1, 1, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("save outside region: %v", err)
	}
	if _, err := tr.ExitRegion("g", nil, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("exit without enter: %v", err)
	}
	mustNil(t, tr.EnterRegion("g", nil, 0))
	if err := tr.EnterRegion("g", nil, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("double enter: %v", err)
	}
	if _, err := tr.Save("g", 0, 8, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("null save: %v", err)
	}
	if err := tr.EnterRegion("h", []uint64{1}, 2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad nPositional: %v", err)
	}
	if _, err := tr.Protect("nobody", []uint64{1}); !errors.Is(err, ErrGroup) {
		t.Fatalf("protect unknown group: %v", err)
	}
	if err := tr.Forget("nobody"); !errors.Is(err, ErrGroup) {
		t.Fatalf("forget unknown group: %v", err)
	}
}

func TestProtectAfterExitReturnsMatches(t *testing.T) {
	tr := New()
	mustNil(t, tr.EnterRegion("g", nil, 0))
	a, _ := tr.Save("g", 0x1000, 4096, 0)
	_, _ = tr.Save("g", 0x8000, 4096, 0)
	_, err := tr.ExitRegion("g", nil, 0)
	mustNil(t, err)
	ids, err := tr.Protect("g", []uint64{0x1000, 0x1000, 0x5555})
	mustNil(t, err)
	if len(ids) != 1 || ids[0] != a.Storage {
		t.Fatalf("ids %v", ids)
	}
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{100, 10000, 100000} {
		b.Run(itoa(n), func(b *testing.B) {
			tr := New()
			addrs := make([]uint64, n)
			for i := range addrs {
				addrs[i] = 0x10000000 + uint64(i)*0x10000
				tr.Alloc(addrs[i], 0x8000)
			}
			rng := rand.New(rand.NewSource(1))
			probe := make([]uint64, 4096)
			for i := range probe {
				probe[i] = addrs[rng.Intn(n)] + uint64(rng.Intn(0x10000))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tr.Lookup(probe[i&4095])
			}
		})
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestGroupList(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"layer.2", "layer.0", "layer.1"}, "layer.0..layer.2"},
		{[]string{"layer.0", "layer.1"}, "layer.0,layer.1"},
		{[]string{"layer.0", "layer.1", "layer.2", "layer.5", "mlp"}, "layer.0..layer.2,layer.5,mlp"},
		{[]string{"a.01", "a.1", "a.2"}, "a.1,a.2,a.01"},
		{[]string{"swap_group_4", "swap_group_0", "swap_group_1", "swap_group_2", "swap_group_3"},
			"swap_group_0..swap_group_4"},
		{[]string{"swap_group_0", "layer.1", "swap_group_1"}, "layer.1,swap_group_0,swap_group_1"},
	} {
		if got := GroupList(c.in); got != c.want {
			t.Errorf("GroupList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestNoteInputGrowsTheOwner(t *testing.T) {
	tr := New()
	tr.Alloc(0x1000, 0x1000)
	if err := tr.EnterRegion("layer.0", []uint64{0x1000}, 0); err != nil {
		t.Fatal(err)
	}
	sv, err := tr.Save("layer.0", 0x1000, 0x100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ExitRegion("layer.0", nil, 0); err != nil {
		t.Fatal(err)
	}
	tr.NoteInput(sv.Storage, "layer.1", true, "")
	tr.NoteInput(sv.Storage, "layer.2", true, "")
	s, ok := tr.Storage(sv.Storage)
	if !ok || s.Owner() != "keyword input of layer.0..layer.2" {
		t.Errorf("owner %q (%v), want keyword input of layer.0..layer.2", s.Owner(), ok)
	}
	tr.NoteInput(12345, "layer.3", true, "") // unknown storage: ignored
}

// A described region names the argument in the owner and keeps the tensor's dtype and shape; a saved
// storage described without a path keeps the path it had as an input.
func TestDescribeNamesTheArgument(t *testing.T) {
	tr := New()
	tr.Alloc(0x1000, 0x1000)
	cos := trace.Tensor{Path: "rotary_cos_sin[0]", DType: "float32", Shape: []int64{32, 1, 1, 16}}
	for i, g := range []string{"layer.0", "layer.1", "layer.2"} {
		if err := tr.EnterRegion(g, []uint64{0x1000}, 0); err != nil {
			t.Fatal(err)
		}
		if err := tr.Describe(g, []uint64{0x1000}, []trace.Tensor{cos}); err != nil {
			t.Fatal(err)
		}
		sv, err := tr.Save(g, 0x1000, 2048, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Describe(g, []uint64{0x1000}, []trace.Tensor{{DType: "float32", Shape: cos.Shape}}); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.ExitRegion(g, nil, 0); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			continue
		}
		s, _ := tr.Storage(sv.Storage)
		if got, want := s.Owner(), "keyword input rotary_cos_sin[0] of layer.0..layer.2"; got != want {
			t.Errorf("owner %q, want %q", got, want)
		}
		if got, want := s.Describe(nil), "float32 [32, 1, 1, 16]"; got != want {
			t.Errorf("describe %q, want %q", got, want)
		}
	}
	if err := tr.Describe("layer.0", []uint64{0x1000}, []trace.Tensor{cos}); !errors.Is(err, ErrOrder) {
		t.Errorf("describe outside a region: %v, want ErrOrder", err)
	}
	if err := tr.Describe("layer.0", []uint64{1, 2}, []trace.Tensor{cos}); !errors.Is(err, ErrInvalid) {
		t.Errorf("describe with mismatched lengths: %v, want ErrInvalid", err)
	}
	guess := func(uint64) string { return "1024 x 1 bf16/fp16" }
	if got, want := (StorageInfo{Size: 2048}).Describe(guess), "1024 x 1 bf16/fp16, guessed from the size"; got != want {
		t.Errorf("undescribed storage %q, want %q", got, want)
	}
}

// The holder rule: a role keeps only while something outside the group's saved tensors holds the storage
// or nothing is known; a protect, a parameter or another group's save keeps it whatever the count.
func TestReleasableRule(t *testing.T) {
	in := Mask(0)
	in, _ = in.With(Input)
	for _, c := range []struct {
		m    Mask
		r    Reason
		h    Holders
		want bool
	}{
		{in, Input, 0, true},
		{in, Input, 1, false},
		{in, Input, HoldersUnknown, false},
		{in | 1<<Param, Input, 0, false},
		{in | 1<<Shared, Input, 0, false},
		{in | 1<<Protected, Input, 0, false},
		{0, Internal, HoldersUnknown, true},
		{1 << Small, Small, 3, true},
	} {
		if got := Releasable(c.m, c.r, c.h); got != c.want {
			t.Errorf("Releasable(%b, %v, %d) = %v, want %v", c.m, c.r, c.h, got, c.want)
		}
	}
}

// The layer's own holders keep nothing; an own count the total cannot hold is no evidence.
func TestOutsideLeavesTheLayersOwnHolders(t *testing.T) {
	in, _ := Mask(0).With(Input)
	for _, c := range []struct {
		h       Holders
		own     int64
		want    Holders
		release bool
	}{
		{0, 0, 0, true},
		{1, 0, 1, false},
		{1, 1, 0, true},
		{3, 1, 2, false},
		{2, 3, HoldersUnknown, false},
		{2, -1, HoldersUnknown, false},
		{HoldersUnknown, 0, HoldersUnknown, false},
		{HoldersUnknown, 1, HoldersUnknown, false},
		{-7, 0, HoldersUnknown, false},
	} {
		got := Outside(c.h, Own{N: c.own, Kinds: 1})
		if got != c.want || Releasable(in, Input, got) != c.release {
			t.Errorf("Outside(%d, own %d) = %d (releasable %v), want %d (%v)", c.h, c.own, got,
				Releasable(in, Input, got), c.want, c.release)
		}
	}
}
