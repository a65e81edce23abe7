// decoder_test.go runs the real thing end to end: decoder-sim on the emulator under `swapagent run` with
// the real agent library, then `swapagent report` on what it wrote, also after a SIGKILL mid-run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/replay"
	"swapagent/report"
	"swapagent/trace"
)

func TestRunDecoderSimSummary(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	lib := agentLib(t)
	out := t.TempDir()
	r := swapagent(t, nil, "run", "--lib", lib, "--out", out, "--", sim, "--steps", "1", "--layers", "3")
	if r.Code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	for _, w := range []string{"1 traced process(es)", "decoder-sim", "aclrtMalloc", "device memory:", "kept:", "faults: 0",
		" B/event, "} {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("run summary lacks %q:\n%s", w, r.Stderr)
		}
	}

	r = swapagent(t, nil, "report", out, "--format", "json")
	if r.Code != 0 {
		t.Fatalf("report: exit %d: %s", r.Code, r.Stderr)
	}
	var doc struct {
		Processes []struct {
			Argv            []string          `json:"argv"`
			Calls           map[string]uint64 `json:"calls"`
			PeakDeviceBytes uint64            `json:"peak_device_bytes"`
			Device          struct {
				AllocatedBytes uint64 `json:"allocated_bytes"`
			} `json:"device"`
			ReleasedExternal uint64  `json:"released_external"`
			Path             string  `json:"path"`
			Events           int     `json:"events"`
			TraceBytes       int64   `json:"trace_bytes"`
			PerEvent         float64 `json:"trace_bytes_per_event"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report JSON (%v): %s", err, r.Stdout)
	}
	p := doc.Processes[0]
	// The trace's cost is the file's own size, per event as the events read.
	if fi, err := os.Stat(p.Path); err != nil || fi.Size() != p.TraceBytes || p.Events == 0 ||
		math.Abs(p.PerEvent-float64(p.TraceBytes)/float64(p.Events)) > 1e-9 {
		t.Errorf("trace %s: %d bytes, %.3f per event of %d (stat: %v)", p.Path, p.TraceBytes, p.PerEvent, p.Events, err)
	}
	if p.Calls["aclrtMalloc"] == 0 || p.Device.AllocatedBytes == 0 || p.PeakDeviceBytes == 0 || p.ReleasedExternal != 0 {
		t.Errorf("process figures: %+v", p)
	}
}

// TestReportAfterSIGKILL is the crash-safety must-show: a process killed with SIGKILL at a random moment
// leaves a trace that report reads, exiting 3 with one line that gives the exact last event written: the
// count a strict reader of the file finds, at the TS of that event.
func TestReportAfterSIGKILL(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	lib := agentLib(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Path(t, testenv.CLI), "run", "--lib", lib, "--out", out, "--",
		sim, "--steps", "2000", "--layers", "2")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// Its own process group, so a failing test can still end the workload along with run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	// Wait until the agent has put at least one batch on disk, then kill the workload outright, a random
	// moment later.
	var file string
	var pid int
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) && pid == 0 {
		time.Sleep(100 * time.Millisecond)
		files, _ := trace.FindTraces(out)
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && fi.Size() > 4096 {
				if _, evs, _ := trace.ReadFile(f); len(evs) > 0 {
					file = f
					parts := strings.Split(strings.TrimSuffix(filepath.Base(f), trace.FileSuffix), ".")
					pid, _ = strconv.Atoi(parts[len(parts)-1])
				}
			}
		}
	}
	if pid == 0 {
		t.Fatalf("no trace with a complete batch appeared in %s within 45 s", out)
	}
	time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Errorf("run exit %d, want 137; stderr:\n%s", code, stderr.String())
	}
	lastWritten(t, file, pid)
}

// lastWritten checks that report reads the trace at file of process pid, whose writer did not close it,
// exiting 3 with one line that names the last event written: what a strict reader finds in the file.
func lastWritten(t *testing.T, file string, pid int) {
	t.Helper()
	_, evs, err := trace.ReadFile(file)
	if err != nil && !errors.Is(err, trace.ErrTruncated) {
		t.Fatalf("strict read: %v", err)
	}
	if len(evs) == 0 {
		t.Fatal("no event written")
	}
	r := swapagent(t, nil, "report", file)
	if r.Code != 3 || !strings.Contains(r.Stdout, "process "+strconv.Itoa(pid)) {
		t.Fatalf("report: exit %d, want 3\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	oneLine(t, r, fmt.Sprintf("trace not closed (process killed?): events after #%d (+%.6fs) were never written",
		len(evs), float64(evs[len(evs)-1].TS)/1e9))
}

// A full disk (a 256 KiB tmpfs, mounted when the test runs as root) stops the trace where the space ends: the job
// goes on, and report reads what was written, exiting 3 with the exact last event written.
func TestReportAfterFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	out := t.TempDir()
	if err := syscall.Mount("tmpfs", out, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer func() { _ = syscall.Unmount(out, syscall.MNT_DETACH) }()
	r := testenv.Run(t, 2*time.Minute, testenv.AgentEnv(t, out), testenv.Path(t, testenv.DecoderSim), "--steps", "20")
	if r.Code != 0 {
		t.Fatalf("decoder-sim on a full disk: exit %d, want 0 (the job goes on)\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	files, err := trace.FindTraces(out)
	if err != nil || len(files) != 1 {
		t.Fatalf("traces %v (%v)", files, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(out, &st); err != nil || st.Bfree*uint64(st.Bsize) >= 64<<10 {
		t.Fatalf("the disk was not filled: %d bytes free (%v)", st.Bfree*uint64(st.Bsize), err)
	}
	parts := strings.Split(strings.TrimSuffix(filepath.Base(files[0]), trace.FileSuffix), ".")
	pid, _ := strconv.Atoi(parts[len(parts)-1])
	lastWritten(t, files[0], pid)
}

// The memory figures are the same everywhere: run's summary (its one line), report's text (the line and its
// saving detail, in bytes) and JSON, and replay of the same trace under the same policy agree on the
// estimated saving and its lower bound (replay within 1%: it simulates the peak), and the saving is more
// than half the no-swap peak.
func TestMemoryFiguresAgree(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	line := regexp.MustCompile(`device memory: peak (\S+ \S+) in use; about (\S+ \S+) without swap \(estimate\): saved about (\S+ \S+) \(`)
	detail := regexp.MustCompile(`    saving: about (\d+) bytes, at least (\d+) bytes`)
	r := swapagent(t, nil, "run", "--lib", agentLib(t), "--policy", "safe", "--out", out, "--", sim, "--hidden", "64", "--steps", "2")
	if r.Code != 0 {
		t.Fatalf("run: exit %d\n%s", r.Code, r.Stderr)
	}
	runLine := line.FindStringSubmatch(r.Stderr)
	if runLine == nil {
		t.Fatalf("run's summary has no memory line:\n%s", r.Stderr)
	}

	r = swapagent(t, nil, "report", out)
	textLine, d := line.FindStringSubmatch(r.Stdout), detail.FindStringSubmatch(r.Stdout)
	if textLine == nil || d == nil {
		t.Fatalf("report text has no memory line or saving detail:\n%s", r.Stdout)
	}
	textAbout, _ := strconv.ParseUint(d[1], 10, 64)
	textLeast, _ := strconv.ParseUint(d[2], 10, 64)

	r = swapagent(t, nil, "report", out, "--format", "json")
	var doc struct {
		Processes []struct {
			Memory report.MemFigures `json:"memory"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report json (%v): %s", err, r.Stdout)
	}
	m := doc.Processes[0].Memory

	r = swapagent(t, nil, "replay", out, "--policy", "safe", "--format", "json")
	var reps struct{ Replays []replay.Result }
	if err := json.Unmarshal([]byte(r.Stdout), &reps); r.Code != 0 || err != nil || len(reps.Replays) != 1 {
		t.Fatalf("replay: exit %d (%v)\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	rep := reps.Replays[0]
	replayText := swapagent(t, nil, "replay", out, "--policy", "safe").Stdout
	if !regexp.MustCompile(`device memory, simulated: peak .* in use; about .* without swap \(estimate\): saved about .*\n    saving: about \d+ bytes, at least \d+ bytes`).MatchString(replayText) {
		t.Errorf("replay's text has no estimate and bound:\n%s", replayText)
	}

	t.Logf("saved about/at least: run %q, text %d/%d, json %d/%d (%.1f%% of the no-swap peak %d, in use %d), replay %d/%d",
		runLine[0], textAbout, textLeast, m.SavedBytes, m.SavedAtLeast, m.SavedPercent, m.PeakNoSwap, m.PeakInUse,
		rep.SavedVsNoSwap, rep.SavedAtLeast)
	want := []string{report.Bytes(m.PeakInUse), report.Bytes(m.PeakNoSwap), report.Bytes(m.SavedBytes)}
	if !slices.Equal(runLine[1:], want) || !slices.Equal(textLine[1:], want) || textAbout != m.SavedBytes ||
		textLeast != m.SavedAtLeast {
		t.Errorf("figures differ: run %q, report text %q with %d/%d, report json %q with %d/%d", runLine[1:],
			textLine[1:], textAbout, textLeast, want, m.SavedBytes, m.SavedAtLeast)
	}
	for _, f := range []struct {
		what             string
		report, replayed int64
	}{{"estimate", int64(m.SavedBytes), rep.SavedVsNoSwap}, {"bound", int64(m.SavedAtLeast), rep.SavedAtLeast}} {
		if diff := math.Abs(float64(f.report - f.replayed)); f.replayed <= 0 || diff > 0.01*float64(f.replayed) {
			t.Errorf("%s: report's %d bytes saved and replay's %d differ by more than 1%%", f.what, f.report, f.replayed)
		}
	}
	if m.SavedAtLeast == 0 || m.SavedAtLeast > m.SavedBytes {
		t.Errorf("bound %d for an estimate of %d: want a positive bound below it", m.SavedAtLeast, m.SavedBytes)
	}
	if m.SavedBytes*2 <= m.PeakNoSwap || m.PeakNoSwap != m.PeakInUse+m.SavedBytes {
		t.Errorf("saved %d of a no-swap peak of %d: want more than half", m.SavedBytes, m.PeakNoSwap)
	}
}

// The saving a safe run prints is checked against the measured one: the same decoder-sim command under
// --policy off, peak minus peak. Either the estimate is within 5% of it or its printed lower bound is below
// it; a saving the trace does not support is printed as none only where none was measured beyond one step of
// the pool. The configurations are where the estimate once missed: the pool fragments more without swap
// (hidden 32 and 48), a prefetch of 2 that holds as much as no swap, and two streams.
func TestSavedFigureAgainstMeasured(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	lib := agentLib(t)
	cases := []struct {
		name     string
		prefetch string
		args     []string
	}{
		{"demo", "1", []string{"--steps", "3"}},
		{"hidden32", "1", []string{"--layers", "12", "--hidden", "32", "--seq", "1024", "--steps", "2"}},
		{"hidden32-vmm", "1", []string{"--layers", "12", "--hidden", "32", "--seq", "1024", "--steps", "2", "--alloc", "vmm"}},
		{"hidden48", "1", []string{"--hidden", "48", "--layers", "10", "--swap-layers", "0-8", "--steps", "2"}},
		{"prefetch2-nothing-saved", "2", []string{"--layers", "7", "--hidden", "12", "--swap-layers", "0,1,3,5", "--seq", "512",
			"--sync", "step", "--streams", "2", "--alloc", "vmm", "--launch", "thread", "--executor-cache", "on"}},
		{"streams2-prefetch2", "2", []string{"--steps", "2", "--streams", "2"}},
		{"hidden40-sync-step", "1", []string{"--layers", "8", "--hidden", "40", "--seq", "512", "--steps", "2", "--sync", "step"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := []string{"SWAPAGENT_PREFETCH=" + c.prefetch}
			mem := map[string]report.MemFigures{}
			var summary string
			for _, policy := range []string{"off", "safe"} {
				out := filepath.Join(dir, policy)
				r := swapagent(t, env, append([]string{"run", "--lib", lib, "--policy", policy, "--out", out, "--", sim}, c.args...)...)
				if r.Code != 0 {
					t.Fatalf("run --policy %s: exit %d: %s", policy, r.Code, r.Stderr)
				}
				summary = r.Stderr
				var doc struct {
					Processes []struct {
						Memory report.MemFigures `json:"memory"`
					} `json:"processes"`
				}
				r = swapagent(t, nil, "report", "--format", "json", out)
				if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
					t.Fatalf("report %s: %v %s", policy, err, r.Stdout)
				}
				mem[policy] = doc.Processes[0].Memory
			}
			safe := mem["safe"]
			measured := int64(mem["off"].PeakInUse) - int64(safe.PeakInUse)
			t.Logf("measured %d; printed about %d, at least %d, supported %v (pool step %d)", measured, safe.SavedBytes,
				safe.SavedAtLeast, safe.SavingSupported, safe.PoolStep)
			switch {
			case !safe.SavingSupported:
				if measured > int64(safe.PoolStep) || !strings.Contains(summary, "no saving this trace supports") {
					t.Errorf("no saving claimed, but %d bytes were measured (or the summary does not say so):\n%s", measured, summary)
				}
			case int64(safe.SavedAtLeast) > measured:
				t.Errorf("the bound %d is above the measured saving %d", safe.SavedAtLeast, measured)
			case math.Abs(float64(int64(safe.SavedBytes)-measured)) > 0.05*float64(measured) && safe.SavedAtLeast == 0:
				t.Errorf("estimate %d is not within 5%% of the measured %d, and no bound is printed", safe.SavedBytes, measured)
			}
			if safe.SavingSupported && !strings.Contains(summary, "saved about ") {
				t.Errorf("summary without the saving:\n%s", summary)
			}
		})
	}
}

// report --baseline: the same decoder-sim command under off and under safe, matched by command and rank;
// the measured saving is the difference of the two measured peaks, whatever the safe trace alone implies.
func TestReportBaselineMeasuresTheSaving(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	lib := agentLib(t)
	dir := t.TempDir()
	args := []string{sim, "--layers", "12", "--hidden", "32", "--seq", "1024", "--steps", "2"}
	peaks := map[string]uint64{}
	for _, policy := range []string{"off", "safe"} {
		out := filepath.Join(dir, policy)
		if r := swapagent(t, nil, append([]string{"run", "--lib", lib, "--policy", policy, "--out", out, "--"}, args...)...); r.Code != 0 {
			t.Fatalf("run --policy %s: exit %d: %s", policy, r.Code, r.Stderr)
		}
		r := swapagent(t, nil, "report", "--format", "json", out)
		var doc struct {
			Processes []struct {
				Memory struct {
					PeakInUse uint64 `json:"peak_in_use_bytes"`
				} `json:"memory"`
			} `json:"processes"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
			t.Fatalf("report %s: %v %s", policy, err, r.Stdout)
		}
		peaks[policy] = doc.Processes[0].Memory.PeakInUse
	}
	if peaks["safe"] >= peaks["off"] {
		t.Fatalf("peaks %v: safe must hold less than off", peaks)
	}
	r := swapagent(t, nil, "report", "--format", "json", "--baseline", filepath.Join(dir, "off"), filepath.Join(dir, "safe"))
	if r.Code != 0 {
		t.Fatalf("report --baseline: exit %d: %s", r.Code, r.Stderr)
	}
	var cmp struct {
		Comparisons []struct {
			BaselinePeak   uint64 `json:"baseline_peak_bytes"`
			Peak           uint64 `json:"peak_bytes"`
			SavedBytes     int64  `json:"saved_bytes"`
			BaselinePolicy string `json:"baseline_policy"`
			Policy         string `json:"policy"`
		} `json:"comparisons"`
		Unmatched []string `json:"unmatched"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &cmp); err != nil || len(cmp.Comparisons) != 1 || len(cmp.Unmatched) != 0 {
		t.Fatalf("report --baseline JSON (%v): %s", err, r.Stdout)
	}
	c := cmp.Comparisons[0]
	if c.BaselinePeak != peaks["off"] || c.Peak != peaks["safe"] || c.SavedBytes != int64(peaks["off"]-peaks["safe"]) ||
		c.BaselinePolicy != "off" || c.Policy != "safe" {
		t.Errorf("comparison %+v, want the measured peaks %v", c, peaks)
	}
	text := swapagent(t, nil, "report", "--baseline", filepath.Join(dir, "off"), filepath.Join(dir, "safe"))
	if text.Code != 0 || !strings.Contains(text.Stdout, "saved, measured: ") {
		t.Errorf("text: exit %d:\n%s", text.Code, text.Stdout)
	}
	if r := swapagent(t, nil, "report", "--format", "svg", "--baseline", dir, dir); r.Code != 2 {
		t.Errorf("--baseline with svg: exit %d, want 2", r.Code)
	}
}

// The demo's outputs-only run, read as a sanitizer's output: the first block names the cause (the policy
// moving a keyword input for layer.0), never the job's streams; no owner is "none recorded"; one block per
// storage; a closing ERROR SUMMARY line counts the faults by cause.
func TestOutputsOnlyFaultsReadLikeASanitizer(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	r := swapagent(t, nil, "run", "--lib", agentLib(t), "--policy", "outputs-only", "--out", out, "--", sim, "--steps", "3")
	if r.Code == 0 {
		t.Fatalf("outputs-only must fail like the reported job:\n%s", r.Stderr)
	}
	// replay's what-if says that the trace ends at the fault, before any backward
	if rp := swapagent(t, nil, "replay", "--policy", "safe", out); !strings.Contains(rp.Stdout,
		"note: the recording faulted in step 1") || !strings.Contains(rp.Stdout, "before any backward") {
		t.Errorf("replay on the crashed trace does not say what it covers:\n%s", rp.Stdout)
	}
	blocks := regexp.MustCompile(`(?m)^swapagent: ========= FAULT.*$`).FindAllString(r.Stderr, -1)
	if len(blocks) == 0 {
		t.Fatalf("no fault block:\n%s", r.Stderr)
	}
	_, first, _ := strings.Cut(r.Stderr, blocks[0])
	first, _, _ = strings.Cut(first, "\nswapagent: ========= FAULT")
	if strings.Contains(first, "job's streams") || !strings.Contains(first, "keyword input of layer.0") ||
		!strings.Contains(first, "for layer.0's offload") {
		t.Errorf("first block must name the keyword input and layer.0's move:\n%s", first)
	}
	if strings.Contains(r.Stderr, "owner: none recorded") {
		t.Errorf("an owner is \"none recorded\":\n%s", r.Stderr)
	}
	if len(blocks) > 12 {
		t.Errorf("%d fault blocks: repeats of one storage must fold", len(blocks))
	}
	m := regexp.MustCompile(`ERROR SUMMARY: (\d+) fault\(s\) with their repeats, (\d+) distinct \(one block each\), in pid \d+ \(policy outputs-only\): (.*)`).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("no ERROR SUMMARY line:\n%s", r.Stderr)
	}
	if n, _ := strconv.Atoi(m[2]); n != len(blocks) {
		t.Errorf("summary counts %s blocks, stderr has %d", m[2], len(blocks))
	}
	sum := 0
	total, _ := strconv.Atoi(m[1])
	for _, part := range strings.Split(m[3], "; ") {
		var k int
		if _, err := fmt.Sscanf(part, "%d", &k); err != nil {
			t.Fatalf("summary part %q", part)
		}
		sum += k
	}
	if sum != total || !strings.Contains(m[3], "moved by the policy") {
		t.Errorf("summary by cause %q does not add up to %d or lacks the policy's move", m[3], total)
	}
}
