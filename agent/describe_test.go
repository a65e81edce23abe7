package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap/zapcore"

	"swapagent/internal/testenv"
	"swapagent/offload"
	"swapagent/trace"
)

// resizeOps is a framework's resize path over Go memory: release gives the storage up (its pointer
// becomes 0 for the framework), restore hands back the same bytes.
type resizeOps struct{ released map[int64]bool }

func (o *resizeOps) Release(h int64, _, _ uint64) error { o.released[h] = true; return nil }
func (o *resizeOps) Restore(h int64, _ uint64) (uint64, error) {
	delete(o.released, h)
	return 0, offload.ErrRuntime
}

// outputsOnlyAgent is the agent of the issue-294 tests: outputs-only, no prefetch, storages from 64 bytes up,
// the framework's resize path over Go memory (resizeOps); its trace goes to out at level ("" for all), its
// fault blocks to stderr.
func outputsOnlyAgent(n Native, out, level string, stderr io.Writer) *Agent {
	a := New(Config{Policy: offload.PolicyOutputsOnly, Out: out, Prefetch: 0, MinBytes: 64, Level: zapcore.ErrorLevel,
		Rank: -1, Trace: level}, n, stderr, nil)
	a.StartEngine(offload.NewMemcpyMover())
	a.SetStorageOps(&resizeOps{released: map[int64]bool{}})
	return a
}

// The issue-294 pattern with described arguments: layer.0 saves the RoPE table it got as a keyword input,
// outputs-only releases it, and layer.1 receives it at address 0. The fault names the argument, its dtype,
// shape and size, the owner names the argument of every layer, and the trace keeps the descriptions.
func TestDescribedInputFault(t *testing.T) {
	n := &fakeNative{t0: time.Now()}
	var stderr bytes.Buffer
	out := t.TempDir()
	a := outputsOnlyAgent(n, out, "", &stderr)
	dev := make([]byte, 4096+16384)
	cos, hid := uint64(uintptr(unsafe.Pointer(&dev[0]))), uint64(uintptr(unsafe.Pointer(&dev[4096])))
	n.push(fnMalloc, cos, 2048)
	n.push(fnMalloc, hid, 16384)
	const cosDesc = "rotary_cos_sin[0]\tfloat32\t32,1,1,16"
	descs := []string{"args[0]\tfloat32\t2,32,64", cosDesc}
	if c := a.RegionEnterDesc("layer.0", []uint64{hid, cos}, 1, descs); c != trace.CodeOK {
		t.Fatalf("region_enter: %d", c)
	}
	if h := a.Save("layer.0", cos, 2048, 0); h <= 0 {
		t.Fatalf("save: %d", h)
	}
	if c := a.Describe("layer.0", []uint64{cos}, []string{"\tfloat32\t32,1,1,16"}); c != trace.CodeOK {
		t.Fatalf("describe: %d", c)
	}
	if c := a.RegionExit("layer.0", nil); c != trace.CodeOK {
		t.Fatalf("region_exit: %d", c)
	}
	// The release completes by the next call: layer.1 still gets the table, layer.2 gets address 0.
	if c := a.RegionEnterDesc("layer.1", []uint64{hid, cos}, 1, descs); c != trace.CodeOK {
		t.Fatalf("region_enter of layer.1: %d", c)
	}
	if c := a.RegionExit("layer.1", nil); c != trace.CodeOK {
		t.Fatalf("region_exit of layer.1: %d", c)
	}
	if c := a.RegionEnterDesc("layer.2", []uint64{hid, 0}, 1, descs); c != trace.CodeOK {
		t.Fatalf("region_enter of layer.2: %d", c)
	}
	if c := a.Describe("layer.2", []uint64{1}, []string{"x\tfloat32\t-1"}); c != trace.CodeEINVAL {
		t.Errorf("a malformed description: %d, want trace.CodeEINVAL", c)
	}
	// The framework runs layer.2 anyway: its first kernel reads the table at address 0 (the C launch check
	// calls LaunchFault). The same storage, found by size, with its dtype and shape; the stats list both.
	a.LaunchFault("aclnnMul", 1, 0, 2048)
	var st trace.Stats
	if err := json.Unmarshal(a.StatsJSON(), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Faults) != 2 || st.Faults[1].Detected != "launch" || st.Faults[1].ReleasedBy != "layer.0" ||
		st.Faults[1].StorageTensor != "float32 [32, 1, 1, 16]" || st.Faults[0].Arg != "rotary_cos_sin[0]" {
		t.Errorf("stats faults %+v", st.Faults)
	}
	a.Shutdown()

	block := stderr.String()
	for _, want := range []string{
		"keyword input rotary_cos_sin[0] (float32 [32, 1, 1, 16], 2048 bytes) of layer.2 has no device memory",
		"(2048 bytes: float32 [32, 1, 1, 16]) was released by layer.0",
		"owner: keyword input rotary_cos_sin[0] of layer.0..layer.2",
		"FAULT: aclnnMul uses tensor 1 at address 0x0 (2048 bytes)",
	} {
		if !strings.Contains(block, want) {
			t.Errorf("fault block lacks %q:\n%s", want, block)
		}
	}
	if strings.Contains(block, "guessed") {
		t.Errorf("a described storage must not be guessed from its size:\n%s", block)
	}
	if strings.Contains(block, "positional input") {
		t.Errorf("the positional input is on device; got:\n%s", block)
	}

	evs := onlyTrace(t, out)
	var enters, describes int
	for _, ev := range evs {
		switch ev.Kind {
		case trace.KindRegionEnter:
			ts := trace.SplitTensors(ev.Text, len(ev.Ptrs))
			if ts[1].Path != "rotary_cos_sin[0]" || ts[1].String() != "float32 [32, 1, 1, 16]" {
				t.Errorf("region_enter text %q", ev.Text)
			}
			enters++
		case trace.KindDescribe:
			if ev.Ret == 0 {
				describes++
			}
		case trace.KindFault:
			atEnter := strings.Contains(ev.Text, `"detected":"region_enter"`)
			if atEnter != strings.Contains(ev.Text, `"arg":"rotary_cos_sin[0]"`) ||
				!strings.Contains(ev.Text, `"storage_tensor":"float32 [32, 1, 1, 16]"`) {
				t.Errorf("fault record %s", ev.Text)
			}
		}
	}
	if enters != 3 || describes != 1 {
		t.Errorf("%d region_enter and %d describe events, want 3 and 1", enters, describes)
	}
}

