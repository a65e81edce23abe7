// decoder_test.go runs the real thing end to end: decoder-sim on the emulator under `swapagent run` with
// the real agent library, then `swapagent report` on what it wrote, also after a SIGKILL mid-run.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
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
	for _, w := range []string{"1 traced process(es)", "decoder-sim", "aclrtMalloc", "device memory:", "kept:", "faults: 0"} {
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
			ReleasedExternal uint64 `json:"released_external"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report JSON (%v): %s", err, r.Stdout)
	}
	p := doc.Processes[0]
	if p.Calls["aclrtMalloc"] == 0 || p.Device.AllocatedBytes == 0 || p.PeakDeviceBytes == 0 || p.ReleasedExternal != 0 {
		t.Errorf("process figures: %+v", p)
	}
}

// TestReportAfterSIGKILL is the crash-safety must-show: a process killed with SIGKILL leaves a trace
// that `report` still reads (exit 0), with a note when it ends mid-batch.
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

	// Wait until the agent has put at least one batch on disk, then kill the workload outright.
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
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Errorf("run exit %d, want 137; stderr:\n%s", code, stderr.String())
	}

	r := swapagent(t, nil, "report", file)
	if r.Code != 0 || !strings.Contains(r.Stdout, "process "+strconv.Itoa(pid)) {
		t.Fatalf("report after SIGKILL: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	if r.Stderr != "" {
		oneLine(t, r, "trace ends mid-batch (process killed?)")
	}
}

// TestMemoryFiguresAgree is the must-show of the memory figures: on decoder-sim --hidden 64 --steps 2,
// run's summary, `report` text and `report --format json` give the same bytes saved, it matches replay's
// "memory saved vs no swap" within 1%, and it is more than half the no-swap peak.
func TestMemoryFiguresAgree(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	saved := regexp.MustCompile(`device memory: peak in use .* with swap, about .* without swap \(estimate implied by the trace.*\); saved (\d+) bytes`)
	figure := func(what, s string) uint64 {
		t.Helper()
		m := saved.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("%s has no memory figures:\n%s", what, s)
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	r := swapagent(t, nil, "run", "--lib", agentLib(t), "--policy", "safe", "--out", out, "--", sim, "--hidden", "64", "--steps", "2")
	if r.Code != 0 {
		t.Fatalf("run: exit %d\n%s", r.Code, r.Stderr)
	}
	fromRun := figure("run's summary", r.Stderr)

	r = swapagent(t, nil, "report", out)
	fromText := figure("report text", r.Stdout)

	r = swapagent(t, nil, "report", out, "--format", "json")
	var doc struct {
		Processes []struct {
			Memory struct {
				PeakInUse    uint64  `json:"peak_in_use_bytes"`
				PeakNoSwap   uint64  `json:"peak_no_swap_bytes"`
				SavedBytes   uint64  `json:"saved_bytes"`
				SavedPercent float64 `json:"saved_percent"`
			} `json:"memory"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("report json (%v): %s", err, r.Stdout)
	}
	m := doc.Processes[0].Memory

	r = swapagent(t, nil, "replay", out, "--policy", "safe")
	rm := regexp.MustCompile(`memory saved vs no swap: (-?\d+) bytes`).FindStringSubmatch(r.Stdout)
	if r.Code != 0 || rm == nil {
		t.Fatalf("replay: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	fromReplay, _ := strconv.ParseInt(rm[1], 10, 64)

	t.Logf("saved: run %d, text %d, json %d (%.1f%% of the no-swap peak %d, in use %d), replay %d",
		fromRun, fromText, m.SavedBytes, m.SavedPercent, m.PeakNoSwap, m.PeakInUse, fromReplay)
	if fromRun != fromText || fromText != m.SavedBytes {
		t.Errorf("bytes saved differ: run %d, report text %d, report json %d", fromRun, fromText, m.SavedBytes)
	}
	if diff := math.Abs(float64(m.SavedBytes) - float64(fromReplay)); fromReplay <= 0 || diff > 0.01*float64(fromReplay) {
		t.Errorf("report's %d bytes saved and replay's %d differ by more than 1%%", m.SavedBytes, fromReplay)
	}
	if m.SavedBytes*2 <= m.PeakNoSwap || m.PeakNoSwap != m.PeakInUse+m.SavedBytes {
		t.Errorf("saved %d of a no-swap peak of %d: want more than half", m.SavedBytes, m.PeakNoSwap)
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
	m := regexp.MustCompile(`ERROR SUMMARY: (\d+) fault\(s\) in (\d+) block\(s\) in pid \d+ \(policy outputs-only\): (.*)`).FindStringSubmatch(r.Stderr)
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
