// tracelevel_test.go checks the trace-level rule (traceKeeps) record by record, SWAPAGENT_TRACE's parsing,
// and, in process, that the level changes what the trace holds and nothing the agent decides or counts.
package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"
	"unsafe"

	"swapagent/trace"
)

func TestTraceKeeps(t *testing.T) {
	const (
		all = 1 << iota
		memory
		off
		every  = all | memory | off
		notOff = all | memory
	)
	cases := []struct {
		kind trace.Kind
		fn   string // for KindCall
		at   int    // the levels that keep it
	}{
		// Device and host memory, the VMM calls.
		{trace.KindCall, "aclrtMalloc", notOff},
		{trace.KindCall, "aclrtMallocAlign32", notOff},
		{trace.KindCall, "aclrtMallocCached", notOff},
		{trace.KindCall, "aclrtFree", notOff},
		{trace.KindCall, "aclrtMallocHost", notOff},
		{trace.KindCall, "aclrtFreeHost", notOff},
		{trace.KindCall, "aclrtReserveMemAddress", notOff},
		{trace.KindCall, "aclrtReleaseMemAddress", notOff},
		{trace.KindCall, "aclrtMallocPhysical", notOff},
		{trace.KindCall, "aclrtFreePhysical", notOff},
		{trace.KindCall, "aclrtMapMem", notOff},
		{trace.KindCall, "aclrtUnmapMem", notOff},
		// Copies and memsets.
		{trace.KindCall, "aclrtMemcpy", notOff},
		{trace.KindCall, "aclrtMemcpyAsync", notOff},
		{trace.KindCall, "aclrtMemset", notOff},
		{trace.KindCall, "aclrtMemsetAsync", notOff},
		// Syncs, events, streams.
		{trace.KindCall, "aclrtSynchronizeStream", notOff},
		{trace.KindCall, "aclrtSynchronizeStreamWithTimeout", notOff},
		{trace.KindCall, "aclrtSynchronizeEvent", notOff},
		{trace.KindCall, "aclrtSynchronizeDevice", notOff},
		{trace.KindCall, "aclrtSynchronizeDeviceWithTimeout", notOff},
		{trace.KindCall, "aclrtRecordEvent", notOff},
		{trace.KindCall, "aclrtResetEvent", notOff},
		{trace.KindCall, "aclrtStreamWaitEvent", notOff},
		{trace.KindCall, "aclrtCreateEvent", notOff},
		{trace.KindCall, "aclrtDestroyEvent", notOff},
		{trace.KindCall, "aclrtCreateStream", notOff},
		{trace.KindCall, "aclrtDestroyStream", notOff},
		{trace.KindCall, "aclrtDestroyStreamForce", notOff},
		// Faults' context, once per process.
		{trace.KindCall, "aclrtExceptionCallback", notOff},
		{trace.KindCall, "aclrtSetExceptionInfoCallback", notOff},
		{trace.KindCall, "aclInit", notOff},
		{trace.KindCall, "aclFinalize", notOff},
		// Kernel launches: all of them (the drain cannot tell which touch a watched storage).
		{trace.KindCall, "aclnnMul", notOff},
		{trace.KindCall, "aclnnMatmul", notOff},
		{trace.KindCall, "aclnnFlashAttentionScore", notOff},
		// Per-op bookkeeping and queries: all only.
		{trace.KindCall, "aclCreateTensor", all},
		{trace.KindCall, "aclDestroyTensor", all},
		{trace.KindCall, "aclCreateTensorList", all},
		{trace.KindCall, "aclDestroyTensorList", all},
		{trace.KindCall, "aclnnMulGetWorkspaceSize", all},
		{trace.KindCall, "aclnnMatmulGetWorkspaceSize", all},
		{trace.KindCall, "aclSetTensorAddr", all},
		{trace.KindCall, "aclSetDynamicTensorAddr", all},
		{trace.KindCall, "aclSetAclOpExecutorRepeatable", all},
		{trace.KindCall, "aclDestroyAclOpExecutor", all},
		{trace.KindCall, "aclrtGetMemInfo", all},
		{trace.KindCall, "aclrtQueryEventStatus", all},
		{trace.KindCall, "aclrtGetLastError", all},
		{trace.KindCall, "", all}, // a function id without a name
		// Names: allowed everywhere (the sink writes them only before a kept record that uses them).
		{trace.KindFunc, "", every},
		{trace.KindGroup, "", every},
		// The swap ABI.
		{trace.KindRegionEnter, "", notOff},
		{trace.KindSave, "", notOff},
		{trace.KindRegionExit, "", notOff},
		{trace.KindProtect, "", notOff},
		{trace.KindBackwardEnter, "", notOff},
		{trace.KindUnpack, "", notOff},
		{trace.KindBackwardExit, "", notOff},
		{trace.KindClassify, "", notOff},
		{trace.KindState, "", notOff},
		{trace.KindDescribe, "", notOff},
		{trace.KindGuard, "", notOff},
		{trace.KindGuardRestore, "", notOff},
		{trace.KindGuarded, "", notOff},
		// The agent's own records.
		{trace.KindLog, "", notOff},
		{trace.KindLost, "", notOff},
		{trace.KindFault, "", every},
		{trace.KindStats, "", every},
		{trace.KindMeta, "", every},
	}
	levels := map[string]int{TraceAll: all, TraceMemory: memory, TraceOff: off}
	for _, c := range cases {
		for level, bit := range levels {
			if got, want := traceKeeps(level, c.kind, c.fn), c.at&bit != 0; got != want {
				t.Errorf("traceKeeps(%s, %v, %q) = %v, want %v", level, c.kind, c.fn, got, want)
			}
		}
	}
	// Every Kind is in the table, so a new one gets a decision here.
	seen := map[trace.Kind]bool{}
	for _, c := range cases {
		seen[c.kind] = true
	}
	for k := trace.KindCall; k <= trace.KindGuarded; k++ {
		if !seen[k] {
			t.Errorf("kind %v (%d) has no case", k, k)
		}
	}
	if !traceKeeps("", trace.KindCall, "aclCreateTensor") {
		t.Error("an unset level must record everything")
	}
}

