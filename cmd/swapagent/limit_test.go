// limit_test.go proves the flight recorder end to end (SWAPAGENT_TRACE_LIMIT): a long run keeps its newest
// segments within the limit, every command reads what is left and says what time it covers, replay --exec
// reproduces a fault from a trace whose head is gone, and a SIGKILL at any moment leaves a readable trace.
package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// segmentsIn returns the trace of the one process that wrote to out, loaded, and its files' sizes.
func segmentsIn(t *testing.T, out string) (*trace.File, []int64) {
	t.Helper()
	files, err := trace.FindTraces(out)
	if err != nil || len(files) != 1 {
		t.Fatalf("want one trace in %s, got %v (%v)", out, files, err)
	}
	f, err := trace.Load(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, p := range f.Segments {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	return f, sizes
}

func TestTraceLimitKeepsTheNewest(t *testing.T) {
	out := t.TempDir()
	r := testenv.Run(t, 5*time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT=2M"),
		testenv.Path(t, testenv.DecoderSim), "--steps", "200", "--seq", "512", "--sync", "step")
	if r.Code != 0 {
		t.Fatalf("decoder-sim: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	f, sizes := segmentsIn(t, out)
	var total, biggest int64
	for _, n := range sizes {
		total, biggest = total+n, max(biggest, n)
	}
	t.Logf("%d segments kept from %d on, %d bytes; the trace covers +%.3fs on", len(sizes), f.Header.Segment,
		total, float64(f.From)/1e9)
	if f.Header.Segment == 0 || len(sizes) < 2 {
		t.Fatalf("segments %d.. (%d kept): a 200-step run should have dropped its oldest", f.Header.Segment, len(sizes))
	}
	if total > 2<<20+biggest {
		t.Errorf("%d bytes of trace on disk, want at most 2 MiB plus one segment (%d)", total, biggest)
	}
	rep := swapagent(t, nil, "report", out)
	if rep.Code != 0 || !strings.Contains(rep.Stdout, "segment(s) dropped") || !strings.Contains(rep.Stdout, "covers +") {
		t.Fatalf("report: exit %d\n%s%s", rep.Code, rep.Stdout, rep.Stderr)
	}
	oneLine(t, rep, "segment(s) were dropped (SWAPAGENT_TRACE_LIMIT): the trace covers +")
	rp := swapagent(t, nil, "replay", f.Segments[0])
	if rp.Code != 0 || !strings.Contains(rp.Stdout, "the trace covers +") || !strings.Contains(rp.Stdout, "violations: 0") {
		t.Fatalf("replay: exit %d\n%s%s", rp.Code, rp.Stdout, rp.Stderr)
	}
	// The stats are whole-run counters: carried into every segment, they still count all 200 steps.
	js := swapagent(t, nil, "report", "--format", "json", out)
	var doc struct {
		Processes []struct {
			FirstSegment int `json:"trace_first_segment"`
			Segments     int `json:"trace_segments"`
			AgentStats   struct {
				Saves int `json:"saves"`
			} `json:"agent_stats"`
		} `json:"processes"`
	}
	if js.Code != 0 || json.Unmarshal([]byte(js.Stdout), &doc) != nil || len(doc.Processes) != 1 {
		t.Fatalf("report json: exit %d\n%.2000s", js.Code, js.Stdout)
	}
	if p := doc.Processes[0]; p.FirstSegment != f.Header.Segment || p.Segments != len(sizes) || p.AgentStats.Saves != 57200 {
		t.Errorf("report json: segments %d from %d, %d saves; want %d from %d and every save of the run (57200)",
			p.Segments, p.FirstSegment, p.AgentStats.Saves, len(sizes), f.Header.Segment)
	}
}

// Under outputs-only decoder-sim faults in its first step, at the second layer after the first one swapped
// (layers 0-29 run unswapped first, so the fault comes late). With a 32 KiB limit the segments before it are
// gone, and replay --exec still reproduces it from the snapshot and what is left.
func TestReplayExecAfterTheHeadWasDropped(t *testing.T) {
	out := t.TempDir()
	r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT=32K", "SWAPAGENT_POLICY=outputs-only"),
		testenv.Path(t, testenv.DecoderSim), "--steps", "1", "--layers", "40", "--swap-layers", "30-38")
	if r.Code == 0 {
		t.Fatalf("decoder-sim under outputs-only exited 0; it should fault\n%s", testenv.Tail(r.Stderr, 10))
	}
	f, _ := segmentsIn(t, out)
	if f.Header.Segment == 0 {
		t.Fatalf("no segment was dropped (%d kept): the test needs the head gone", len(f.Segments))
	}
	recorded := false
	for _, ev := range f.Events {
		recorded = recorded || ev.Kind == trace.KindCall && ev.TS >= f.From && ev.Ret >= 500000 && ev.Ret < 600000
	}
	if !recorded {
		t.Fatalf("the kept segments (from +%.3fs) hold no faulting call: the run must fault later", float64(f.From)/1e9)
	}
	x := swapagent(t, nil, "replay", "--exec", f.Segments[0])
	if x.Code != 1 || !strings.Contains(x.Stdout, "fault reproduced") || !strings.Contains(x.Stdout, "addr:0") ||
		!strings.Contains(x.Stdout, "the trace covers +") {
		t.Fatalf("replay --exec: exit %d\n%s%s", x.Code, x.Stdout, testenv.Tail(x.Stderr, 5))
	}
}

// A SIGKILL at a random moment, rotations included (a 64 KiB limit makes 16 KiB segments), leaves a trace
// every command reads, 20 times out of 20, and report says it was not closed.
func TestSIGKILLAnytimeLeavesAReadableTrace(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		out := t.TempDir()
		// Far more steps than any machine runs before the kill: the kill, not the run's end, must stop it.
		cmd := exec.Command(sim, "--steps", "1000000", "--layers", "2", "--seq", "512", "--sync", "step")
		cmd.Env = testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT=64K")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(1400)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("trial %d: decoder-sim ended before the kill (%v): lengthen the run", trial, cmd.ProcessState)
		}
		f, sizes := segmentsIn(t, out)
		if len(f.Events) == 0 {
			t.Fatalf("trial %d: no events read", trial)
		}
		// Killed: the trace was never closed, and report says where its events end (exit 3).
		rep := swapagent(t, nil, "report", out)
		if rep.Code != 3 || !strings.Contains(rep.Stdout, "process ") ||
			!strings.Contains(rep.Stderr, "trace not closed (process killed?): events after #") {
			t.Fatalf("trial %d: report exit %d (%d segments %v from %d)\n%s%s", trial, rep.Code, len(sizes), sizes,
				f.Header.Segment, rep.Stdout, rep.Stderr)
		}
	}
}

// The limit holds at every moment of a 100-step run, sampled as the agent writes: the closed segments on disk
// (every segment file but the newest) hold at most the limit, or the newest closed one alone when it is
// larger (docs/trace-format.md, "Segments"). The 16 KiB trace keeps too little for a whole step: report claims
// no saving from it.
func TestTraceLimitHoldsAtEveryMoment(t *testing.T) {
	segIndex := regexp.MustCompile(`(?:\+(\d+))?\.swtrace$`)
	for _, tc := range []struct {
		limit string
		bytes int64
	}{{"16K", 16 << 10}, {"64K", 64 << 10}, {"1M", 1 << 20}} {
		out := t.TempDir()
		cmd := exec.Command(testenv.Path(t, testenv.DecoderSim), "--steps", "100")
		cmd.Env = testenv.AgentEnv(t, out, "SWAPAGENT_TRACE_LIMIT="+tc.limit)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		samples, newest, worst := 0, 0, ""
		sample := func() {
			entries, _ := os.ReadDir(out)
			type seg struct {
				k    int
				size int64
			}
			var segs []seg
			for _, e := range entries {
				m := segIndex.FindStringSubmatch(e.Name())
				fi, err := e.Info()
				if m == nil || err != nil {
					continue // not a segment, or deleted since the listing
				}
				k, _ := strconv.Atoi(m[1])
				segs = append(segs, seg{k, fi.Size()})
			}
			if len(segs) == 0 {
				return
			}
			slices.SortFunc(segs, func(a, b seg) int { return a.k - b.k })
			var closed, last int64
			for _, s := range segs[:len(segs)-1] {
				closed, last = closed+s.size, s.size
			}
			samples, newest = samples+1, max(newest, segs[len(segs)-1].k)
			if bound := max(tc.bytes, last); closed > bound && worst == "" {
				worst = fmt.Sprintf("%d closed segments hold %d bytes, bound %d (limit %d, newest closed %d): %v",
					len(segs)-1, closed, bound, tc.bytes, last, segs)
			}
		}
	wait:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("limit %s: decoder-sim: %v", tc.limit, err)
				}
				break wait
			default:
				sample()
				time.Sleep(time.Millisecond)
			}
		}
		sample()
		t.Logf("limit %s: %d samples, segments 0..%d", tc.limit, samples, newest)
		if newest < 2 {
			t.Errorf("limit %s: %d segments: the run should have rotated", tc.limit, newest+1)
		}
		if worst != "" {
			t.Errorf("limit %s: %s", tc.limit, worst)
		}
		if tc.limit != "16K" {
			continue
		}
		rep := swapagent(t, nil, "report", out)
		if rep.Code != 0 || strings.Contains(rep.Stdout, "saved about") ||
			!strings.Contains(rep.Stdout, "no saving claimed: the trace's kept window (SWAPAGENT_TRACE_LIMIT) holds no whole step") {
			t.Errorf("report of the 16K trace: exit %d\n%s%s", rep.Code, rep.Stdout, rep.Stderr)
		}
	}
}
