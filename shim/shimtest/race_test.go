package shimtest

import (
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// A kernel queued after the region exit, on a stream the region never used, reads a storage whose copy
// to host is in flight: the agent cannot order it, and reports it (detected=race) before it runs. The
// same kernel inside the region is ordered, and nothing is reported.
func TestRaceReportedWhenTheJobDefeatsTheOrdering(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-race")
	for _, mode := range []string{"race", "ordered"} {
		r := run(t, time.Minute, agentEnv(t, t.TempDir(), "SWAPAGENT_POLICY=safe"), prog, mode)
		if r.err != nil {
			t.Fatalf("sa-race %s: %v\nstdout:\n%s\nstderr:\n%s", mode, r.err, r.stdout, r.stderr)
		}
		block := strings.Contains(r.stderr, "FAULT (race): aclnnMul uses tensor 0") &&
			strings.Contains(r.stderr, "inside a storage of g while the agent is moving it")
		if block != (mode == "race") {
			t.Errorf("sa-race %s: fault block printed %v\nstderr:\n%s", mode, block, r.stderr)
		}
	}
}
