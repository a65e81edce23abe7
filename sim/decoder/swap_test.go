// swap_test.go runs decoder-sim under the real agent (build/lib/libswapagent.so preloaded) and proves the
// scenario of hyper-parallel issue 294 end to end: swap changes nothing in the results, the safe policy
// moves exactly the internal activations and never a boundary storage, and the policy hyper-parallel had
// before the fix faults in the first backward on the shared RoPE storage, with the agent naming it first.
package decoder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// runAgent runs decoder-sim with the agent preloaded under policy, writing the trace into a new directory.
func runAgent(t *testing.T, policy string, args ...string) (result, string) {
	t.Helper()
	out := t.TempDir()
	env := testenv.AgentEnv(t, out, "SWAPAGENT_POLICY="+policy, "SWAPAGENT_PREFETCH=1")
	return testenv.Run(t, 120*time.Second, env, testenv.Path(t, testenv.DecoderSim), args...), out
}

func stepText(stdout string) string {
	var b strings.Builder
	for _, l := range strings.Split(stdout, "\n") {
		if stepRE.MatchString(l) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// run12 is the configuration of the report: 12 layers, layers 0-10 swapped.
var run12 = []string{"--layers", "12", "--swap-layers", "0-10"}

func TestSwapLeavesResultsBitIdentical(t *testing.T) {
	for _, link := range []string{"direct", "dlsym"} {
		t.Run(link, func(t *testing.T) {
			args := append(append([]string{}, run12...), "--steps", "10", "--link", link)
			want := stepText(mustRun(t, args...).Stdout)
			if strings.Count(want, "\n") != 10 {
				t.Fatalf("baseline printed %q", want)
			}
			for _, policy := range []string{"off", "safe"} {
				r, _ := runAgent(t, policy, args...)
				if r.Code != 0 {
					t.Fatalf("%s: exit %d\n%s", policy, r.Code, r.Stderr)
				}
				if got := stepText(r.Stdout); got != want {
					t.Errorf("%s: step lines differ from the run without the agent:\n%s---\n%s", policy, got, want)
				}
			}
		})
	}
}

// swapTrace is what the tests read back from one process's trace.
type swapTrace struct {
	events []trace.Event
	groups map[uint32]string
	stats  trace.Stats
	has    bool // a stats record was found
}

func readTrace(t *testing.T, dir string) swapTrace {
	t.Helper()
	files, err := trace.FindTraces(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("want one trace in %s, got %v (%v)", dir, files, err)
	}
	_, evs, err := trace.ReadFile(files[0])
	if err != nil {
		t.Fatalf("reading %s: %v", files[0], err)
	}
	st := swapTrace{events: evs, groups: map[uint32]string{}}
	for _, ev := range evs {
		switch ev.Kind {
		case trace.KindGroup:
			st.groups[ev.Group] = ev.Text
		case trace.KindStats:
			st.stats, st.has = trace.Stats{}, true
			if err := json.Unmarshal([]byte(ev.Text), &st.stats); err != nil {
				t.Fatalf("stats JSON: %v", err)
			}
		}
	}
	if !st.has {
		t.Fatal("trace has no stats record")
	}
	return st
}

// internalBytes sums, per group, the bytes of the storages the agent classified internal (each handle's
// last classification counts).
func (st swapTrace) internalBytes() (total uint64, perGroup map[string]uint64) {
	last := map[int64]trace.Event{}
	for _, ev := range st.events {
		if ev.Kind == trace.KindClassify {
			last[ev.Handle] = ev
		}
	}
	perGroup = map[string]uint64{}
	for _, ev := range last {
		if ev.Args[2] == 0 {
			total += ev.Args[1]
			perGroup[st.groups[ev.Group]] += ev.Args[1]
		}
	}
	return total, perGroup
}

func TestSafeSwapsOnlyInternalActivations(t *testing.T) {
	const steps = 3
	args := append(append([]string{}, run12...), "--steps", fmt.Sprint(steps))
	rOff, offDir := runAgent(t, "off", args...)
	rSafe, safeDir := runAgent(t, "safe", args...)
	if rOff.Code != 0 || rSafe.Code != 0 {
		t.Fatalf("exit codes off %d safe %d\n%s", rOff.Code, rSafe.Code, rSafe.Stderr)
	}
	off, safe := readTrace(t, offDir), readTrace(t, safeDir)
	s := safe.stats

	internal, perGroup := safe.internalBytes()
	if s.OffloadedBytes == 0 || s.OffloadedBytes != internal {
		t.Errorf("offloaded_bytes %d, want the internal saved bytes %d", s.OffloadedBytes, internal)
	}
	if s.RestoredBytes != s.OffloadedBytes {
		t.Errorf("restored_bytes %d != offloaded_bytes %d: each storage must come back once", s.RestoredBytes,
			s.OffloadedBytes)
	}
	for g := range perGroup {
		if g == "layer.11" || !strings.HasPrefix(g, "layer.") {
			t.Errorf("group %q swapped; only layer.0..layer.10 are wrapped", g)
		}
	}
	if s.Kept.Input < 11 {
		t.Errorf("kept.input %d, want >= 11 (cos and sin of every swapped layer)", s.Kept.Input)
	}
	if s.ReleasedExternal != 0 {
		t.Errorf("released_external %d under safe", s.ReleasedExternal)
	}

	// The RoPE storages (keyword inputs) are classified input (their second save in a group: duplicate)
	// and never leave the device.
	keyword := map[uint64]bool{}
	for _, ev := range safe.events {
		if ev.Kind == trace.KindRegionEnter {
			for _, p := range ev.Ptrs[ev.Args[0]:] {
				keyword[p] = true
			}
		}
	}
	ropeHandles := map[int64]bool{}
	for _, ev := range safe.events {
		if ev.Kind == trace.KindClassify && keyword[ev.Args[0]] {
			ropeHandles[ev.Handle] = true
			if (ev.Args[2] != 1 && ev.Args[2] != 7) || ev.Args[1] != 1048576 {
				t.Errorf("RoPE storage %#x: reason %d, %d bytes; want input (1) or duplicate (7), 1048576 bytes",
					ev.Args[0], ev.Args[2], ev.Args[1])
			}
		}
	}
	if len(ropeHandles) < 2*11*steps {
		t.Errorf("%d RoPE saves classified, want at least %d", len(ropeHandles), 2*11*steps)
	}
	for _, ev := range safe.events {
		if ev.Kind == trace.KindState && ropeHandles[ev.Handle] {
			t.Errorf("RoPE handle %d changed state %d -> %d: it must move 0 bytes", ev.Handle, ev.Args[0], ev.Args[1])
		}
	}

	// Device memory: the saving against off reaches 90% of the ideal (the internal bytes of one step minus
	// the window the schedule keeps resident: the group being restored and the one prefetched).
	perStep := internal / steps
	var largest uint64
	for _, b := range perGroup {
		largest = max(largest, b/steps)
	}
	ideal := perStep - 2*largest
	saved := off.stats.PeakDeviceBytes - s.PeakDeviceBytes
	t.Logf("internal bytes per step %d (largest group %d); peak device off %d, safe %d; saved %d = %.0f%% of the ideal %d",
		perStep, largest, off.stats.PeakDeviceBytes, s.PeakDeviceBytes, saved, 100*float64(saved)/float64(ideal), ideal)
	if off.stats.PeakDeviceBytes <= s.PeakDeviceBytes || float64(saved) < 0.9*float64(ideal) {
		t.Errorf("peak device bytes off %d, safe %d: saved %d, want >= 90%% of %d", off.stats.PeakDeviceBytes,
			s.PeakDeviceBytes, saved, ideal)
	}
}

func TestOutputsOnlyFaultsInTheFirstBackwardAsReported(t *testing.T) {
	r, dir := runAgent(t, "outputs-only", append(append([]string{}, run12...), "--steps", "2")...)
	if r.Code == 0 {
		t.Fatalf("outputs-only run succeeded; it must fault\n%s", r.Stderr)
	}
	if stepText(r.Stdout) != "" {
		t.Errorf("a step completed before the fault:\n%s", r.Stdout)
	}
	syncErr := "decoder-sim: aclrtSynchronizeStream failed for op aclnnMul: 507015"
	for _, want := range []string{syncErr, "errorStr: The DDR address of the MTE instruction is out of range",
		"fault kernel_name=Mul_", "tensor index:0", "addr:0\n", "size:1048576 bytes"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	// The agent's launch-time record names the RoPE storage before the runtime's error surfaces.
	launch := strings.Index(r.Stderr, "found at launch, before the kernel runs")
	if launch < 0 || launch > strings.Index(r.Stderr, syncErr) {
		t.Errorf("no launch-time record before the sync error:\n%s", r.Stderr)
	}

	st := readTrace(t, dir)
	var first *trace.Fault
	for i := range st.stats.Faults {
		if f := &st.stats.Faults[i]; f.Detected == "launch" && first == nil {
			first = f
		}
	}
	if first == nil {
		t.Fatalf("no launch fault in the stats: %+v", st.stats.Faults)
	}
	if first.Nbytes != 1048576 || first.ReleasedBy != "layer.0" || !strings.HasPrefix(first.Owner, "keyword input of layer.0") {
		t.Errorf("first launch fault %+v: want the 1048576-byte RoPE storage released by layer.0, owned as a "+
			"keyword input of the swapped layers", *first)
	}

	// The fault is in the first backward: every swapped layer's forward ended and no swapped layer's
	// backward began (layer 11, unswapped, runs its backward first and reads the emptied storage).
	exits, backwards := 0, 0
	found := false
	for _, ev := range st.events {
		switch ev.Kind {
		case trace.KindRegionExit:
			exits++
		case trace.KindBackwardEnter:
			backwards++
		case trace.KindFault:
			var f trace.Fault
			if json.Unmarshal([]byte(ev.Text), &f) == nil && f.Detected == "sync" {
				found = true
				if exits != 11 || backwards != 0 {
					t.Errorf("sync fault after %d region exits and %d backward enters; want 11 and 0", exits, backwards)
				}
				if f.Code != 507015 || f.Addr != 0 || f.Size != 1048576 || f.ReleasedBy != "layer.0" {
					t.Errorf("sync fault %+v: want 507015 at addr 0, 1048576 bytes, released by layer.0", f)
				}
				if !strings.Contains(f.Detail, "error code 507015") {
					t.Errorf("sync fault detail %q lacks the exception info", f.Detail)
				}
			}
		}
	}
	if !found {
		t.Errorf("no sync fault record in the trace")
	}
	if st.stats.ReleasedExternal == 0 {
		t.Errorf("released_external 0 under outputs-only")
	}
}

// TestDoctorExplainsTheReproduction hands doctor what a user would have after the failed job: the worker
// log (decoder-sim's output, as msrun writes it) with the agent's trace beside it.
func TestDoctorExplainsTheReproduction(t *testing.T) {
	r, traceDir := runAgent(t, "outputs-only", append(append([]string{}, run12...), "--steps", "1")...)
	if r.Code == 0 {
		t.Fatal("outputs-only run succeeded; it must fault")
	}
	logs := t.TempDir()
	if err := os.WriteFile(logs+"/worker_0.log", []byte(r.Stdout+r.Stderr), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logs+"/scheduler.log", []byte("scheduler started\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doctor := func(dir string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, testenv.Path(t, testenv.CLI), "doctor", dir)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("doctor: %v", err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := doctor(logs)
	if code != 1 || !strings.Contains(out, "4096 x 64") || !strings.Contains(out, "float32") {
		t.Errorf("doctor on the log alone: exit %d, want 1 and the 4096 x 64 float32 tensor named:\n%s", code, out)
	}
	if err := os.Rename(traceDir, logs+"/swapagent-out"); err != nil {
		t.Fatal(err)
	}
	out, code = doctor(logs)
	if code != 1 || !strings.Contains(out, "layer.0") || !strings.Contains(out, "keyword input of layer.0") {
		t.Errorf("doctor with the trace beside the log: exit %d, want 1, the releasing group layer.0 and the "+
			"keyword-input owner:\n%s", code, out)
	}
}
