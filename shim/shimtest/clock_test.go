// clock_test.go owns the test of the trace's one clock: every event of a trace, whichever thread recorded
// it and whether the agent or the C side stamped it, is on the clock that starts at the library's load.
package shimtest

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// TestOneClockUnderLoad runs sa-queued (plain control calls stamped by the agent, queued ones and
// runtime calls stamped by the C side) beside a CPU hog, many rounds: a loaded machine is where the Go
// runtime's init thread used to read the clock's start before the library's constructor had set it, and
// the agent's stamps then counted from boot, not from the load. Each event must lie between the load and
// the end of the run; every other round the library's constructor is made to lose that race for certain
// (SWAPAGENT_TEST_LATE_INIT). SWAPAGENT_CLOCK_ROUNDS sets the rounds (default 6).
func TestOneClockUnderLoad(t *testing.T) {
	rounds := 6
	if v, err := strconv.Atoi(os.Getenv("SWAPAGENT_CLOCK_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	var hogs sync.WaitGroup
	for i := 0; i < 2*runtime.NumCPU(); i++ {
		hogs.Add(1)
		go func() {
			defer hogs.Done()
			for x := uint64(1); ctx.Err() == nil; x++ {
				for j := 0; j < 1<<16; j++ {
					x = x*6364136223846793005 + 1
				}
			}
		}()
	}
	defer func() { cancel(); hogs.Wait() }()

	for round := 0; round < rounds && !t.Failed(); round++ {
		dir := t.TempDir()
		env := testenv.AgentEnv(t, dir, "SWAPAGENT_POLICY=off", "SWAPAGENT_MIN_BYTES=65536")
		if round%2 == 1 {
			env = append(env, "SWAPAGENT_TEST_LATE_INIT=1")
		}
		begin := time.Now()
		r := testenv.Run(t, 2*time.Minute, env, testenv.Path(t, "build/test/sa-queued"), "threads")
		took := time.Since(begin)
		if r.Err != nil {
			t.Fatalf("round %d: sa-queued: %v\n%s", round, r.Err, testenv.Tail(r.Stderr, 20))
		}
		n, bad := 0, 0
		eachEvent(t, traceFile(t, dir), func(ev *trace.Event) {
			n++
			if ev.TS < 0 || ev.TS > int64(took) {
				if bad++; bad <= 5 {
					t.Errorf("round %d: %v event at %d ns, outside the run (0..%d ns)", round, ev.Kind, ev.TS, took)
				}
			}
		})
		if n == 0 {
			t.Fatalf("round %d: empty trace", round)
		}
		if bad > 5 {
			t.Errorf("round %d: %d of %d events outside the run", round, bad, n)
		}
	}
}
