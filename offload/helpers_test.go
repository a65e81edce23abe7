// helpers_test.go owns the test framework: real host tensors (Go memory) with release and restore by
// "resize", bound to handles the way a framework companion binds them.
package offload

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

type tensor struct {
	name string
	buf  []byte // nil while released
	want []byte // the bytes it must hold after restore
}

func (t *tensor) ptr() uint64 { return AddrOf(t.buf) }

type fw struct {
	t        testing.TB
	mu       sync.Mutex
	byHandle map[int64]*tensor
	releases map[*tensor]int
	restores int
	fast     bool // benchmarks: skip the bitwise check
}

func newFW(t testing.TB) *fw {
	return &fw{t: t, byHandle: map[int64]*tensor{}, releases: map[*tensor]int{}}
}

var seed byte

func (f *fw) tensor(name string, n int) *tensor {
	seed++
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return &tensor{name: name, buf: b, want: append([]byte(nil), b...)}
}

func (f *fw) bind(h int64, t *tensor) {
	f.mu.Lock()
	f.byHandle[h] = t
	f.mu.Unlock()
}

func (f *fw) Release(h int64, ptr, n uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.byHandle[h]
	switch {
	case t == nil:
		return fmt.Errorf("release: unknown handle %d", h)
	case t.buf == nil:
		f.t.Errorf("release of %s twice (handle %d)", t.name, h)
		return fmt.Errorf("already released")
	case t.ptr() != ptr || uint64(len(t.buf)) != n:
		f.t.Errorf("release of %s with ptr %#x n %d, tensor at %#x n %d", t.name, ptr, n, t.ptr(), len(t.buf))
		return fmt.Errorf("bad release")
	}
	t.buf = nil
	f.releases[t]++
	return nil
}

func (f *fw) Restore(h int64, n uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.byHandle[h]
	if t == nil || t.buf != nil {
		return 0, fmt.Errorf("restore of handle %d: not released", h)
	}
	t.buf = make([]byte, n)
	f.restores++
	return t.ptr(), nil
}

func (f *fw) released(t *tensor) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releases[t]
}

// layer is one group of a forward pass: inputs (positional then keyword), saves and outputs.
type layer struct {
	name   string
	pos    []*tensor
	kw     []*tensor
	saves  []*tensor
	params []*tensor
	outs   []*tensor
	hs     []int64 // handles of saves, then params
}

func ptrs(ts ...[]*tensor) []uint64 {
	var out []uint64
	for _, l := range ts {
		for _, t := range l {
			out = append(out, t.ptr())
		}
	}
	return out
}

// forward drives one layer's region; empty (released) storages are skipped like hyper-parallel does.
func (f *fw) forward(t testing.TB, e *Engine, l *layer) {
	t.Helper()
	l.hs = nil
	if err := e.RegionEnter(l.name, ptrs(l.pos, l.kw), len(l.pos)); err != nil {
		t.Fatalf("region_enter %s: %v", l.name, err)
	}
	save := func(x *tensor, flags uint32) {
		if x.buf == nil {
			l.hs = append(l.hs, 0)
			return
		}
		h, err := e.Save(l.name, x.ptr(), uint64(len(x.buf)), flags)
		if err != nil || h <= 0 {
			t.Fatalf("save %s in %s: %d %v", x.name, l.name, h, err)
		}
		f.bind(h, x)
		l.hs = append(l.hs, h)
	}
	for _, x := range l.saves {
		save(x, 0)
	}
	for _, x := range l.params {
		save(x, 1)
	}
	if err := e.RegionExit(l.name, ptrs(l.outs)); err != nil {
		t.Fatalf("region_exit %s: %v", l.name, err)
	}
}

// backward restores a layer, unpacks every handle and checks the bytes bitwise, then forgets it.
func (f *fw) backward(t testing.TB, e *Engine, l *layer) {
	t.Helper()
	if err := e.BackwardEnter(l.name); err != nil {
		t.Fatalf("backward_enter %s: %v", l.name, err)
	}
	all := append(append([]*tensor{}, l.saves...), l.params...)
	for i, h := range l.hs {
		if h == 0 {
			continue
		}
		base, err := e.Unpack(h)
		if err != nil {
			t.Fatalf("unpack %s/%s: %v", l.name, all[i].name, err)
		}
		x := all[i]
		if base == 0 || base != x.ptr() {
			t.Fatalf("unpack %s/%s: base %#x, tensor at %#x", l.name, x.name, base, x.ptr())
		}
		if !f.fast && !bytes.Equal(Bytes(base, uint64(len(x.want))), x.want) {
			t.Fatalf("%s/%s: bytes differ after restore", l.name, x.name)
		}
		if s, _ := e.State(h); s != int(Device) {
			t.Fatalf("%s/%s: state %d after unpack", l.name, x.name, s)
		}
	}
	if err := e.BackwardExit(l.name); err != nil {
		t.Fatalf("backward_exit %s: %v", l.name, err)
	}
}

func (f *fw) step(t testing.TB, e *Engine, ls []*layer) {
	t.Helper()
	for _, l := range ls {
		f.forward(t, e, l)
	}
	for i := len(ls) - 1; i >= 0; i-- {
		f.backward(t, e, ls[i])
	}
}

// stack builds n layers with a hidden input, k internal activations of size bytes each, and an output.
func (f *fw) stack(n, k, size int) []*layer {
	var ls []*layer
	hidden := f.tensor("h0", size)
	for i := 0; i < n; i++ {
		l := &layer{name: fmt.Sprintf("g%d", i), pos: []*tensor{hidden}}
		for j := 0; j < k; j++ {
			l.saves = append(l.saves, f.tensor(fmt.Sprintf("g%d.a%d", i, j), size))
		}
		out := f.tensor(fmt.Sprintf("h%d", i+1), size)
		l.outs = []*tensor{out}
		ls = append(ls, l)
		hidden = out
	}
	return ls
}

func state(t testing.TB, e *Engine, h int64) State {
	t.Helper()
	s, err := e.State(h)
	if err != nil {
		t.Fatalf("state %d: %v", h, err)
	}
	return State(s)
}
