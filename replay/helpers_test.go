// helpers_test.go owns the tests' trace builder: synthetic traces shaped like the agent's recordings of
// decoder-sim (KindFunc/KindGroup names first, runtime calls and ABI events in file order).
package replay

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"swapagent/trace"
)

// builder accumulates events the way the agent writes them.
type builder struct {
	events []trace.Event
	fns    map[string]uint16
	groups map[string]uint32
	ts     int64
	tid    uint32
	nextH  int64
	tensor uint64
}

func newBuilder(policy string) *builder {
	b := &builder{fns: map[string]uint16{}, groups: map[string]uint32{}, tid: 100, nextH: 1, tensor: 0x5000}
	b.add(trace.Event{Kind: trace.KindMeta, Text: "policy=" + policy + "\nprefetch=1\nmin_bytes=65536"})
	return b
}

func (b *builder) add(ev trace.Event) {
	b.ts += 1000
	ev.TS = b.ts
	b.events = append(b.events, ev)
}

func (b *builder) fn(name string) uint16 {
	id, ok := b.fns[name]
	if !ok {
		id = uint16(len(b.fns) + 1)
		b.fns[name] = id
		b.add(trace.Event{Kind: trace.KindFunc, Fn: id, Text: name})
	}
	return id
}

func (b *builder) group(name string) uint32 {
	id, ok := b.groups[name]
	if !ok {
		id = uint32(len(b.groups) + 1)
		b.groups[name] = id
		b.add(trace.Event{Kind: trace.KindGroup, Group: id, Text: name})
	}
	return id
}

func (b *builder) call(name string, ret int64, args ...uint64) {
	ev := trace.Event{Kind: trace.KindCall, Fn: b.fn(name), TID: b.tid, Ret: ret}
	copy(ev.Args[:], args)
	b.add(ev)
}

func (b *builder) malloc(ptr, size uint64) { b.call("aclrtMalloc", 0, ptr, size, 0) }
func (b *builder) free(ptr uint64)         { b.call("aclrtFree", 0, ptr) }

// op creates one float32 tensor per (addr, extent) and launches kernel on them.
func (b *builder) op(kernel string, tensors ...[2]uint64) {
	var hs []uint64
	for _, t := range tensors {
		b.tensor += 0x100
		b.call("aclCreateTensor", int64(b.tensor), b.tensor, t[0], t[1], 0, 0, t[1]/4)
		hs = append(hs, b.tensor)
	}
	b.call(kernel, 0, 0, 0, 0x77, 0, uint64(len(tensors)))
	for _, h := range hs {
		b.call("aclDestroyTensor", 0, h)
	}
	b.call("aclrtSynchronizeStream", 0, 0)
}

func (b *builder) abi(kind trace.Kind, group string, handle int64, ptrs []uint64, args ...uint64) {
	ev := trace.Event{Kind: kind, Handle: handle, Ptrs: ptrs, TID: b.tid}
	if group != "" {
		ev.Group = b.group(group)
	}
	copy(ev.Args[:], args)
	b.add(ev)
}

func (b *builder) save(group string, ptr, n uint64, flags uint64) int64 {
	h := b.nextH
	b.nextH++
	b.abi(trace.KindSave, group, h, nil, ptr, n, flags)
	b.events[len(b.events)-1].Ret = h
	return h
}

// Addresses of the synthetic decoder (one 64 MiB pool chunk).
const (
	chunk   = uint64(0x7f0000000000)
	ropeSz  = uint64(1 << 20)
	actSz   = uint64(128 << 10)
	cosAddr = chunk + 0x100000
	sinAddr = chunk + 0x200000
	wAddr   = chunk + 0x300000 // weights, 2 KiB each
	actBase = chunk + 0x400000
)

// decoderTrace builds a decoder-sim-shaped step: layers swapped layers, each receiving x (positional),
// cos and sin (keyword), saving them, its weights (param) and four internal activations, with the Muls
// that read cos/sin in forward and backward. nullRope makes every RoPE tensor after layer.1's exit
// recorded at address 0, as a recording under outputs-only that released them would show (it stops at
// the first such launch, like the faulting run).
func decoderTrace(layers int, nullRope bool) *builder {
	b := newBuilder("outputs-only")
	b.call("aclInit", 0)
	b.malloc(chunk, 64<<20)
	act := func(l, k int) uint64 { return actBase + uint64(l*8+k)*actSz }
	x := act(0, 7) // the embedding copy
	b.op("aclnnInplaceCopy", [2]uint64{x, actSz}, [2]uint64{x, actSz})
	cos, sin := cosAddr, sinAddr
	var handles [][]int64
	for l := 0; l < layers; l++ {
		g := "layer." + itoa(l)
		if nullRope && l >= 2 {
			cos, sin = 0, 0
		}
		b.abi(trace.KindRegionEnter, g, 0, []uint64{x, cosAddr, sinAddr}, 1)
		var hs []int64
		hs = append(hs, b.save(g, wAddr+uint64(l)*0x800, 2048, 1))
		b.op("aclnnMatmul", [2]uint64{x, actSz}, [2]uint64{wAddr + uint64(l)*0x800, 2048}, [2]uint64{act(l, 0), actSz})
		hs = append(hs, b.save(g, x, actSz, 0))
		hs = append(hs, b.save(g, cosAddr, ropeSz, 0), b.save(g, act(l, 0), actSz, 0))
		b.op("aclnnMul", [2]uint64{cos, ropeSz}, [2]uint64{act(l, 0), actSz}, [2]uint64{act(l, 1), actSz})
		if nullRope && l >= 2 {
			return b // the recorded run faulted here
		}
		hs = append(hs, b.save(g, sinAddr, ropeSz, 0), b.save(g, act(l, 1), actSz, 0))
		b.op("aclnnMul", [2]uint64{sin, ropeSz}, [2]uint64{act(l, 1), actSz}, [2]uint64{act(l, 2), actSz})
		hs = append(hs, b.save(g, act(l, 2), actSz, 0))
		b.op("aclnnAdd", [2]uint64{act(l, 2), actSz}, [2]uint64{x, actSz}, [2]uint64{act(l, 3), actSz})
		b.abi(trace.KindRegionExit, g, 0, []uint64{act(l, 3)})
		handles = append(handles, hs)
		x = act(l, 3)
	}
	for l := layers - 1; l >= 0; l-- {
		g := "layer." + itoa(l)
		b.abi(trace.KindBackwardEnter, g, 0, nil)
		for _, h := range handles[l] {
			b.abi(trace.KindUnpack, "", h, nil)
			b.events[len(b.events)-1].Ret = 1
		}
		b.op("aclnnMul", [2]uint64{cosAddr, ropeSz}, [2]uint64{act(l, 1), actSz}, [2]uint64{act(l, 4), actSz})
		b.op("aclnnMul", [2]uint64{sinAddr, ropeSz}, [2]uint64{act(l, 2), actSz}, [2]uint64{act(l, 5), actSz})
		b.abi(trace.KindBackwardExit, g, 0, nil)
	}
	b.free(chunk)
	b.call("aclFinalize", 0)
	return b
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// write stores the events as a trace file in dir and returns its path.
func (b *builder) write(t testing.TB, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, trace.Header{Version: trace.Version, PID: 4242, Host: "test", Rank: -1,
		Argv: []string{"decoder-sim", "--steps", "1"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.events {
		if err := w.Add(&b.events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "test.4242"+trace.FileSuffix)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runMain runs Main and returns its exit code, stdout and stderr.
func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
