// probe_test.go runs `swapagent probe` as users do (build/bin/swapagent, as root: CI is root): probing
// decoder-sim on the emulator, and the one-line errors of bad usage.
package main

import (
	"os"
	"path/filepath"
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
	if r.Code != 0 {
		t.Fatalf("exit %d, want 0\nstderr: %s", r.Code, r.Stderr)
	}
	printed := regexp.MustCompile(`(?m)^calls aclnnMul (\d+)$`).FindStringSubmatch(r.Stdout)
	probed := regexp.MustCompile(`(?m)^aclnnMul: calls (\d+), total `).FindStringSubmatch(r.Stdout)
	if printed == nil || probed == nil || printed[1] != probed[1] {
		t.Errorf("decoder-sim's aclnnMul count %v and the probe's %v differ or are missing:\n%s", printed, probed, r.Stdout)
	}
	if !strings.Contains(r.Stderr, "functions of") {
		t.Errorf("stderr does not say what was attached: %q", r.Stderr)
	}
}

func TestProbeUsageErrors(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	cases := []struct {
		args  []string
		want  string
		usage bool // bad usage: the usage follows the error line
	}{
		{[]string{"probe", "--lib", "/nonexistent/libascendcl.so", "--", sim}, "library not found", false},
		{[]string{"probe", "--func", "no_such_function_anywhere", "--", sim}, "matches no function", false},
		{[]string{"probe", "--lib", testenv.Path(t, testenv.DecoderSim), "--", sim}, "none of the probed functions", false},
		{[]string{"probe", "--pid", "1", "--", sim}, "not both", true},
		{[]string{"probe", "--duration", "1s", "--", sim}, "--duration", true},
		{[]string{"probe", "--bogus"}, "unknown flag", true},
	}
	for _, c := range cases {
		r := swapagent(t, nil, c.args...)
		if c.usage {
			usageErr(t, r, "probe", c.want)
			continue
		}
		lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
		if r.Code != 2 || len(lines) != 1 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, r.Code, r.Stderr, c.want)
		}
	}
}

// TestProbeExitStatusAndOutput: probe -- CMD exits with CMD's status (127 when it cannot start), warns
// when no probed function was called, and -o FILE keeps the histograms out of CMD's output.
func TestProbeExitStatusAndOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("swapagent probe needs root (unprivileged BPF is disabled here; CI runs as root)")
	}
	r := swapagent(t, nil, "probe", "--", "sh", "-c", "echo child; exit 3")
	if r.Code != 3 || !strings.Contains(r.Stderr, "warning: none of the") || !strings.Contains(r.Stderr, "was called") {
		t.Errorf("exit %d stderr %q: want 3 and a warning that nothing was hit", r.Code, r.Stderr)
	}
	r = swapagent(t, nil, "probe", "--", "/nonexistent/program")
	if r.Code != 127 {
		t.Errorf("missing program: exit %d, want 127; stderr %q", r.Code, r.Stderr)
	}
	out := filepath.Join(t.TempDir(), "hist.txt")
	sim := testenv.Path(t, testenv.DecoderSim)
	r = swapagent(t, nil, "probe", "-o", out, "--", sim, "--steps", "1", "--layers", "2")
	b, err := os.ReadFile(out)
	if r.Code != 0 || err != nil || !strings.Contains(string(b), "aclnnMul: calls ") || strings.Contains(r.Stdout, "aclnnMul: calls") ||
		!strings.Contains(r.Stdout, "calls aclnnMul ") {
		t.Errorf("-o: exit %d, file %q (%v), stdout %q", r.Code, b, err, r.Stdout)
	}
}
