// tracelevel_test.go proves SWAPAGENT_TRACE on decoder-sim: memory drops the per-op bookkeeping and keeps
// every allocation, free and swap record; off keeps the stats, the faults and the metadata; and the level
// changes nothing the agent counts or diagnoses (the stats' counters, the fault records under
// outputs-only).
package shimtest

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

var traceLevels = []string{"all", "memory", "off"}

// levelTrace is one decoder-sim run at a trace level, as read back.
type levelTrace struct {
	level  string
	bytes  int64             // the trace file's size
	calls  map[string]uint64 // KindCall events by function name
	kinds  map[trace.Kind]int
	stats  trace.Stats   // the last KindStats record
	faults []trace.Fault // KindFault records, in order
	meta   trace.Meta
}

// runAtLevel runs decoder-sim preloaded at level with extra environment; wantFail says it must exit
// non-zero (outputs-only faults), else it must succeed.
func runAtLevel(t *testing.T, level string, wantFail bool, extra ...string) levelTrace {
	t.Helper()
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	env := testenv.AgentEnv(t, out, append([]string{"SWAPAGENT_TRACE=" + level}, extra...)...)
	r := testenv.Run(t, 2*time.Minute, env, sim, "--steps", "2")
	if failed := r.Code != 0; failed != wantFail {
		t.Fatalf("decoder-sim at %s: exit %d (want failure: %v)\n%s", level, r.Code, wantFail, testenv.Tail(r.Stderr, 30))
	}
	if strings.Contains(r.Stderr, "SWAPAGENT_TRACE=") {
		t.Fatalf("the level was refused:\n%s", r.Stderr)
	}
	path := traceFile(t, out)
	f, err := trace.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := f.Warnings(); len(w) > 0 {
		t.Fatalf("%s: %v", level, w)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	lt := levelTrace{level: level, bytes: fi.Size(), calls: map[string]uint64{}, kinds: map[trace.Kind]int{},
		meta: trace.Meta{}}
	names := map[uint16]string{}
	groups := map[uint32]bool{}
	stats := 0
	for _, ev := range f.Events {
		lt.kinds[ev.Kind]++
		if ev.Group != 0 && ev.Kind != trace.KindGroup && !groups[ev.Group] {
			t.Errorf("%s: %v of group %d before its name", level, ev.Kind, ev.Group)
		}
		switch ev.Kind {
		case trace.KindFunc:
			names[ev.Fn] = ev.Text
		case trace.KindGroup:
			groups[ev.Group] = true
		case trace.KindCall:
			name, ok := names[ev.Fn]
			if !ok {
				t.Fatalf("%s: call of fn %d before its name", level, ev.Fn)
			}
			lt.calls[name]++
		case trace.KindStats:
			stats++
			lt.stats = trace.Stats{}
			if err := json.Unmarshal([]byte(ev.Text), &lt.stats); err != nil {
				t.Fatalf("%s: stats: %v", level, err)
			}
		case trace.KindFault:
			var f trace.Fault
			if err := json.Unmarshal([]byte(ev.Text), &f); err != nil {
				t.Fatalf("%s: fault record %q: %v", level, ev.Text, err)
			}
			lt.faults = append(lt.faults, f)
		case trace.KindMeta:
			lt.meta.Parse(ev.Text)
		}
	}
	if stats == 0 || lt.stats.Runtime == nil {
		t.Fatalf("%s: no stats record", level)
	}
	if lt.meta[trace.MetaTraceLevel] != level {
		t.Errorf("%s: metadata %s=%q", level, trace.MetaTraceLevel, lt.meta[trace.MetaTraceLevel])
	}
	return lt
}

// counters are the stats' fields that do not depend on timing or on the trace itself: every call count,
// the swap accounting, the faults (as comparable shows them), the refused calls.
func counters(s trace.Stats, shift uint64) trace.Stats {
	s.OffloadWaitNS, s.RestoreWaitNS, s.WaitNS, s.DeviceCopyNS, s.DeviceCopyBytes, s.DeviceStallNS = 0, 0, 0, 0, 0, 0
	s.Faults = comparable(s.Faults, shift)
	if s.Runtime != nil {
		rt := *s.Runtime
		rt.TraceEvents, rt.TraceBytes = 0, 0
		s.Runtime = &rt
	}
	return s
}

// processIDs are the numbers of a sync fault's exception info that name this process's thread and task,
// not the fault: they differ from one run to the next whatever the level.
var processIDs = regexp.MustCompile(`\b(task|thread) \d+`)

// hexAddr is an address in a fault's text.
var hexAddr = regexp.MustCompile(`0x[0-9a-f]{6,}`)

// comparable is faults as another run of the same job would write them: the emulator maps device memory at
// a new base in every process, so each device address moves by shift (this run's base to the first run's),
// and a sync fault's thread and task numbers are this process's.
func comparable(faults []trace.Fault, shift uint64) []trace.Fault {
	move := func(s string) string {
		return hexAddr.ReplaceAllStringFunc(s, func(h string) string {
			v, err := strconv.ParseUint(h[2:], 16, 64)
			if err != nil {
				return h
			}
			return fmt.Sprintf("%#x", v+shift)
		})
	}
	out := make([]trace.Fault, len(faults))
	for i, f := range faults {
		if f.Addr != 0 {
			f.Addr += trace.Uint(shift)
		}
		f.Storage = trace.StorageName(move(string(f.Storage)))
		f.Detail = processIDs.ReplaceAllString(move(f.Detail), "$1 N")
		out[i] = f
	}
	return out
}

// deviceShift is what moves r's device addresses onto base's: the difference of their first faults at a
// device address (0 when neither has one).
func deviceShift(base, r []trace.Fault) uint64 {
	for i := range min(len(base), len(r)) {
		if base[i].Addr != 0 && r[i].Addr != 0 {
			return uint64(base[i].Addr - r[i].Addr)
		}
	}
	return 0
}

// bookkeeping reports whether fn is per-op bookkeeping, which the memory level drops.
func bookkeeping(fn string) bool {
	switch fn {
	case "aclSetTensorAddr", "aclSetDynamicTensorAddr", "aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor":
		return true
	}
	return strings.HasPrefix(fn, "aclCreateTensor") || strings.HasPrefix(fn, "aclDestroyTensor") ||
		strings.HasSuffix(fn, "GetWorkspaceSize")
}

func TestTraceLevelsOnDecoderSim(t *testing.T) {
	runs := map[string]levelTrace{}
	for _, level := range traceLevels {
		runs[level] = runAtLevel(t, level, false)
	}
	all, mem, off := runs["all"], runs["memory"], runs["off"]
	runtimeCalls := all.stats.Runtime.Events
	for _, level := range traceLevels {
		r := runs[level]
		t.Logf("%s: %d bytes, %d events, %.2f trace bytes per runtime call (%d calls)", level, r.bytes,
			r.stats.Runtime.TraceEvents, float64(r.bytes)/float64(runtimeCalls), runtimeCalls)
		if got, want := counters(r.stats, 0), counters(all.stats, 0); !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: stats counters differ from all's:\n%s\nall:\n%s", level, g, w)
		}
	}

	// all holds the bookkeeping memory must drop, and as many calls as decoder-sim made.
	for _, fn := range []string{"aclCreateTensor", "aclDestroyTensor", "aclnnMulGetWorkspaceSize"} {
		if all.calls[fn] == 0 {
			t.Errorf("all has no %s call: nothing to drop", fn)
		}
	}
	if !reflect.DeepEqual(all.calls, all.stats.Runtime.Calls) {
		t.Errorf("all: the trace's calls %v differ from the stats' %v", all.calls, all.stats.Runtime.Calls)
	}
	// memory: no bookkeeping; every other call of all's, same count (allocations, frees, copies, syncs,
	// launches).
	allocs := 0
	for fn, n := range all.calls {
		switch {
		case bookkeeping(fn):
			if mem.calls[fn] != 0 {
				t.Errorf("memory keeps %d %s calls", mem.calls[fn], fn)
			}
		case strings.HasPrefix(fn, "aclrtMalloc") || strings.HasPrefix(fn, "aclrtFree") || trace.IsLaunch(fn) ||
			strings.HasPrefix(fn, "aclrtMemcpy") || strings.HasPrefix(fn, "aclrtSynchronize"):
			if fn == "aclrtMalloc" || fn == "aclrtFree" {
				allocs++
			}
			if mem.calls[fn] != n {
				t.Errorf("memory has %d %s calls, all %d", mem.calls[fn], fn, n)
			}
		}
	}
	if allocs != 2 {
		t.Errorf("all lacks aclrtMalloc or aclrtFree: %v", all.calls)
	}
	for fn := range mem.calls {
		if bookkeeping(fn) {
			t.Errorf("memory holds %s", fn)
		}
	}
	// memory: every record that is not a call or a function name, as many as all has.
	for k, n := range all.kinds {
		if k != trace.KindCall && k != trace.KindFunc && mem.kinds[k] != n {
			t.Errorf("memory has %d %v records, all %d", mem.kinds[k], k, n)
		}
	}
	for _, k := range []trace.Kind{trace.KindRegionEnter, trace.KindRegionExit, trace.KindSave, trace.KindClassify,
		trace.KindState, trace.KindUnpack, trace.KindBackwardEnter, trace.KindBackwardExit} {
		if all.kinds[k] == 0 {
			t.Errorf("all has no %v record: decoder-sim did not swap", k)
		}
	}
	// off: the stats and the metadata, nothing else (no fault under safe, no name nothing uses).
	for k, n := range off.kinds {
		if k != trace.KindStats && k != trace.KindMeta {
			t.Errorf("off has %d %v records", n, k)
		}
	}
	if !(off.bytes < mem.bytes && mem.bytes < all.bytes) {
		t.Errorf("trace sizes all %d, memory %d, off %d: each level must write less", all.bytes, mem.bytes, off.bytes)
	}
}

