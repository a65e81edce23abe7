package timeline

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/trace"
)

func fold(b *tracetest.Builder) *Timeline { return Fold(tracetest.Header(), b.Events, Options{}) }

// TestSwapGroups: the groups a trace used only as scopes or for its pool's empty cache are no swap groups; a
// group a region used is, whatever scope calls also named it.
func TestSwapGroups(t *testing.T) {
	b := tracetest.New()
	b.ABI(trace.KindScopeEnter, "layer.0", 0, nil)
	b.ABI(trace.KindScopeEnter, "layer.0.rope", 0, nil)
	b.ABI(trace.KindScopeExit, "layer.0.rope", 0, nil)
	b.ABI(trace.KindScopeExit, "layer.0", 0, nil)
	b.Enter("layer.1", 0, nil)
	b.ABI(trace.KindScopeEnter, "layer.1.rope", 0, nil)
	b.ABI(trace.KindScopeExit, "layer.1.rope", 0, nil)
	b.Exit("layer.1")
	b.ABI(trace.KindScopeEnter, "layer.2", 0, nil)
	b.ABI(trace.KindScopeExit, "layer.2", 0, nil)
	b.ABI(trace.KindBackwardEnter, "layer.2", 0, nil) // a layer declared in forward, swapped in backward
	b.ABI(trace.KindEmptyCache, "pool", 0, nil)
	tl := fold(b)
	if got := strings.Join(tl.SwapGroups(), ","); got != "layer.1,layer.2" {
		t.Errorf("swap groups %q, want layer.1,layer.2 (all: %q)", got, tl.GroupOrder)
	}
}

func TestNamesAndCalls(t *testing.T) {
	b := tracetest.New()
	b.Group("layer.1")
	b.Group("layer.0")
	b.Call("aclnnMul", 0, 0, 0, 0x77, 0, 2)
	b.Call("aclnnMul", 0, 0, 0, 0x77, 0, 2)
	b.Add(trace.Event{Kind: trace.KindCall, Fn: 77}) // a function the trace never named
	b.Add(trace.Event{Kind: trace.KindGroup, Group: 9})
	tl := fold(b)
	if got := strings.Join(tl.GroupOrder, ","); got != "layer.1,layer.0," {
		t.Errorf("group order %q", got)
	}
	if got := strings.Join(tl.SwapGroups(), ","); got != "layer.1,layer.0," {
		t.Errorf("swap groups %q", got)
	}
	if tl.GroupName(1) != "layer.1" || tl.GroupName(9) != "group#9" || tl.GroupName(5) != "group#5" {
		t.Errorf("group names %q %q %q", tl.GroupName(1), tl.GroupName(9), tl.GroupName(5))
	}
	if want := map[string]uint64{"aclnnMul": 2, "fn#77": 1}; !reflect.DeepEqual(tl.CallCounts(), want) {
		t.Errorf("calls %v, want %v", tl.CallCounts(), want)
	}
	if tl.Class(b.Fn("aclnnMul")) != trace.ClassLaunch || tl.Class(77) != trace.ClassOther {
		t.Errorf("classes %v %v", tl.Class(b.Fn("aclnnMul")), tl.Class(77))
	}
	if tl.Count(trace.KindCall) != 3 || tl.Count(trace.KindGroup) != 3 || tl.NumEvents != len(b.Events) ||
		tl.EndNS != b.TS {
		t.Errorf("calls %d groups %d events %d end %d", tl.Count(trace.KindCall), tl.Count(trace.KindGroup),
			tl.NumEvents, tl.EndNS)
	}
}

