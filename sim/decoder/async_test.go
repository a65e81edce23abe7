// async_test.go proves the swap correct under asynchronous execution, on the emulator with its hazard
// checker on and random delays on every stream: for every sync mode, prefetch depth, stream count and
// copy-engine speed, the step lines are bit-identical to a run without the agent and no two tasks on
// different streams touch the same bytes unordered. The control drops the agent's event ordering and
// shows that the checker, and the numbers, see it.
package decoder_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// asyncArgs is a small stack whose activations are all above SWAPAGENT_MIN_BYTES, so everything internal
// moves: 4 layers, 3 swapped, 3 steps.
var asyncArgs = []string{"--layers", "4", "--swap-layers", "0-2", "--seq", "1024", "--hidden", "16", "--steps", "3"}

var hazardCount = regexp.MustCompile(`(?m)^aclsim: hazards: (\d+)$`)

// simRun is one decoder-sim process.
type simRun struct {
	steps, Stderr string
	hazards       int
	late          int // runtime calls after aclFinalize (the checker's lines): the agent's, at exit
	releases      int // storages the agent released (decoder-sim's own count)
	Code          int
}

var agentLine = regexp.MustCompile(`agent present: \d+ saves, \d+ unpacks, (\d+) releases`)

// runSim runs decoder-sim with env added to a clean environment (testenv.CleanEnv).
func runSim(t *testing.T, env []string, args ...string) simRun {
	t.Helper()
	p := testenv.Run(t, 3*time.Minute, append(testenv.CleanEnv(), env...), testenv.Path(t, testenv.DecoderSim), args...)
	r := simRun{steps: stepText(p.Stdout), Stderr: p.Stderr, hazards: -1, Code: p.Code}
	if m := hazardCount.FindStringSubmatch(r.Stderr); m != nil {
		r.hazards, _ = strconv.Atoi(m[1])
	}
	r.late = strings.Count(r.Stderr, "aclsim: hazard: a runtime call after aclFinalize\n")
	if m := agentLine.FindStringSubmatch(r.Stderr); m != nil {
		r.releases, _ = strconv.Atoi(m[1])
	}
	return r
}

// agentEnv preloads the agent with policy safe and prefetch, under the hazard checker with jitter.
func agentEnv(t *testing.T, prefetch string, seed int, extra ...string) []string {
	return append([]string{"LD_PRELOAD=" + testenv.Path(t, testenv.AgentLib), "SWAPAGENT_OUT=" + t.TempDir(),
		"SWAPAGENT_POLICY=safe", "SWAPAGENT_PREFETCH=" + prefetch, "SWAPAGENT_MIN_BYTES=4096",
		"ACLSIM_CHECK_HAZARDS=1", "ACLSIM_JITTER_US=200", "ACLSIM_SEED=" + strconv.Itoa(seed)}, extra...)
}

// seeds is 5 in `make test`; `make soak` sets SWAPAGENT_SOAK_SEEDS=50.
func seeds(t *testing.T) int {
	if v := os.Getenv("SWAPAGENT_SOAK_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SWAPAGENT_SOAK_SEEDS=%q: want a positive integer", v)
		}
		return n
	}
	return 5
}

func TestAsyncSwapBitIdenticalAndHazardFree(t *testing.T) {
	base := runSim(t, []string{"ACLSIM_CHECK_HAZARDS=1"}, append(asyncArgs, "--sync", "op")...)
	if base.Code != 0 || strings.Count(base.steps, "\n") != 3 || base.hazards != 0 {
		t.Fatalf("baseline without the agent: exit %d, hazards %d, steps:\n%s\nstderr:\n%s", base.Code, base.hazards,
			base.steps, testenv.Tail(base.Stderr, 10))
	}
	n := seeds(t)
	for _, sync := range []string{"op", "layer", "step"} {
		for _, streams := range []string{"1", "2"} {
			for _, prefetch := range []string{"0", "1", "2"} {
				for _, gbps := range []string{"", "25", "2"} {
					name := fmt.Sprintf("sync=%s/streams=%s/prefetch=%s/gbps=%s", sync, streams, prefetch, gbps)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						for seed := 1; seed <= n; seed++ {
							var extra []string
							if gbps != "" {
								extra = append(extra, "ACLSIM_COPY_GBPS="+gbps)
							}
							r := runSim(t, agentEnv(t, prefetch, seed, extra...),
								append(asyncArgs, "--sync", sync, "--streams", streams)...)
							switch {
							case r.Code != 0:
								t.Fatalf("seed %d: exit %d\n%s", seed, r.Code, testenv.Tail(r.Stderr, 20))
							case r.hazards != 0:
								t.Fatalf("seed %d: %d hazards (want 0)\n%s", seed, r.hazards, hazardLines(r.Stderr))
							case r.late != 0:
								t.Fatalf("seed %d: the agent called the runtime %d times after the job's aclFinalize",
									seed, r.late)
							case r.steps != base.steps:
								t.Fatalf("seed %d: step lines differ from the run without the agent:\n%s---\n%s", seed,
									r.steps, base.steps)
							case r.releases == 0:
								t.Fatalf("seed %d: nothing was swapped\n%s", seed, testenv.Tail(r.Stderr, 5))
							}
						}
					})
				}
			}
		}
	}
}

// The control: without the agent's events the checker reports hazards on every seed, and the numbers
// change (the copies read activations before their kernels wrote them, and kernels read restored storages
// before the copies back landed).
func TestAsyncControlWithoutOrderingIsCaught(t *testing.T) {
	base := runSim(t, nil, append(asyncArgs, "--sync", "op")...)
	differ := 0
	for seed := 1; seed <= 3; seed++ {
		r := runSim(t, agentEnv(t, "1", seed, "SWAPAGENT_TEST_UNORDERED=1"),
			append(asyncArgs, "--sync", "step", "--streams", "2")...)
		if r.hazards <= 0 {
			t.Errorf("seed %d: hazards %d without the agent's ordering (want > 0)\n%s", seed, r.hazards,
				testenv.Tail(r.Stderr, 10))
		}
		if r.steps != base.steps {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("without the agent's ordering the step lines equal the baseline on every seed:\n%s", base.steps)
	}
}

func hazardLines(stderr string) string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "aclsim: hazard") && len(out) < 10 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
