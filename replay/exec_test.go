// exec_test.go proves --exec against the emulator (build/ascend/latest): clean replays, a use after
// free and a null address reproduced as the runtime's 507015, and the address mapping.
package replay

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// useEmulator points FindRuntime at the built emulator.
func useEmulator(t *testing.T) {
	t.Helper()
	t.Setenv("ASCEND_HOME_PATH", filepath.Dir(filepath.Dir(testenv.Path(t, testenv.ACLLib))))
}

const recA, recB = uint64(0x7e0000000000), uint64(0x7e0000400000)

func execTrace(t *testing.T, b *builder) (*ExecResult, int, string) {
	t.Helper()
	useEmulator(t)
	p := b.write(t, t.TempDir())
	code, out, errs := runMain("--exec", p)
	_, evs, err := trace.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r := Exec(evs)
	return r, code, out + errs
}

func TestExecClean(t *testing.T) {
	b := newBuilder("safe")
	b.Call("aclInit", 0)
	b.Call("aclrtCreateStream", 0, 0x55)
	b.Malloc(recA, 1<<20)
	b.Call("aclrtMallocHost", 0, 0x1000000, 8192)
	b.Call("aclrtMemcpy", 0, recA, 0x2000000, 4096, 1, 4096) // pageable host source: scratch
	b.Call("aclrtMemcpyAsync", 0, recA+4096, 0x1000000, 8192, 1, 8192, 0x55)
	b.Call("aclrtMemsetAsync", 0, recA+65536, 4096, 0, 4096, 0x55)
	b.op("aclnnMul", [2]uint64{recA, 4096}, [2]uint64{recA + 4096, 4096}, [2]uint64{recA + 8192, 4096})
	b.op("aclnnAdd", [2]uint64{recA, 4096}, [2]uint64{recA + 4096, 1024}, [2]uint64{recA + 8192, 4096})
	b.op("aclnnMatmul", [2]uint64{recA, 4096}, [2]uint64{recA + 4096, 4096}, [2]uint64{recA + 8192, 4096})
	b.Call("aclrtMemcpy", 0, 0x3000000, recA+8192, 4096, 2, 4096)
	b.Call("aclrtSynchronizeStream", 0, 0x55)
	b.Call("aclrtFreeHost", 0, 0x1000000)
	b.Free(recA)
	b.Call("aclrtDestroyStream", 0, 0x55)
	b.Call("aclFinalize", 0)
	r, code, out := execTrace(t, b)
	if code != ExitClean || r.Fault || r.First != nil {
		t.Fatalf("exit %d, first %+v\n%s", code, r.First, out)
	}
	if r.RealOps != 2 || r.Touches != 3 || r.Issued["aclrtMalloc"] != 1 || r.Issued["aclCreateTensor"] != 9 ||
		r.Issued["aclrtMemcpy"] != 2 || r.Skipped["aclInit"] != 1 || r.Unmapped != 0 {
		t.Errorf("result %+v", r)
	}
	if !strings.Contains(out, "ran the trace clean") {
		t.Errorf("output:\n%s", out)
	}
}

func TestExecUseAfterFree(t *testing.T) {
	b := newBuilder("outputs-only")
	b.Malloc(recA, 1<<20)
	b.Malloc(recB, 1<<20)
	b.Free(recA)
	b.op("aclnnMul", [2]uint64{recA + 512, 4096}, [2]uint64{recB, 4096}, [2]uint64{recB + 4096, 4096})
	b.Events[len(b.Events)-1].Ret = 507015 // the recorded sync failed
	b.Free(recB)
	r, code, out := execTrace(t, b)
	if code != ExitViolation || r.First == nil || r.First.Code != 507015 || !r.Reproduced {
		t.Fatalf("exit %d, first %+v\n%s", code, r.First, out)
	}
	if r.First.Call != "aclrtSynchronizeStream" || !strings.Contains(strings.Join(r.First.ErrMsg, "\n"), "fault kernel_name=Mul_") {
		t.Errorf("first %+v", r.First)
	}
	if !strings.Contains(out, "fault reproduced") {
		t.Errorf("output:\n%s", out)
	}
}