func TestMemory(t *testing.T) {
	b := tracetest.New()
	b.Malloc(0xA000, 100)
	b.Call("aclrtMalloc", 507899, 0, 1<<40, 0) // failed: nothing allocated
	b.Malloc(0xB000, 200)
	b.Free(0xDEAD)                 // never allocated: ignored
	b.Call("aclrtFree", 1, 0xA000) // failed: still live
	b.Malloc(0xB000, 50)           // handed out again: the free was lost
	b.Call("aclrtMallocHost", 0, 0x5000, 64)
	b.Call("aclrtFreeHost", 0, 0x5000)
	b.Call("aclrtReserveMemAddress", 0, 0x10000000, 1<<30, 0, 0, 0)
	b.Call("aclrtMapMem", 0, 0x10000000, 4096, 0, 7, 0)
	tl := fold(b)
	d := tl.Foot.Held
	if d.Allocs != 4 || d.LiveBytes != 100+50+4096 || d.PeakBytes != 100+50+4096 || d.Frees != 0 || len(d.Series) != 4 {
		t.Errorf("device %+v", d)
	}
	if size, ok := d.Size(0xB000); !ok || size != 50 {
		t.Errorf("block at 0xB000: %d %v", size, ok)
	}
	if hp := tl.HostPinned; hp.Allocs != 1 || hp.Frees != 1 || hp.LiveBytes != 0 || hp.PeakBytes != 64 {
		t.Errorf("host pinned %+v", hp)
	}
	if r := tl.Reserved; r.PeakBytes != 1<<30 || !tl.VMM {
		t.Errorf("reserved %+v, vmm %v", r, tl.VMM)
	}
	quiet := Fold(tracetest.Header(), b.Events, Options{NoSeries: true})
	if len(quiet.Foot.Held.Series) != 0 || len(quiet.Foot.InUse) != 0 || len(quiet.HostPinned.Series) != 0 ||
		quiet.Foot.Held.PeakBytes != d.PeakBytes {
		t.Errorf("NoSeries kept curves or lost figures: %+v", quiet.Foot.Held)
	}
}

// swapStory: layer.0 receives x (positional) and cos (keyword, described), saves an internal activation
// and cos; the activation is released and restored, cos released under outputs-only.
func swapStory() (*tracetest.Builder, int64, int64) {
	const x, cos, act = 0x1000, 0x2000, 0x3000
	b := tracetest.New()
	b.Malloc(0x1000, 0x10000)
	b.Enter("layer.0", 1, []uint64{x, cos}, trace.Tensor{Path: "args[0]", DType: "bfloat16", Shape: []int64{2, 8}},
		trace.Tensor{Path: "rotary_cos_sin[0]", DType: "float32", Shape: []int64{16}})
	ha := b.Save("layer.0", act, 256, 0)
	hc := b.Save("layer.0", cos, 64, 0)
	b.ABI(trace.KindSave, "layer.0", 0, nil, 0, 0, 0).Ret = trace.CodeEINVAL // refused: no handle, no storage
	b.Describe("layer.0", []uint64{act}, trace.Tensor{DType: "float16", Shape: []int64{4, 32}})
	b.Exit("layer.0", 0x4000)
	b.Classify("layer.0", ha, act, 256, trace.KeepInternal)
	b.Classify("layer.0", hc, 0, 64, trace.KeepInput) // no base known at classification: the save's stays
	b.Enter("layer.1", 1, []uint64{0x4000, cos})
	b.State(ha, trace.StateDevice, trace.StateD2H, act, 256)
	b.State(ha, trace.StateD2H, trace.StateHost, 0, 256)
	b.State(hc, trace.StateDevice, trace.StateD2H, cos, 64)
	b.State(hc, trace.StateD2H, trace.StateHost, 0, 64)
	b.Exit("layer.1", 0x5000)
	b.ABI(trace.KindBackwardEnter, "layer.0", 0, nil)
	b.State(ha, trace.StateHost, trace.StateH2D, act, 256)
	b.State(ha, trace.StateH2D, trace.StateDevice, act, 256)
	return b, ha, hc
}