// Under outputs-only decoder-sim faults on purpose: every level writes the same fault records (and the
// stats list the same), so a trace recorded at off still diagnoses the job.
func TestTraceLevelsKeepFaults(t *testing.T) {
	runs := map[string]levelTrace{}
	for _, level := range traceLevels {
		runs[level] = runAtLevel(t, level, true, "SWAPAGENT_POLICY=outputs-only")
	}
	all := runs["all"]
	if len(all.faults) == 0 {
		t.Fatal("outputs-only: no fault record at all")
	}
	for _, level := range traceLevels {
		r := runs[level]
		shift := deviceShift(all.faults, r.faults)
		if got, want := comparable(r.faults, shift), comparable(all.faults, 0); !reflect.DeepEqual(got, want) {
			g, _ := json.MarshalIndent(got, "", " ")
			w, _ := json.MarshalIndent(want, "", " ")
			t.Errorf("%s: fault records differ from all's:\n%s\nall:\n%s", level, g, w)
		}
		if got, want := counters(r.stats, shift), counters(all.stats, 0); !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("%s: stats counters differ from all's:\n%s\nall:\n%s", level, g, w)
		}
		t.Logf("%s: %d fault records, %d bytes", level, len(r.faults), r.bytes)
	}
	for k, n := range runs["off"].kinds {
		if k != trace.KindStats && k != trace.KindMeta && k != trace.KindFault {
			t.Errorf("off has %d %v records", n, k)
		}
	}
}