func TestLoadConfigTrace(t *testing.T) {
	for _, c := range []struct {
		val, want string
		problems  []string
	}{
		{"", TraceAll, nil},
		{"memory", TraceMemory, nil},
		{" OFF ", TraceOff, nil},
		{"all", TraceAll, nil},
		{"calls", TraceAll, []string{`SWAPAGENT_TRACE="calls" is not one of all, memory, off; using all`}},
	} {
		cfg, problems := LoadConfig(func(k string) (string, bool) {
			if k == EnvTrace && c.val != "" {
				return c.val, true
			}
			return "", false
		})
		if cfg.Trace != c.want || !reflect.DeepEqual(problems, c.problems) {
			t.Errorf("%s=%q: level %q, problems %q; want %q, %q", EnvTrace, c.val, cfg.Trace, problems, c.want,
				c.problems)
		}
	}
}

// levelNative is fakeNative with the functions of a decoder step's per-op bookkeeping.
type levelNative struct{ *fakeNative }

const (
	fnCreateTensor uint16 = 100 + iota
	fnDestroyTensor
	fnMulWorkspace
	fnMul
	fnSync
)

func (n levelNative) FnName(fn uint16) string {
	switch fn {
	case fnCreateTensor:
		return "aclCreateTensor"
	case fnDestroyTensor:
		return "aclDestroyTensor"
	case fnMulWorkspace:
		return "aclnnMulGetWorkspaceSize"
	case fnMul:
		return "aclnnMul"
	case fnSync:
		return "aclrtSynchronizeStream"
	}
	return n.fakeNative.FnName(fn)
}

// levelRun is one in-process run of TestTraceLevelsInProcess: its trace, stats and stderr.
type levelRun struct {
	events []trace.Event
	stats  trace.Stats
	stderr string
}

// runLevel plays the issue-294 pattern (describe_test.go) with per-op bookkeeping around each layer, at
// level: outputs-only releases layer.0's keyword input, layer.2 gets it at address 0 and its kernel faults.
// dev is the device memory, the same at every level so that the fault blocks name the same addresses.
func runLevel(t *testing.T, level string, dev []byte) levelRun {
	n := levelNative{&fakeNative{t0: time.Now()}}
	var stderr bytes.Buffer
	out := t.TempDir()
	a := outputsOnlyAgent(n, out, level, &stderr)
	cos, hid := uint64(uintptr(unsafe.Pointer(&dev[0]))), uint64(uintptr(unsafe.Pointer(&dev[4096])))
	n.push(fnMalloc, cos, 2048)
	n.push(fnMalloc, hid, 16384)
	layer := func(g string, in []uint64) {
		if c := a.RegionEnter(g, in, 1); c != trace.CodeOK {
			t.Fatalf("%s: region_enter: %d", g, c)
		}
		n.push(fnCreateTensor, 0x10, hid, 16384)
		n.push(fnCreateTensor, 0x20, in[1], 2048)
		n.push(fnMulWorkspace, 0x10, 0x20, 0x10, 0, 0x30)
		n.push(fnMul, 0, 0, 0x30, 0, 2)
		n.push(fnDestroyTensor, 0x10)
		n.push(fnDestroyTensor, 0x20)
		n.push(fnSync, 0)
		if in[1] == 0 {
			a.LaunchFault("aclnnMul", 1, 0, 2048)
			return
		}
		if g == "layer.0" {
			if h := a.Save(g, cos, 2048, 0); h <= 0 {
				t.Fatalf("save: %d", h)
			}
		}
		if c := a.RegionExit(g, nil); c != trace.CodeOK {
			t.Fatalf("%s: region_exit: %d", g, c)
		}
	}
	layer("layer.0", []uint64{hid, cos})
	layer("layer.1", []uint64{hid, cos})
	layer("layer.2", []uint64{hid, 0})
	var r levelRun
	if err := json.Unmarshal(a.StatsJSON(), &r.stats); err != nil {
		t.Fatal(err)
	}
	a.Shutdown()
	r.stderr = stderr.String()
	r.events = onlyTrace(t, out)
	return r
}