func TestHandlesAndTransitions(t *testing.T) {
	b, ha, hc := swapStory()
	tl := fold(b)
	if _, ok := tl.Handles[0]; ok || len(tl.Handles) != 2 {
		t.Fatalf("handles %v", tl.Handles)
	}
	a, c := tl.Handles[ha], tl.Handles[hc]
	if tl.GroupName(a.Group) != "layer.0" || a.Base != 0x3000 || a.Nbytes != 256 || a.External() || !a.Classified {
		t.Errorf("activation %+v", a)
	}
	if c.Base != 0x2000 || c.Reason != trace.KeepInput || !c.External() {
		t.Errorf("cos %+v", c)
	}
	if len(tl.Released) != 2 || tl.Released[0] != a || tl.Released[1] != c || a.ReleaseSeq != 0 || c.ReleaseSeq != 1 {
		t.Errorf("release order %v", tl.Released)
	}
	if !a.Restored || a.State != trace.StateDevice || a.Releases != 1 || c.Restored || c.State != trace.StateHost {
		t.Errorf("after backward: activation %+v cos %+v", a, c)
	}
	if len(tl.Transitions) != 6 {
		t.Fatalf("%d transitions", len(tl.Transitions))
	}
	first := tl.Transitions[0]
	if first.Handle != ha || first.Event < 0 || b.Events[first.Event].Kind != trace.KindState || first.TS != b.Events[first.Event].TS ||
		tl.GroupName(first.Group) != "layer.0" || !first.CopyStarts() {
		t.Errorf("first transition %+v", first)
	}
	var kinds []string
	for _, tr := range tl.Transitions {
		switch {
		case tr.Release():
			kinds = append(kinds, "release")
		case tr.RestoreBegins():
			kinds = append(kinds, "restore-begins")
		case tr.Restore():
			kinds = append(kinds, "restore")
		case tr.CopyStarts():
			kinds = append(kinds, "copy")
		}
	}
	if got := strings.Join(kinds, ","); got != "copy,release,copy,release,restore-begins,restore" {
		t.Errorf("transitions %s", got)
	}
	if tl.Reasons[trace.KeepInternal] != 1 || tl.Reasons[trace.KeepInput] != 1 {
		t.Errorf("reasons %v", tl.Reasons)
	}
	if tl.Foot.Released != 64 || tl.Foot.PeakReleased != 320 {
		t.Errorf("footprint released %d peak %d", tl.Foot.Released, tl.Foot.PeakReleased)
	}
	var enters []int64 // layer.0's region_enter starts the one step; layer.1's does not
	for _, ev := range b.Events {
		if ev.Kind == trace.KindRegionEnter {
			enters = append(enters, ev.TS)
		}
	}
	if len(tl.Steps) != 1 || len(enters) != 2 || tl.Steps[0] != enters[0] {
		t.Errorf("steps %v, region enters %v", tl.Steps, enters)
	}
}

// TestReleasedAtAsOfEachEvent: folded one event at a time, the timeline says what the recording held
// released at that point (replay's recorded side).
func TestReleasedAtAsOfEachEvent(t *testing.T) {
	b, _, _ := swapStory()
	tl := New(tracetest.Header(), Options{NoSeries: true})
	var seen []bool
	for i := range b.Events {
		tl.Add(&b.Events[i])
		if b.Events[i].Kind == trace.KindState {
			seen = append(seen, tl.ReleasedAt(0x3000))
		}
	}
	if want := []bool{false, true, true, true, false, false}; !reflect.DeepEqual(seen, want) {
		t.Errorf("activation released as of each state event: %v, want %v", seen, want)
	}
	if !tl.ReleasedAt(0x2000) || tl.ReleasedAt(0x4000) {
		t.Error("cos should be held released at the end, nothing at 0x4000")
	}
}

