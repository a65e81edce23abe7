// probe_test.go runs `swapagent probe` as users do (build/bin/swapagent, as root: CI is root): probing
// decoder-sim on the emulator, and the one-line errors of bad usage.
package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

func TestProbeDecoderSim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("swapagent probe needs root (unprivileged BPF is disabled here; CI runs as root)")
	}
	sim := testenv.Path(t, testenv.DecoderSim)
	r := swapagent(t, nil, "probe", "--", sim, "--steps", "1")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", r.code, r.stderr)
	}
	printed := regexp.MustCompile(`(?m)^calls aclnnMul (\d+)$`).FindStringSubmatch(r.stdout)
	probed := regexp.MustCompile(`(?m)^aclnnMul: calls (\d+), total `).FindStringSubmatch(r.stdout)
	if printed == nil || probed == nil || printed[1] != probed[1] {
		t.Errorf("decoder-sim's aclnnMul count %v and the probe's %v differ or are missing:\n%s", printed, probed, r.stdout)
	}
	if !strings.Contains(r.stderr, "functions of") {
		t.Errorf("stderr does not say what was attached: %q", r.stderr)
	}
}

func TestProbeUsageErrors(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"probe", "--lib", "/nonexistent/libascendcl.so", "--", sim}, "library not found"},
		{[]string{"probe", "--func", "no_such_function_anywhere", "--", sim}, "matches no function"},
		{[]string{"probe", "--pid", "1", "--", sim}, "not both"},
		{[]string{"probe", "--duration", "1s", "--", sim}, "--duration"},
		{[]string{"probe", "--bogus"}, "unknown flag"},
	}
	for _, c := range cases {
		r := swapagent(t, nil, c.args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 2 || len(lines) != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
