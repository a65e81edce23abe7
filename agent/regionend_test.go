package agent

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
)

// regionEndRun drives the issue-294 pattern under outputs-only (layer.0 saves the RoPE table it got as a
// keyword input and an activation of its own; layer.1 then receives the table at address 0), ending
// layer.0's region with RegionEnd (oneCall) or with SaveN, Describe and RegionExit. It returns the
// handles, the stats and the fault block.
func regionEndRun(t *testing.T, oneCall bool) ([]int64, trace.Stats, string) {
	t.Helper()
	n := &fakeNative{t0: time.Now()}
	var stderr bytes.Buffer
	out := t.TempDir()
	a := New(Config{Policy: "outputs-only", Out: out, Prefetch: 0, MinBytes: 64, Level: zapcore.ErrorLevel,
		Rank: -1}, n, &stderr, nil)
	a.StartEngine(offload.NewMemcpyMover())
	a.SetStorageOps(&resizeOps{released: map[int64]bool{}})
	dev := make([]byte, 4096+16384+8192)
	base := uint64(uintptr(unsafe.Pointer(&dev[0])))
	cos, hid, act := base, base+4096, base+4096+16384
	n.push(fnMalloc, cos, 2048)
	n.push(fnMalloc, hid, 16384)
	n.push(fnMalloc, act, 8192)
	descs := []string{"args[0]\tfloat32\t2,32,64", "rotary_cos_sin[0]\tfloat32\t32,1,1,16"}
	if c := a.RegionEnterDesc("layer.0", []uint64{hid, cos}, 1, descs); c != OK {
		t.Fatalf("region_enter: %d", c)
	}
	saves, sizes, hs := []uint64{cos, act}, []uint64{2048, 8192}, make([]int64, 2)
	descPtrs, saveDescs := []uint64{hid, cos, act}, []string{"output\tfloat32\t2,32,64", "\tfloat32\t32,1,1,16",
		"\tfloat32\t64,32"}
	if oneCall {
		// A malformed description refuses the call whole: nothing saved, the region still open.
		if c := a.RegionEnd("layer.0", []uint64{hid}, saves, sizes, nil, hs, descPtrs[:1], []string{"x\tf\t-1"}); c != EInvalid || hs[0] != 0 {
			t.Fatalf("region_end with a malformed description: %d, handles %v; want EInvalid and none", c, hs)
		}
		if c := a.RegionEnd("layer.0", []uint64{hid}, saves, sizes, nil, hs, descPtrs, saveDescs); c != OK {
			t.Fatalf("region_end: %d", c)
		}
	} else {
		if c := a.SaveN("layer.0", saves, sizes, nil, hs); c != OK {
			t.Fatalf("save_n: %d", c)
		}
		if c := a.Describe("layer.0", descPtrs, saveDescs); c != OK {
			t.Fatalf("describe: %d", c)
		}
		if c := a.RegionExit("layer.0", []uint64{hid}); c != OK {
			t.Fatalf("region_exit: %d", c)
		}
	}
	// An exit outside a region is the exit's error, whichever way it comes.
	if c := a.RegionEnd("layer.0", nil, nil, nil, nil, nil, nil, nil); c != EOrder {
		t.Errorf("region_end outside its region: %d, want EOrder", c)
	}
	for _, g := range []string{"layer.1", "layer.2"} {
		if c := a.RegionEnterDesc(g, []uint64{hid, cos}, 1, descs); c != OK && g == "layer.1" {
			t.Fatalf("region_enter of %s: %d", g, c)
		}
		a.RegionExit(g, nil)
	}
	var st trace.Stats
	if err := json.Unmarshal(a.StatsJSON(), &st); err != nil {
		t.Fatal(err)
	}
	a.Shutdown()
	files, _ := filepath.Glob(filepath.Join(out, "*.swtrace"))
	if len(files) != 1 {
		t.Fatalf("traces: %v", files)
	}
	_, evs, err := trace.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	described := 0
	for _, ev := range evs {
		if ev.Kind == trace.KindDescribe && ev.Ret == 0 && len(ev.Ptrs) == 3 && strings.Contains(ev.Text, "64,32") {
			described++
		}
	}
	if described != 1 {
		t.Errorf("one call %v: %d describe records of the output and the saves, want 1", oneCall, described)
	}
	return hs, st, stderr.String()
}

// RegionEnd does what its three calls do: a handle per save, the same fault with the same descriptions,
// the same counts (the refused calls aside: one more in the one-call run, the malformed description).
func TestRegionEndIsItsThreeCalls(t *testing.T) {
	hs1, st1, block1 := regionEndRun(t, true)
	hs3, st3, block3 := regionEndRun(t, false)
	if hs1[0] <= 0 || hs1[1] <= hs1[0] || hs3[0] <= 0 || hs3[1] <= hs3[0] { // handles count on across agents
		t.Errorf("handles %v (one call) and %v (three)", hs1, hs3)
	}
	if len(st1.Faults) == 0 || len(st1.Faults) != len(st3.Faults) || st1.Faults[0].Arg != "rotary_cos_sin[0]" ||
		st1.Faults[0].StorageTensor != st3.Faults[0].StorageTensor {
		t.Errorf("faults %+v (one call) and %+v (three)", st1.Faults, st3.Faults)
	}
	if st1.Saves != st3.Saves || st1.Internal != st3.Internal || st1.OffloadedBytes != st3.OffloadedBytes {
		t.Errorf("saves/internal/offloaded bytes %d/%d/%d (one call) and %d/%d/%d (three)", st1.Saves, st1.Internal,
			st1.OffloadedBytes, st3.Saves, st3.Internal, st3.OffloadedBytes)
	}
	want := "keyword input rotary_cos_sin[0] (float32 [32, 1, 1, 16], 2048 bytes) of layer.2 has no device memory"
	if !strings.Contains(block1, want) || !strings.Contains(block3, want) {
		t.Errorf("fault blocks lack %q:\none call:\n%s\nthree:\n%s", want, block1, block3)
	}
}