func TestTensorDescriptions(t *testing.T) {
	b, ha, hc := swapStory()
	// layer.2 saves the pointer layer.0 described, after layer.0's region closed: nothing was said of it in layer.2.
	b.Enter("layer.2", 1, []uint64{0x5000})
	hl := b.Save("layer.2", 0x3000, 256, trace.SaveParam)
	// A description without a path keeps the argument's name region_enter gave.
	b.Enter("layer.3", 1, []uint64{0x6000}, trace.Tensor{Path: "hidden", DType: "float32", Shape: []int64{1}})
	b.Describe("layer.3", []uint64{0x6000}, trace.Tensor{DType: "bfloat16", Shape: []int64{3}})
	hs := b.Save("layer.3", 0x6000, 6, 0)
	tl := fold(b)
	if got := tl.Handles[ha].Tensor.String(); got != "float16 [4, 32]" {
		t.Errorf("described after its save: %q", got)
	}
	if got := tl.Handles[hc].Tensor; got.String() != "float32 [16]" || got.Path != "rotary_cos_sin[0]" {
		t.Errorf("saved input: %+v", got)
	}
	if got := tl.Handles[hl]; got.Tensor.Known() || !got.Param() {
		t.Errorf("saved after the describing region closed: %+v", got)
	}
	if got := tl.Handles[hs].Tensor; got.Path != "hidden" || got.String() != "bfloat16 [3]" {
		t.Errorf("re-described input: %+v", got)
	}
}

func TestOwner(t *testing.T) {
	b, _, _ := swapStory()
	tl := fold(b)
	cases := []struct {
		base, nbytes uint64
		want         string
	}{
		{0x2000, 64, "keyword input rotary_cos_sin[0] of layer.0, keyword input of layer.1"},
		{0x1ff0, 0x20, "keyword input rotary_cos_sin[0] of layer.0, keyword input of layer.1"}, // a pointer inside the range
		{0x4000, 16, "positional input of layer.1; output of layer.0"},
		{0x5000, 1, "output of layer.1"},
		{0x3000, 256, ""},
		{0, 64, ""},
	}
	for _, c := range cases {
		if got := tl.Owner(c.base, c.nbytes); got != c.want {
			t.Errorf("Owner(%#x, %d) = %q, want %q", c.base, c.nbytes, got, c.want)
		}
	}
	// Later events extend the answer (the index is rebuilt), and two pointers of one range in one group
	// are named in pointer order, every run.
	for g := 2; g <= 4; g++ {
		name := "layer." + string(rune('0'+g))
		b.Enter(name, 0, []uint64{0x2010, 0x2000})
		b.Events[len(b.Events)-1].Text = "b\tfloat32\t1\na\tfloat32\t1"
		tl.Add(&b.Events[len(b.Events)-2]) // the KindGroup naming it
		tl.Add(&b.Events[len(b.Events)-1])
	}
	want := "keyword input rotary_cos_sin[0] of layer.0, keyword input of layer.1, keyword input a of layer.2..layer.4, keyword input b of layer.2..layer.4"
	for i := 0; i < 5; i++ {
		if got := tl.Owner(0x2000, 64); got != want {
			t.Fatalf("Owner after more regions = %q, want %q", got, want)
		}
	}
}