// The level filters the trace and nothing else: the fault blocks, the fault records, the stats (but the
// trace's own size) are the same at every level, and each trace holds what traceKeeps says, names only
// for what it holds, and the level in its metadata.
func TestTraceLevelsInProcess(t *testing.T) {
	runs := map[string]levelRun{}
	dev := make([]byte, 4096+16384)
	for _, level := range TraceLevels {
		runs[level] = runLevel(t, level, dev)
	}
	base := runs[TraceAll]
	if len(base.stats.Faults) != 2 {
		t.Fatalf("want the region_enter and launch faults, got %+v", base.stats.Faults)
	}
	for _, level := range TraceLevels {
		r := runs[level]
		// The storage's name is its host copy's address after the release: the mover's, not the same
		// from one run to the next.
		if storageName.ReplaceAllString(r.stderr, "S#") != storageName.ReplaceAllString(base.stderr, "S#") {
			t.Errorf("%s: stderr differs from all's:\n%s\nall:\n%s", level, r.stderr, base.stderr)
		}
		if st, bst := deterministic(r.stats), deterministic(base.stats); !reflect.DeepEqual(st, bst) {
			t.Errorf("%s: stats differ from all's:\n%+v\nall:\n%+v", level, st, bst)
		}
		names := map[uint16]string{}
		groups := map[uint32]bool{}
		var faults []string
		meta := trace.Meta{}
		for _, ev := range r.events {
			fn := ""
			switch ev.Kind {
			case trace.KindFunc:
				names[ev.Fn] = ev.Text
				continue
			case trace.KindGroup:
				groups[ev.Group] = true
				continue
			case trace.KindCall:
				var ok bool
				if fn, ok = names[ev.Fn]; !ok {
					t.Errorf("%s: call of fn %d before its name", level, ev.Fn)
				}
			case trace.KindFault:
				faults = append(faults, ev.Text)
			case trace.KindMeta:
				meta.Parse(ev.Text)
			}
			if ev.Group != 0 && !groups[ev.Group] {
				t.Errorf("%s: %v of group %d before its name", level, ev.Kind, ev.Group)
			}
			if !traceKeeps(level, ev.Kind, fn) {
				t.Errorf("%s: the trace holds %v %s", level, ev.Kind, fn)
			}
		}
		if len(faults) != 2 {
			t.Errorf("%s: %d fault records, want 2", level, len(faults))
		}
		if meta[trace.MetaTraceLevel] != level {
			t.Errorf("%s: metadata %s=%q", level, trace.MetaTraceLevel, meta[trace.MetaTraceLevel])
		}
		if level == TraceOff && (len(names) != 0 || len(groups) != 0) {
			t.Errorf("off: name records %v, groups %v: nothing kept uses them", names, groups)
		}
		t.Logf("%s: %d events, %d bytes", level, r.stats.Runtime.TraceEvents, r.stats.Runtime.TraceBytes)
	}
	// memory keeps every record all has but the bookkeeping calls.
	count := func(r levelRun) map[string]int {
		m := map[string]int{}
		names := map[uint16]string{}
		for _, ev := range r.events {
			switch ev.Kind {
			case trace.KindFunc:
				names[ev.Fn] = ev.Text
			case trace.KindCall:
				m[names[ev.Fn]]++
			case trace.KindGroup, trace.KindLog:
			default:
				m[ev.Kind.String()]++
			}
		}
		return m
	}
	want := count(base)
	for _, fn := range []string{"aclCreateTensor", "aclDestroyTensor", "aclnnMulGetWorkspaceSize"} {
		if want[fn] == 0 {
			t.Errorf("all lacks %s", fn)
		}
		delete(want, fn)
	}
	if got := count(runs[TraceMemory]); !reflect.DeepEqual(got, want) {
		t.Errorf("memory holds %v, want %v", got, want)
	}
}

var storageName = regexp.MustCompile(`0x[0-9a-f]+#`)

// deterministic is s without its timings, the trace's own size and the faults' storage addresses (those
// of the mover's host copies): what must not change with the level.
func deterministic(s trace.Stats) trace.Stats {
	s.OffloadWaitNS, s.RestoreWaitNS, s.WaitNS, s.DeviceCopyNS, s.DeviceCopyBytes, s.DeviceStallNS = 0, 0, 0, 0, 0, 0
	s.Faults = append([]trace.Fault(nil), s.Faults...)
	for i := range s.Faults {
		s.Faults[i].Storage = trace.StorageName(storageName.ReplaceAllString(string(s.Faults[i].Storage), "S#"))
	}
	if s.Runtime != nil {
		rt := *s.Runtime
		rt.TraceEvents, rt.TraceBytes = 0, 0
		s.Runtime = &rt
	}
	return s
}
