package shimtest

import (
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// The agent's control calls make no malloc of the host's: sa-heap (shim/c/test/sa_heap.c) counts the
// process's mallocs over 2000 layer steps of plain calls. One copy malloc'd per call scattered where the
// framework's own small objects landed, and the trace grew by half.
func TestControlCallsLeaveTheHostHeapAlone(t *testing.T) {
	env := testenv.AgentEnv(t, t.TempDir(), "SWAPAGENT_POLICY=off")
	r := testenv.Run(t, time.Minute, env, testenv.Path(t, "build/test/sa-heap"), "2000")
	if r.Err != nil || r.Code != 0 {
		t.Fatalf("sa-heap: exit %d (%v)\n%s\n%s", r.Code, r.Err, r.Stdout, testenv.Tail(r.Stderr, 20))
	}
	t.Log(r.Stdout)
}