func TestFaultsStatsLogsMeta(t *testing.T) {
	b := tracetest.New()
	b.Text(trace.KindMeta, "policy=safe\nprefetch=1")
	b.Text(trace.KindFault, `{"kernel":"aclnnMul","addr":"0x10","size":4096,"storage":"0x7f00#3","handle":5,"tensor_index":0}`)
	b.Text(trace.KindFault, "not json")
	b.Text(trace.KindFault, `[1,2]`)
	b.Text(trace.KindStats, `{"offloaded_storages":1}`)
	b.Text(trace.KindStats, `{"offloaded_storages":2}`)
	b.Text(trace.KindLog, "bad SWAPAGENT_PREFETCH")
	b.Add(trace.Event{Kind: trace.KindLost, Args: [6]uint64{5}})
	b.Add(trace.Event{Kind: trace.KindLost, Args: [6]uint64{2}})
	b.Text(trace.KindMeta, "policy=off")
	tl := fold(b)
	if len(tl.Faults) != 3 {
		t.Fatalf("%d faults", len(tl.Faults))
	}
	f := tl.Faults[0]
	if f.Err != nil || f.Record.Kernel != "aclnnMul" || f.Record.Addr != 0x10 || f.Record.Storage.Addr() != 0x7f00 ||
		f.Record.Handle != 5 || f.Record.TensorIndex != 0 || f.Fields["size"] != json.Number("4096") || f.TS != b.Events[1].TS {
		t.Errorf("fault record %+v fields %v", f.Record, f.Fields)
	}
	if bad := tl.Faults[1]; bad.Err == nil || string(bad.Raw) != `"not json"` || bad.Fields != nil {
		t.Errorf("non-JSON fault: %+v", bad)
	}
	if arr := tl.Faults[2]; arr.Err == nil || arr.Fields != nil || string(arr.Raw) != `[1,2]` {
		t.Errorf("JSON that is no record: %+v", arr)
	}
	if !tl.HasStats || string(tl.StatsJSON) != `{"offloaded_storages":2}` {
		t.Errorf("stats %s", tl.StatsJSON)
	}
	if len(tl.Logs) != 1 || tl.Lost != 7 || tl.Meta["policy"] != "off" || tl.Meta["prefetch"] != "1" {
		t.Errorf("logs %v lost %d meta %v", tl.Logs, tl.Lost, tl.Meta)
	}
	if !reflect.DeepEqual(ScanMeta(b.Events), tl.Meta) {
		t.Errorf("ScanMeta %v, fold %v", ScanMeta(b.Events), tl.Meta)
	}
	if Fold(tracetest.Header(), nil, Options{}).HasStats {
		t.Error("stats without a stats event")
	}
}

func TestUnknownValuesAreKept(t *testing.T) {
	// Reasons and states beyond the header's, and handles nothing saved: folded, never a panic.
	b := tracetest.New()
	b.Classify("g", 7, 0x100, 10, 200)
	b.State(9, 9, 8, 0, 10)
	b.State(7, trace.StateD2H, trace.StateHost, 0, 0)
	tl := fold(b)
	if tl.Reasons[200] != 1 || len(tl.Transitions) != 2 || tl.Handles[9].Nbytes != 10 || tl.Handles[9].Group != 0 {
		t.Errorf("reasons %v transitions %v handle 9 %+v", tl.Reasons, tl.Transitions, tl.Handles[9])
	}
	if h := tl.Handles[7]; !h.Released() || !h.External() || !tl.ReleasedAt(0x100) || tl.Foot.Released != 0 {
		t.Errorf("handle 7 %+v", h)
	}
}

// The saving's lower bound is what was swapped out when the pool peaked, less one step of its growth: a
// release after the peak raises the estimate but not the bound.
func TestSavedAtLeastIsReadAtThePeak(t *testing.T) {
	var f Footprint
	f.NoSeries = true
	const mib = 1 << 20
	f.Alloc(1, 0x1000000, 2*mib)
	f.State(Transition{TS: 2, From: trace.StateDevice, To: trace.StateHost, Nbytes: 3 * mib}, 0x1000000)
	f.Alloc(3, 0x2000000, 2*mib) // the peak: 4 MiB held, 3 swapped out
	f.State(Transition{TS: 4, From: trace.StateDevice, To: trace.StateHost, Nbytes: 5 * mib}, 0)
	if f.Held.PeakBytes != 4*mib || f.ReleasedAtPeak != 3*mib {
		t.Fatalf("peak %d, released at the peak %d: want 4 MiB and 3 MiB", f.Held.PeakBytes, f.ReleasedAtPeak)
	}
	if got := SavedAtLeast(f.ReleasedAtPeak, f.MinAlloc); got != 1*mib {
		t.Errorf("SavedAtLeast %d, want 1 MiB (3 MiB less a 2 MiB step)", got)
	}
	if got := SavedAtLeast(mib, 2*mib); got != 0 {
		t.Errorf("SavedAtLeast below one step: %d, want 0", got)
	}
}
