// deferred_test.go owns the tests of the deferred control calls (swapagent.h, "Deferred calls") against the
// real agent: sa-deferred (shim/c/test/sa_deferred.c) runs each layer by the plain calls and by the deferred
// ones under policy off and compares what the agent made of them; under safe they are deferred only while
// nothing can move; under outputs-only they are refused. The trace must hold the deferred calls as the plain ones: the same events per group, in the
// order the program made the calls, each stamped with its caller's thread and time.
package shimtest

import (
	"bufio"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

func runDeferred(t *testing.T, policy string) (testenv.Result, string) {
	t.Helper()
	dir := t.TempDir()
	pol := policy
	if policy == "threads" {
		pol = "off"
	}
	env := testenv.AgentEnv(t, dir, "SWAPAGENT_POLICY="+pol, "SWAPAGENT_MIN_BYTES=65536")
	r := testenv.Run(t, time.Minute, env, testenv.Path(t, "build/test/sa-deferred"), policy)
	passed, failed := regressCounts(t, r.Stdout)
	if r.Err != nil || failed != 0 || passed == 0 {
		t.Fatalf("sa-deferred %s: %v, %d passed, %d failed:\n%s\nstderr:\n%s", policy, r.Err, passed, failed,
			strings.Join(failing(r.Stdout, ""), "\n"), testenv.Tail(r.Stderr, 40))
	}
	return r, traceFile(t, dir)
}

func TestDeferredCallsMatchPlain(t *testing.T) {
	r, path := runDeferred(t, "off")
	for _, must := range []string{"ok   deferred:", "ok   off step2 layer 2 save 5 reason and state:",
		"ok   off step2 deferred.1 save 4 reason: 0", "ok   off stats deferred.2 kept:", "ok   misuse counted:",
		"ok   refused unmapped input_ptrs:", "ok   refusals counted:", "ok   deferred.1 unpack_resident 4:",
		"ok   refused direct NULL group:", "ok   refused direct n_save too large:"} {
		if !strings.Contains(r.Stdout, must) {
			t.Errorf("missing check line %q:\n%s", must, r.Stdout)
		}
	}
	abiKinds := map[trace.Kind]bool{trace.KindRegionEnter: true, trace.KindSave: true, trace.KindDescribe: true,
		trace.KindRegionExit: true, trace.KindClassify: true, trace.KindBackwardEnter: true,
		trace.KindUnpack: true, trace.KindBackwardExit: true}
	names := map[uint32]string{}
	perGroup := map[string][]trace.Kind{} // the events of each group, in file order
	var order []string                    // groups of the region enters, in file order
	var lastTS int64
	tids := map[uint32]bool{}
	eachEvent(t, path, func(ev *trace.Event) {
		if ev.Kind == trace.KindGroup {
			names[ev.Group] = ev.Text
			return
		}
		g := names[ev.Group]
		if !abiKinds[ev.Kind] || !(strings.HasPrefix(g, "plain.") || strings.HasPrefix(g, "deferred.")) {
			return
		}
		perGroup[g] = append(perGroup[g], ev.Kind)
		if ev.Kind == trace.KindRegionEnter {
			order = append(order, g)
		}
		if ev.Kind != trace.KindClassify { // the calls: in the order they were made, by the program's thread
			if ev.TS < lastTS {
				t.Errorf("%v of %s at %d, before the call ahead of it (%d)", ev.Kind, g, ev.TS, lastTS)
			}
			lastTS = ev.TS
			tids[ev.TID] = true
		}
	})
	if len(tids) != 1 {
		t.Errorf("the calls come from threads %v, want the program's one thread", tids)
	}
	for _, i := range []string{"0", "1", "2"} {
		p, d := perGroup["plain."+i], perGroup["deferred."+i]
		if len(p) == 0 || !equalKinds(p, d) {
			t.Errorf("group %s: deferred events %v, plain %v", i, d, p)
		}
	}
	want := strings.Repeat("plain.0 deferred.0 plain.1 deferred.1 plain.2 deferred.2 ", 2)
	if got := strings.Join(order, " ") + " "; !strings.HasPrefix(got, want) {
		t.Errorf("region enters in the trace: %s, want %s first", got, want)
	}
}

// eachEvent calls fn with each event of the trace at path, in file order.
func eachEvent(t *testing.T, path string, fn func(*trace.Event)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := trace.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	var ev trace.Event
	for {
		if err := rd.Next(&ev); err == io.EOF {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		fn(&ev)
	}
}

func equalKinds(a, b []trace.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Under safe the calls are queued while nothing can move, and run at once for good from the first call
// that may move a storage.
func TestDeferredCallsUnderSafe(t *testing.T) {
	r, _ := runDeferred(t, "safe")
	for _, must := range []string{"ok   small step2 layer 2 save 5 reason and state:",
		"ok   small step2 deferred.1 save 4 reason: 6", "ok   small-deferred.1 unpack_resident 5:",
		"ok   queued misuse:", "ok   queued misuse counted:",
		"ok   big region end runs now:", "ok   closed for good:", "ok   after step2 layer 2 save 5 reason and state:",
		"ok   after stats after-deferred.2 kept:"} {
		if !strings.Contains(r.Stdout, must) {
			t.Errorf("missing check line %q:\n%s", must, r.Stdout)
		}
	}
}

func TestDeferredCallsRefusedUnderOutputsOnly(t *testing.T) {
	r, _ := runDeferred(t, "outputs-only")
	for _, must := range []string{"ok   not deferred under outputs-only:", "ok   end refused:", "ok   nothing done:"} {
		if !strings.Contains(r.Stdout, must) {
			t.Errorf("missing check line %q:\n%s", must, r.Stdout)
		}
	}
}

// Threads making deferred calls at once: every call reaches the trace, none is refused.
func TestDeferredCallsFromThreads(t *testing.T) {
	r, path := runDeferred(t, "threads")
	if strings.Contains(r.Stderr, "swapagent: warning:") {
		t.Errorf("the agent refused calls:\n%s", testenv.Tail(r.Stderr, 20))
	}
	tids := map[uint32]bool{}
	eachEvent(t, path, func(ev *trace.Event) {
		if ev.Kind == trace.KindRegionEnter {
			tids[ev.TID] = true
		}
	})
	if len(tids) != 4 {
		t.Errorf("region enters from threads %v, want the program's 4 calling threads", tids)
	}
	s := readSummary(t, path)
	// 4 threads x 2000 regions, 3 saves each (sa_deferred.c's THREADS, ROUNDS).
	if s.kinds[trace.KindRegionEnter] != 8000 || s.kinds[trace.KindSave] != 24000 ||
		s.kinds[trace.KindUnpack] != 24000 || s.kinds[trace.KindBackwardExit] != 8000 || s.lost != 0 {
		t.Errorf("trace: %d region enters, %d saves, %d unpacks, %d backward exits, %d lost; want 8000, 24000, "+
			"24000, 8000, 0", s.kinds[trace.KindRegionEnter], s.kinds[trace.KindSave], s.kinds[trace.KindUnpack],
			s.kinds[trace.KindBackwardExit], s.lost)
	}
}
