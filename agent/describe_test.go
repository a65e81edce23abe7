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

// resizeOps is a framework's resize path over Go memory: release gives the storage up (its pointer
// becomes 0 for the framework), restore hands back the same bytes.
type resizeOps struct{ released map[int64]bool }

func (o *resizeOps) Release(h int64, _, _ uint64) error { o.released[h] = true; return nil }
func (o *resizeOps) Restore(h int64, _ uint64) (uint64, error) {
	delete(o.released, h)
	return 0, offload.ErrRuntime
}

// The issue-294 pattern with described arguments: layer.0 saves the RoPE table it got as a keyword input,
// outputs-only releases it, and layer.1 receives it at address 0. The fault names the argument, its dtype,
// shape and size, the owner names the argument of every layer, and the trace keeps the descriptions.
func TestDescribedInputFault(t *testing.T) {
	n := &fakeNative{t0: time.Now()}
	var stderr bytes.Buffer
	out := t.TempDir()
	a := New(Config{Policy: "outputs-only", Out: out, Prefetch: 0, MinBytes: 64, Level: zapcore.ErrorLevel,
		Rank: -1}, n, &stderr, nil)
	a.StartEngine(offload.NewMemcpyMover())
	a.SetStorageOps(&resizeOps{released: map[int64]bool{}})
	dev := make([]byte, 4096+16384)
	cos, hid := uint64(uintptr(unsafe.Pointer(&dev[0]))), uint64(uintptr(unsafe.Pointer(&dev[4096])))
	n.push(fnMalloc, cos, 2048)
	n.push(fnMalloc, hid, 16384)
	const cosDesc = "rotary_cos_sin[0]\tfloat32\t32,1,1,16"
	descs := []string{"args[0]\tfloat32\t2,32,64", cosDesc}
	if c := a.RegionEnterDesc("layer.0", []uint64{hid, cos}, 1, descs); c != OK {
		t.Fatalf("region_enter: %d", c)
	}
	if h := a.Save("layer.0", cos, 2048, 0); h <= 0 {
		t.Fatalf("save: %d", h)
	}
	if c := a.Describe("layer.0", []uint64{cos}, []string{"\tfloat32\t32,1,1,16"}); c != OK {
		t.Fatalf("describe: %d", c)
	}
	if c := a.RegionExit("layer.0", nil); c != OK {
		t.Fatalf("region_exit: %d", c)
	}
	// The release completes by the next call: layer.1 still gets the table, layer.2 gets address 0.
	if c := a.RegionEnterDesc("layer.1", []uint64{hid, cos}, 1, descs); c != OK {
		t.Fatalf("region_enter of layer.1: %d", c)
	}
	if c := a.RegionExit("layer.1", nil); c != OK {
		t.Fatalf("region_exit of layer.1: %d", c)
	}
	if c := a.RegionEnterDesc("layer.2", []uint64{hid, 0}, 1, descs); c != OK {
		t.Fatalf("region_enter of layer.2: %d", c)
	}
	if c := a.Describe("layer.2", []uint64{1}, []string{"x\tfloat32\t-1"}); c != EInvalid {
		t.Errorf("a malformed description: %d, want EInvalid", c)
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

	files, _ := filepath.Glob(filepath.Join(out, "*.swtrace"))
	if len(files) != 1 {
		t.Fatalf("traces: %v", files)
	}
	_, evs, err := trace.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
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
