// queued_test.go owns the tests of the control calls' one path (shim/c/calls.c) and its queued calls
// (swapagent.h, "Queued calls") against the real agent: sa-queued (shim/c/test/sa_queued.c) runs each layer
// by plain calls and queued ones under policy off and compares what the agent made of them; under safe they
// are queued only while nothing can move; under outputs-only they run at once. The trace must hold the
// queued calls as the plain ones: the same events per group, in the order the program made the calls, each
// stamped with its caller's thread and time. Where the kernel refuses process_vm_readv the calls' arguments
// go through a pipe, with the same results.
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

// runQueued runs sa-queued in mode under the agent (extra: more environment) and returns its result and trace.
func runQueued(t *testing.T, mode string, extra ...string) (testenv.Result, string) {
	t.Helper()
	dir := t.TempDir()
	pol := mode
	if mode == "threads" {
		pol = "off"
	}
	env := testenv.AgentEnv(t, dir, append([]string{"SWAPAGENT_POLICY=" + pol, "SWAPAGENT_MIN_BYTES=65536"},
		extra...)...)
	r := testenv.Run(t, time.Minute, env, testenv.Path(t, "build/test/sa-queued"), mode)
	passed, failed := regressCounts(t, r.Stdout)
	if r.Err != nil || failed != 0 || passed == 0 {
		t.Fatalf("sa-queued %s: %v, %d passed, %d failed:\n%s\nstderr:\n%s", mode, r.Err, passed, failed,
			strings.Join(failing(r.Stdout, ""), "\n"), testenv.Tail(r.Stderr, 40))
	}
	return r, traceFile(t, dir)
}

func TestQueuedCallsMatchPlain(t *testing.T) {
	r, path := runQueued(t, "off")
	checkQueuedOff(t, r, path)
}

// Where the kernel refuses process_vm_readv (a seccomp filter, qemu-user) the calls' arguments and outputs go
// through a pipe: the same calls give the same results, and the same bad pointers are refused.
func TestQueuedCallsThroughPipe(t *testing.T) {
	r, path := runQueued(t, "off", "SWAPAGENT_TEST_PIPE_COPIES=1")
	checkQueuedOff(t, r, path)
}

func checkQueuedOff(t *testing.T, r testenv.Result, path string) {
	t.Helper()
	for _, must := range []string{"ok   queueing:", "ok   off step2 layer 2 save 5 reason and state:",
		"ok   off step2 queued.1 save 4 reason: 0", "ok   off stats queued.2 kept:", "ok   misuse counted:",
		"ok   refused unmapped input_ptrs:", "ok   refused unmapped handles:", "ok   refused unmapped record:",
		"ok   refusals counted:", "ok   queued.1 unpack_resident 4:", "ok   refused own NULL group:",
		"ok   refused own n_save too large:"} {
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
		if !abiKinds[ev.Kind] || !(strings.HasPrefix(g, "plain.") || strings.HasPrefix(g, "queued.")) {
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
		p, d := perGroup["plain."+i], perGroup["queued."+i]
		if len(p) == 0 || !equalKinds(p, d) {
			t.Errorf("group %s: queued events %v, plain %v", i, d, p)
		}
	}
	want := strings.Repeat("plain.0 queued.0 plain.1 queued.1 plain.2 queued.2 ", 2)
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
func TestQueuedCallsUnderSafe(t *testing.T) {
	r, _ := runQueued(t, "safe")
	for _, must := range []string{"ok   small step2 layer 2 save 5 reason and state:",
		"ok   small step2 queued.1 save 4 reason: 6", "ok   small-queued.1 unpack_resident 5:",
		"ok   queued misuse:", "ok   queued misuse counted:", "ok   big region exit runs now:",
		"ok   queueing closed:", "ok   closed for good:", "ok   after step2 layer 2 save 5 reason and state:",
		"ok   after stats after-queued.2 kept:"} {
		if !strings.Contains(r.Stdout, must) {
			t.Errorf("missing check line %q:\n%s", must, r.Stdout)
		}
	}
}

// Under a policy that queues nothing the option changes nothing: each call runs at once.
func TestQueuedCallsRunNowUnderOutputsOnly(t *testing.T) {
	r, _ := runQueued(t, "outputs-only")
	for _, must := range []string{"ok   not queued under outputs-only:", "ok   exit runs:", "ok   misuse at once:",
		"ok   saved:"} {
		if !strings.Contains(r.Stdout, must) {
			t.Errorf("missing check line %q:\n%s", must, r.Stdout)
		}
	}
}

// Threads making queued calls at once: every call reaches the trace, none is refused.
func TestQueuedCallsFromThreads(t *testing.T) {
	r, path := runQueued(t, "threads")
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
	// 4 threads x 2000 regions, 3 saves each (sa_queued.c's THREADS, ROUNDS).
	if s.kinds[trace.KindRegionEnter] != 8000 || s.kinds[trace.KindSave] != 24000 ||
		s.kinds[trace.KindUnpack] != 24000 || s.kinds[trace.KindBackwardExit] != 8000 || s.lost != 0 {
		t.Errorf("trace: %d region enters, %d saves, %d unpacks, %d backward exits, %d lost; want 8000, 24000, "+
			"24000, 8000, 0", s.kinds[trace.KindRegionEnter], s.kinds[trace.KindSave], s.kinds[trace.KindUnpack],
			s.kinds[trace.KindBackwardExit], s.lost)
	}
}
