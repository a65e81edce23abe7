package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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

// Settings: one reading of byte counts everywhere, and run refuses a bad setting before it runs anything.
func TestSettingsCheckedOnce(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	r := swapagent(t, []string{"SWAPAGENT_MIN_BYTES=64K", "SWAPAGENT_TRACE_LIMIT=64K"}, "run", "--out", out, "--",
		sim, "--steps", "1")
	if r.Code != 0 || strings.Contains(r.Stderr, "is not") {
		t.Fatalf("64K settings: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	j := swapagent(t, nil, "report", "--format", "json", out)
	for _, k := range []string{`"min_bytes": "65536"`, `"trace_limit": "65536"`} {
		if !strings.Contains(j.Stdout, k) {
			t.Errorf("the trace's metadata lacks %s", k)
		}
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for _, bad := range []string{"SWAPAGENT_TRACE_LIMIT=garbage", "SWAPAGENT_TRACE_LIMIT=1", "SWAPAGENT_MIN_BYTES=-1",
		"SWAPAGENT_PREFETCH=x"} {
		r := swapagent(t, []string{bad}, "run", "--out", out, "--", "sh", "-c", "touch "+marker)
		name, _, _ := strings.Cut(bad, "=")
		if r.Code != exitUsage {
			t.Errorf("%s: exit %d, want %d", bad, r.Code, exitUsage)
		}
		oneLine(t, r, "bad "+name)
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the command ran", bad)
		}
	}
}

// A directly preloaded agent cannot refuse a bad setting: it says so once per job (a launcher's shell and
// the processes it starts share a process group), uses the default, and every trace records it.
func TestPreloadedAgentWarnsOncePerJob(t *testing.T) {
	out := t.TempDir()
	r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT=garbage"), "/bin/sh", "-c",
		"/bin/true; /bin/true; /bin/true")
	if r.Code != 0 || strings.Count(r.Stderr, `SWAPAGENT_TRACE_LIMIT="garbage" is not`) != 1 {
		t.Errorf("exit %d; want one warning in:\n%s", r.Code, r.Stderr)
	}
}

// The same once the job's group leader has exited (a launcher that left its workers running in the
// background): the group still names the job.
func TestPreloadedAgentWarnsOnceWithoutItsLeader(t *testing.T) {
	out, dir := t.TempDir(), t.TempDir()
	errs, done := filepath.Join(dir, "stderr"), filepath.Join(dir, "done")
	cmd := exec.Command("/bin/sh", "-c", `(sleep 0.3; /bin/true; /bin/true; /bin/true; : >"$2") 2>"$1" &`, "sh", errs, done)
	cmd.Env = testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT=garbage")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, which the shell leads and leaves
	leader, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s", err, leader)
	}
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the background processes did not finish")
		}
	}
	b, _ := os.ReadFile(errs)
	warned := strings.Count(string(leader), `SWAPAGENT_TRACE_LIMIT="garbage" is not`) +
		strings.Count(string(b), `SWAPAGENT_TRACE_LIMIT="garbage" is not`)
	if warned != 1 {
		t.Errorf("%d warnings; want one in:\nleader: %s\nthe rest: %s", warned, leader, b)
	}
}

// doctor on a trace directory (swapagent run --out, no msrun logs): a diagnosis from the traces alone that
// does not take the agent's own log for the job's, folds the faults of one cause, and names the cause its
// own owner and release lines show.
func TestDoctorOnATraceDirectory(t *testing.T) {
	out := t.TempDir()
	swapagent(t, nil, "run", "--policy", "outputs-only", "--out", out, "--", testenv.Path(t, testenv.DecoderSim),
		"--steps", "2")
	d := swapagent(t, nil, "doctor", out)
	blocks := strings.Count(d.Stdout, "\nunknown rank (")
	if d.Code != 1 || strings.Contains(d.Stdout, "no log of this process") || blocks == 0 || blocks > 3 ||
		!strings.Contains(d.Stdout, "from 1 trace alone (no job logs)") {
		t.Fatalf("doctor: exit %d, %d blocks\n%s%s", d.Code, blocks, d.Stdout, d.Stderr)
	}
	_, first, _ := strings.Cut(d.Stdout, "cause (most likely first):\n    1. ")
	first, _, _ = strings.Cut(first, "\n")
	if !strings.Contains(first, "released by layer.0's activation swap while it was still owned as keyword input of layer.0") {
		t.Errorf("the first block's cause: %q", first)
	}
	if n := strings.Count(d.Stdout, "guessed from the size as one of"); n > 2 {
		t.Errorf("%d size tables: one per size", n)
	}
}
