package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

// The demo's three runs as a user reads them: run's memory line fits in 120 characters, says "swap" only
// where something was swapped out, and claims no saving for the outputs-only run that faulted in its first
// step; report --baseline refuses to call that run's peak a saving (exit 4).
func TestMemoryLineOfTheDemoRuns(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	dir := t.TempDir()
	line := regexp.MustCompile(`(?m)^  device memory: .*$`)
	want := map[string]func(string) bool{
		"safe": func(l string) bool {
			return regexp.MustCompile(`peak \S+ \S+ in use; about \S+ \S+ without swap \(estimate\): saved about \S+ \S+ \(\d+%\)$`).MatchString(l)
		},
		"off": func(l string) bool { return strings.HasSuffix(l, "in use, nothing swapped out") },
		"outputs-only": func(l string) bool {
			return strings.HasSuffix(l, "in use; no saving claimed: the run faulted before a whole step")
		},
	}
	for _, p := range []string{"safe", "off", "outputs-only"} {
		r := swapagent(t, nil, "run", "--policy", p, "--out", filepath.Join(dir, p), "--", sim, "--steps", "2")
		l := line.FindString(r.Stderr)
		if l == "" || len(l) > 120 || !want[p](l) || strings.Contains(l, "with swap") {
			t.Errorf("%s: memory line %q (%d characters)\n%s", p, l, len(l), testenv.Tail(r.Stderr, 20))
		}
		if strings.Contains(r.Stderr, "    saving:") {
			t.Errorf("%s: run's summary has report's saving detail", p)
		}
	}
	rep := swapagent(t, nil, "report", filepath.Join(dir, "safe"))
	if !strings.Contains(rep.Stdout, "    saving: about ") || !strings.Contains(rep.Stdout, "report --baseline` measures") {
		t.Errorf("report of the safe run: no saving detail\n%s", rep.Stdout)
	}
	b := swapagent(t, nil, "report", "--baseline", filepath.Join(dir, "off"), filepath.Join(dir, "outputs-only"))
	if b.Code != exitNoClaim || !strings.Contains(b.Stdout, "saved, measured: none claimed: this run faulted before a whole step") {
		t.Errorf("report --baseline off outputs-only: exit %d, want %d\n%s%s", b.Code, exitNoClaim, b.Stdout, b.Stderr)
	}
	b = swapagent(t, nil, "report", "--baseline", filepath.Join(dir, "off"), filepath.Join(dir, "safe"))
	if b.Code != exitOK || !strings.Contains(b.Stdout, "saved, measured: ") || strings.Contains(b.Stdout, "none claimed") {
		t.Errorf("report --baseline off safe: exit %d\n%s%s", b.Code, b.Stdout, b.Stderr)
	}
}
