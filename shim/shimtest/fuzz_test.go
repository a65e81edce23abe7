// fuzz_test.go owns the ABI fuzz test against the real agent (issue 15): sa-fuzz (shim/c/test/sa_fuzz.c)
// makes random control calls with good and bad arguments, garbage pointers among them, under the preloaded
// agent on the emulator. Each seed must exit 0 with no failed check: the process survived, every restored
// storage was byte-exact, the refused saves were EINVAL and the stats' "rejected" equal the refusals. The
// soak (scripts/soak.mk) runs it with SWAPAGENT_SOAK_FUZZ_CALLS=1000000.
package shimtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

func TestFuzzABI(t *testing.T) {
	calls := 50000
	if v := os.Getenv("SWAPAGENT_SOAK_FUZZ_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SWAPAGENT_SOAK_FUZZ_CALLS=%q is not a call count", v)
		}
		calls = n
	}
	prog := testenv.Path(t, "build/test/sa-fuzz")
	// The policies and prefetch depths move storages differently; every seed mixes the same bad arguments.
	for seed, cfg := range []struct{ policy, prefetch string }{
		{"safe", "1"}, {"safe", "2"}, {"outputs-only", "1"}, {"safe", "0"}, {"outputs-only", "2"},
	} {
		seed++
		t.Run(fmt.Sprintf("seed%d-%s-prefetch%s", seed, cfg.policy, cfg.prefetch), func(t *testing.T) {
			t.Parallel()
			env := testenv.AgentEnv(t, t.TempDir(), "SWAPAGENT_POLICY="+cfg.policy, "SWAPAGENT_PREFETCH="+cfg.prefetch,
				"SWAPAGENT_MIN_BYTES=4096")
			start := time.Now()
			r := testenv.Run(t, time.Minute+time.Duration(calls)*time.Millisecond, env, prog, strconv.Itoa(seed),
				strconv.Itoa(calls))
			passed, failed := regressCounts(t, r.Stdout)
			if r.Err != nil || failed != 0 {
				t.Fatalf("sa-fuzz %d %d: %v, %d failed:\n%s\nstderr (tail):\n%s", seed, calls, r.Err, failed,
					r.Stdout, testenv.Tail(r.Stderr, 40))
			}
			for _, must := range []string{"ok   survive:", "ok   save.garbage:", "ok   unpack.bytes:",
				"ok   final.bytes:", "ok   stats.rejected:"} {
				if !strings.Contains(r.Stdout, must) {
					t.Errorf("missing check line %q:\n%s", must, r.Stdout)
				}
			}
			for _, never := range []string{"fatal error", "internal error", "panic", "SIGSEGV"} {
				if strings.Contains(r.Stderr, never) {
					t.Errorf("stderr holds %q:\n%s", never, testenv.Tail(r.Stderr, 40))
				}
			}
			// A refused pointer is one warning line, once: a buggy framework cannot flood the log.
			if n := strings.Count(r.Stderr, "swapagent_save: invalid argument: not memory the agent may copy"); n != 1 {
				t.Errorf("%d warning lines for refused save pointers, want 1", n)
			}
			t.Logf("seed %d, %d calls: %d checks passed in %v", seed, calls, passed, time.Since(start).Round(time.Millisecond))
		})
	}
}