func TestExecNullAddress(t *testing.T) {
	b := newBuilder("outputs-only")
	b.Malloc(recA, 4<<20)
	b.op("aclnnMul", [2]uint64{0, 1 << 20}, [2]uint64{recA, 1 << 20}, [2]uint64{recA + (1 << 20), 1 << 20})
	b.Free(recA)
	r, code, out := execTrace(t, b)
	if code != ExitViolation || r.First == nil || r.First.Code != 507015 || r.Reproduced {
		t.Fatalf("exit %d, first %+v\n%s", code, r.First, out)
	}
	msg := strings.Join(r.First.ErrMsg, "\n")
	if !strings.Contains(msg, "addr:0") || !strings.Contains(msg, "size:1048576 bytes") {
		t.Errorf("err msg:\n%s", msg)
	}
}

// TestExecTouchFaults: an op the replay cannot compute still faults on a bad address (the touch).
func TestExecTouchFaults(t *testing.T) {
	b := newBuilder("outputs-only")
	b.Malloc(recA, 1<<20)
	b.op("aclnnMatmul", [2]uint64{recA, 4096}, [2]uint64{0, 8192}, [2]uint64{recA + 8192, 4096})
	r, code, out := execTrace(t, b)
	if code != ExitViolation || r.First == nil || r.First.Code != 507015 {
		t.Fatalf("exit %d, first %+v\n%s", code, r.First, out)
	}
	if !strings.Contains(strings.Join(r.First.ErrMsg, "\n"), "InplaceCopy") {
		t.Errorf("err msg %q", r.First.ErrMsg)
	}
}

func TestExecBadInput(t *testing.T) {
	useEmulator(t)
	dir := t.TempDir()
	decoderTrace(2, false).write(t, dir)
	b := newBuilder("safe")
	b.Malloc(recA, 4096)
	// Two traces in one directory: --exec replays one process.
	p := b.write(t, t.TempDir())
	if err := copyFile(p, filepath.Join(dir, "other.1"+trace.FileSuffix)); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain("--exec", dir); code != ExitBadInput {
		t.Errorf("two traces: exit %d (%s)", code, errs)
	}
	if code, _, errs := runMain("--exec", filepath.Join(dir, "missing.swtrace")); code != ExitBadInput {
		t.Errorf("missing: exit %d (%s)", code, errs)
	}
}

// TestArbitraryExecNeverCrashes: nonsense arguments in a valid file (random sizes, addresses, stream
// handles) give runtime errors, never a crash of the replay or of the runtime's workers.
func TestArbitraryExecNeverCrashes(t *testing.T) {
	useEmulator(t)
	if _, _, err := FindRuntime(); err != nil {
		t.Fatal(err)
	}
	b := newBuilder("safe")
	b.Malloc(recA, 1<<20)
	b.Call("aclrtCreateStream", 0, 0x55)
	b.Call("aclrtMallocHost", 0, 0x1000000, 8192)
	b.Call("aclrtMemcpy", 0, recA, 0x2000000, 4096, 1, 4096)
	b.Call("aclrtMemcpyAsync", 0, recA+4096, 0x1000000, 8192, 1, 8192, 0x55)
	b.Call("aclrtMemsetAsync", 0, recA+65536, 4096, 0, 4096, 0x55)
	b.op("aclnnMul", [2]uint64{recA, 4096}, [2]uint64{recA + 4096, 4096}, [2]uint64{recA + 8192, 4096})
	b.op("aclnnMatmul", [2]uint64{recA, 4096}, [2]uint64{recA + 4096, 4096}, [2]uint64{recA + 8192, 4096})
	b.Free(recA)
	base := b.Events
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 300; round++ {
		var evs []trace.Event
		for _, ev := range base {
			if ev.Kind != trace.KindCall {
				evs = append(evs, ev)
			}
		}
		for i := 0; i < 60; i++ {
			ev := base[rng.IntN(len(base))]
			if rng.IntN(3) == 0 {
				k := rng.IntN(6)
				switch rng.IntN(3) {
				case 0:
					ev.Args[k] = rng.Uint64()
				case 1:
					ev.Args[k] = recA + rng.Uint64N(2<<20)
				default:
					ev.Args[k] = rng.Uint64N(1 << 22)
				}
			}
			evs = append(evs, ev)
		}
		_ = Exec(evs)
	}
}
