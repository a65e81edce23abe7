// regress_test.go owns the hyper-parallel issue 294 regression tests against the real agent: sa-regress
// (shim/c/test/sa_regress.c) plays forward and backward through the C ABI on the emulator, and must pass
// under policy safe (also with the copy engine throttled, so copies land late) and must fail its input
// checks under outputs-only, the behaviour before the fix, which proves the checks can fail.
package shimtest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// regressSummary parses sa-regress's last line `N passed, N failed`.
var regressSummary = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

func regressCounts(t *testing.T, stdout string) (passed, failed int) {
	t.Helper()
	m := regressSummary.FindAllStringSubmatch(stdout, -1)
	if len(m) != 1 {
		t.Fatalf("sa-regress printed no single summary line:\n%s", stdout)
	}
	passed, _ = strconv.Atoi(m[0][1])
	failed, _ = strconv.Atoi(m[0][2])
	return passed, failed
}

// failing returns the FAIL lines of sa-regress whose check name contains role.
func failing(stdout, role string) []string {
	var out []string
	for _, l := range strings.Split(stdout, "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(name, "FAIL ") && strings.Contains(name+":", " "+role) {
			out = append(out, l)
		}
	}
	return out
}

func runRegress(t *testing.T, policy string, extra ...string) testenv.Result {
	t.Helper()
	prog := testenv.Path(t, "build/test/sa-regress")
	env := testenv.AgentEnv(t, t.TempDir(), append([]string{"SWAPAGENT_POLICY=" + policy, "SWAPAGENT_PREFETCH=1",
		"SWAPAGENT_MIN_BYTES=65536"}, extra...)...)
	return testenv.Run(t, time.Minute, env, prog, "4", "2")
}

// Issue 294 under the fix: inputs (positional and keyword, and their aliases) and outputs stay on device
// with their reasons, internals reach host and come back intact, a storage every layer shares and one two
// layers save complete backward, a storage saved twice moves once, released_external is 0.
func TestRegressSafeProtectsInputsAndOutputs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"unthrottled", nil},
		{"copy-engine-1GBps", []string{"ACLSIM_COPY_GBPS=1"}}, // copies land progressively: waits must be real
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runRegress(t, "safe", tc.extra...)
			passed, failed := regressCounts(t, r.Stdout)
			if r.Err != nil || failed != 0 {
				t.Fatalf("sa-regress under safe: %v, %d failed:\n%s\nstderr:\n%s",
					r.Err, failed, strings.Join(failing(r.Stdout, ""), "\n"), r.Stderr)
			}
			// 4 layers x 2 steps: dozens of checks per layer; a drop means checks were skipped.
			if passed < 250 {
				t.Errorf("only %d checks passed:\n%s", passed, r.Stdout)
			}
			for _, must := range []string{
				"ok   step1 layer.1 input.positional: out0: reason 1 input",
				"ok   step1 layer.1 input.keyword: rope: reason 1 input",
				"ok   step1 layer.1 input.positional.alias: out0: reason 7 duplicate",
				"ok   step1 layer.1 input.keyword.alias: rope: reason 7 duplicate",
				"ok   step1 layer.1 output: out1: reason 2 output",
				"ok   step1 layer.0 internal after layer.1 exit: act0: state 2",
				"ok   step1 layer.0 shared after layer.1 exit: cross: reason 5 shared",
				"ok   step2 layer.0 backward input.keyword: rope:",
				"ok   step2 shared.rope after backward",
				"ok   step2 layer.3 internal.duplicate moves once",
				"ok   stats.released_external: 0",
				"ok   stats.kept.input:",
				"ok   stats.offloaded_storages: 16 storages",
			} {
				if !strings.Contains(r.Stdout, must) {
					t.Errorf("missing check line %q", must)
				}
			}
			if lines := agentLines(r.Stderr); len(lines) != 0 {
				t.Errorf("agent complained under safe:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

// The control: outputs-only is hyper-parallel before the fix. The same program must fail, and name the
// input checks (positional and keyword) and the external releases.
func TestRegressOutputsOnlyFailsInputChecks(t *testing.T) {
	r := runRegress(t, "outputs-only")
	_, failed := regressCounts(t, r.Stdout)
	if code := r.Code; code != 1 || failed == 0 {
		t.Fatalf("sa-regress under outputs-only: exit %d (want 1), %d failed: the checks cannot fail?\n%s", code,
			failed, r.Stdout)
	}
	for _, role := range []string{"input.positional:", "input.keyword:", "input.positional.alias:",
		"input.keyword.alias:", "input.keyword after", "stats.released_external", "stats.kept.input"} {
		if len(failing(r.Stdout, role)) == 0 {
			t.Errorf("no failing %q check under outputs-only", role)
		}
	}
	// Everything the policy does not touch still passes: outputs, params, small storages.
	for _, role := range []string{"output:", "param:", "small:"} {
		if f := failing(r.Stdout, role); len(f) != 0 {
			t.Errorf("outputs-only should keep %q; failed:\n%s", role, strings.Join(f, "\n"))
		}
	}
	t.Logf("outputs-only: %d checks failed as expected; first: %s", failed, failing(r.Stdout, "input.keyword:")[0])
}
