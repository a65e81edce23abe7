// helpers_test.go owns the tests' traces: synthetic traces shaped like the agent's recordings of
// decoder-sim, built with internal/tracetest (KindFunc/KindGroup names first, runtime calls and ABI
// events in file order).
package replay

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/trace"
)

// builder is tracetest's, with the tensors of op.
type builder struct {
	*tracetest.Builder
	tensor uint64
}

func newBuilder(policy string) *builder {
	b := &builder{Builder: tracetest.New(), tensor: 0x5000}
	b.Text(trace.KindMeta, "policy="+policy+"\nprefetch=1\nmin_bytes=65536")
	return b
}

// op creates one float32 tensor per (addr, extent) and launches kernel on them.
func (b *builder) op(kernel string, tensors ...[2]uint64) {
	var hs []uint64
	for _, t := range tensors {
		b.tensor += 0x100
		b.Call("aclCreateTensor", int64(b.tensor), b.tensor, t[0], t[1], 0, 0, t[1]/4)
		hs = append(hs, b.tensor)
	}
	b.Call(kernel, 0, 0, 0, 0x77, 0, uint64(len(tensors)))
	for _, h := range hs {
		b.Call("aclDestroyTensor", 0, h)
	}
	b.Call("aclrtSynchronizeStream", 0, 0)
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
	b.Call("aclInit", 0)
	b.Malloc(chunk, 64<<20)
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
		b.ABI(trace.KindRegionEnter, g, 0, []uint64{x, cosAddr, sinAddr}, 1)
		var hs []int64
		hs = append(hs, b.Save(g, wAddr+uint64(l)*0x800, 2048, 1))
		b.op("aclnnMatmul", [2]uint64{x, actSz}, [2]uint64{wAddr + uint64(l)*0x800, 2048}, [2]uint64{act(l, 0), actSz})
		hs = append(hs, b.Save(g, x, actSz, 0))
		hs = append(hs, b.Save(g, cosAddr, ropeSz, 0), b.Save(g, act(l, 0), actSz, 0))
		b.op("aclnnMul", [2]uint64{cos, ropeSz}, [2]uint64{act(l, 0), actSz}, [2]uint64{act(l, 1), actSz})
		if nullRope && l >= 2 {
			return b // the recorded run faulted here
		}
		hs = append(hs, b.Save(g, sinAddr, ropeSz, 0), b.Save(g, act(l, 1), actSz, 0))
		b.op("aclnnMul", [2]uint64{sin, ropeSz}, [2]uint64{act(l, 1), actSz}, [2]uint64{act(l, 2), actSz})
		hs = append(hs, b.Save(g, act(l, 2), actSz, 0))
		b.op("aclnnAdd", [2]uint64{act(l, 2), actSz}, [2]uint64{x, actSz}, [2]uint64{act(l, 3), actSz})
		b.ABI(trace.KindRegionExit, g, 0, []uint64{act(l, 3)})
		handles = append(handles, hs)
		x = act(l, 3)
	}
	for l := layers - 1; l >= 0; l-- {
		g := "layer." + itoa(l)
		b.ABI(trace.KindBackwardEnter, g, 0, nil)
		for _, h := range handles[l] {
			b.ABI(trace.KindUnpack, "", h, nil).Ret = 1
		}
		b.op("aclnnMul", [2]uint64{cosAddr, ropeSz}, [2]uint64{act(l, 1), actSz}, [2]uint64{act(l, 4), actSz})
		b.op("aclnnMul", [2]uint64{sinAddr, ropeSz}, [2]uint64{act(l, 2), actSz}, [2]uint64{act(l, 5), actSz})
		b.ABI(trace.KindBackwardExit, g, 0, nil)
	}
	b.Free(chunk)
	b.Call("aclFinalize", 0)
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
	return tracetest.Write(t, filepath.Join(dir, "test.4242"+trace.FileSuffix), tracetest.Header(), b.Events)
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
