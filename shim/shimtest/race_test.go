package shimtest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// A kernel queued after the region exit, on a stream the region never used, reads a storage whose copy
// to host is in flight: the agent cannot order it, and reports it (detected=race) before it runs. The
// same kernel inside the region is ordered, and nothing is reported.
func TestRaceReportedWhenTheJobDefeatsTheOrdering(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-race")
	for _, mode := range []string{"race", "ordered"} {
		r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, t.TempDir(), "SWAPAGENT_POLICY=safe"), prog, mode)
		if r.Err != nil {
			t.Fatalf("sa-race %s: %v\nstdout:\n%s\nstderr:\n%s", mode, r.Err, r.Stdout, r.Stderr)
		}
		block := strings.Contains(r.Stderr, "FAULT (race): aclnnMul uses tensor 0") &&
			strings.Contains(r.Stderr, "inside a storage of g while the agent is moving it")
		if block != (mode == "race") {
			t.Errorf("sa-race %s: fault block printed %v\nstderr:\n%s", mode, block, r.Stderr)
		}
	}
}

// The launch check follows executors: a cached executor re-pointed at address 0 and launched again with
// no new tensor, and tensors made on one thread but launched on another, are both reported before the
// kernel runs (shim/c/test/sa_exec.c).
func TestLaunchCheckFollowsExecutors(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-exec")
	r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, t.TempDir(), "SWAPAGENT_POLICY=safe"), prog)
	if r.Err != nil {
		t.Fatalf("sa-exec: %v\nstderr:\n%s", r.Err, r.Stderr)
	}
	var st trace.Stats
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &st); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, r.Stdout)
	}
	seen := map[uint64]bool{}
	for _, f := range st.Faults {
		if f.Detected == "launch" && f.Kernel == "aclnnMul" {
			seen[uint64(f.Size)] = true
		}
	}
	if !seen[1<<20] {
		t.Errorf("the cached executor re-pointed at address 0 was not reported: %+v", st.Faults)
	}
	if !seen[2<<20] {
		t.Errorf("the launch on another thread than its tensors' was not reported: %+v", st.Faults)
	}
}