// regionEndRun drives the issue-294 pattern under outputs-only (layer.0 saves the RoPE table it got as a
// keyword input and an activation of its own; layer.1 then receives the table at address 0), ending
// layer.0's region with RegionEnd (oneCall) or with SaveN, Describe and RegionExit. It returns the
// handles, the stats and the fault block.
func regionEndRun(t *testing.T, oneCall bool) ([]int64, trace.Stats, string) {
	t.Helper()
	n := &fakeNative{t0: time.Now()}
	var stderr bytes.Buffer
	out := t.TempDir()
	a := outputsOnlyAgent(n, out, "", &stderr)
	dev := make([]byte, 4096+16384+8192)
	base := uint64(uintptr(unsafe.Pointer(&dev[0])))
	cos, hid, act := base, base+4096, base+4096+16384
	n.push(fnMalloc, cos, 2048)
	n.push(fnMalloc, hid, 16384)
	n.push(fnMalloc, act, 8192)
	descs := []string{"args[0]\tfloat32\t2,32,64", "rotary_cos_sin[0]\tfloat32\t32,1,1,16"}
	if c := a.RegionEnterDesc("layer.0", []uint64{hid, cos}, 1, descs); c != trace.CodeOK {
		t.Fatalf("region_enter: %d", c)
	}
	saves, sizes, hs := []uint64{cos, act}, []uint64{2048, 8192}, make([]int64, 2)
	descPtrs, saveDescs := []uint64{hid, cos, act}, []string{"output\tfloat32\t2,32,64", "\tfloat32\t32,1,1,16",
		"\tfloat32\t64,32"}
	if oneCall {
		// A malformed description refuses the call whole: nothing saved, the region still open.
		if c := a.RegionExitWith("layer.0", []uint64{hid}, saves, sizes, nil, hs, descPtrs[:1], []string{"x\tf\t-1"}); c != trace.CodeEINVAL || hs[0] != 0 {
			t.Fatalf("region_end with a malformed description: %d, handles %v; want trace.CodeEINVAL and none", c, hs)
		}
		if c := a.RegionExitWith("layer.0", []uint64{hid}, saves, sizes, nil, hs, descPtrs, saveDescs); c != trace.CodeOK {
			t.Fatalf("region_end: %d", c)
		}
	} else {
		if c := a.SaveN("layer.0", saves, sizes, nil, hs); c != trace.CodeOK {
			t.Fatalf("save_n: %d", c)
		}
		if c := a.Describe("layer.0", descPtrs, saveDescs); c != trace.CodeOK {
			t.Fatalf("describe: %d", c)
		}
		if c := a.RegionExit("layer.0", []uint64{hid}); c != trace.CodeOK {
			t.Fatalf("region_exit: %d", c)
		}
	}
	// An exit outside a region is the exit's error, whichever way it comes.
	if c := a.RegionExitWith("layer.0", nil, nil, nil, nil, nil, nil, nil); c != trace.CodeEORDER {
		t.Errorf("region_end outside its region: %d, want trace.CodeEORDER", c)
	}
	for _, g := range []string{"layer.1", "layer.2"} {
		if c := a.RegionEnterDesc(g, []uint64{hid, cos}, 1, descs); c != trace.CodeOK && g == "layer.1" {
			t.Fatalf("region_enter of %s: %d", g, c)
		}
		a.RegionExit(g, nil)
	}
	var st trace.Stats
	if err := json.Unmarshal(a.StatsJSON(), &st); err != nil {
		t.Fatal(err)
	}
	a.Shutdown()
	evs := onlyTrace(t, out)
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

// onlyTrace is the events of the one trace an agent wrote into out.
func onlyTrace(t *testing.T, out string) []trace.Event {
	t.Helper()
	_, evs, err := trace.ReadFile(testenv.OnlyTrace(t, out))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
