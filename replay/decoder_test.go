// decoder_test.go proves replay on real recordings: decoder-sim run under the preloaded agent
// (build/lib/libswapagent.so) with policy outputs-only (the issue 294 fault) and safe, one step each.
package replay

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/offload"
	"swapagent/trace"
)

// record runs one decoder-sim step under the agent with policy and returns its trace file.
func record(t *testing.T, policy string) string {
	t.Helper()
	out := t.TempDir()
	r := testenv.Run(t, 60*time.Second, testenv.AgentEnv(t, out, "SWAPAGENT_POLICY="+policy),
		testenv.Path(t, testenv.DecoderSim), "--steps", "1")
	res := r.Stdout + r.Stderr
	if policy == "outputs-only" && r.Code == 0 {
		t.Errorf("decoder-sim under outputs-only exited 0; the recording should hold the RoPE fault\n%s", res)
	}
	files, ferr := trace.FindTraces(out)
	if ferr != nil || len(files) != 1 {
		t.Fatalf("want one trace in %s, got %v (%v)\n%s", out, files, ferr, res)
	}
	return files[0]
}

var (
	recordOnce sync.Once
	recorded   map[string]string
	recordDir  string
)

// traces records both policies once per test binary (each run takes a fraction of a second).
func traces(t *testing.T) map[string]string {
	t.Helper()
	recordOnce.Do(func() {
		recorded = map[string]string{}
		dir, err := os.MkdirTemp("", "replay-traces")
		if err != nil {
			t.Fatal(err)
		}
		recordDir = dir
		for _, p := range []string{"outputs-only", "safe"} {
			src := record(t, p)
			dst := dir + "/" + p + trace.FileSuffix
			if err := copyFile(src, dst); err != nil {
				t.Fatal(err)
			}
			recorded[p] = dst
		}
	})
	if len(recorded) != 2 {
		t.Fatal("recording the decoder-sim traces failed (see the first test that tried)")
	}
	return recorded
}

func TestMain(m *testing.M) {
	code := m.Run()
	if recordDir != "" {
		_ = os.RemoveAll(recordDir)
	}
	os.Exit(code)
}

// TestRealOutputsOnlyTraceUnderSafe: the faulting recording, replayed with the safe policy, would have
// run clean and saved memory.
func TestRealOutputsOnlyTraceUnderSafe(t *testing.T) {
	p := traces(t)["outputs-only"]
	code, out, errs := runMain(p, "--policy", "safe")
	t.Logf("\n%s%s", out, errs)
	if code != ExitClean || !strings.Contains(out, "violations: 0") {
		t.Fatalf("exit %d", code)
	}
	h, evs, err := trace.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r := Simulate(h, evs, Options{Policy: offload.PolicySafe})
	// The recording stops at layer.2's fault, before its pool grew: the saving shows as bytes held off
	// device, not yet as a lower peak.
	if r.Released == 0 || r.BytesOut == 0 || r.ReleasedPeak == 0 || r.SavedVsNoSwap < 0 {
		t.Errorf("released %d, out %d, released at once %d, saved vs no swap %d", r.Released, r.BytesOut,
			r.ReleasedPeak, r.SavedVsNoSwap)
	}
	if !strings.Contains(out, "device bytes released at once, at most: ") {
		t.Error("no released-at-once figure")
	}
}

// TestRealRoPEViolation: under outputs-only the shared RoPE storage is released by the first layer's
// offload and read by a later Mul.
func TestRealRoPEViolation(t *testing.T) {
	for _, rec := range []string{"outputs-only", "safe"} {
		p := traces(t)[rec]
		code, out, errs := runMain(p, "--policy", "outputs-only")
		t.Logf("recorded %s:\n%s%s", rec, out, errs)
		if code != ExitViolation {
			t.Fatalf("recorded %s: exit %d, want 1", rec, code)
		}
		h, evs, _ := trace.ReadFile(p)
		r := Simulate(h, evs, Options{Policy: offload.PolicyOutputsOnly})
		v := r.Violations[0]
		if v.Size != 1048576 || v.ReleasedBy != "layer.0" || v.FirstRead == nil || v.FirstRead.Kernel != "aclnnMul" ||
			!strings.HasPrefix(v.Owner, "keyword input of layer.0") || v.Reason != "input" {
			t.Errorf("recorded %s: first violation %+v read %+v", rec, v, v.FirstRead)
		}
		if rec == "safe" && v.Owner != "keyword input of layer.0..layer.10" {
			t.Errorf("full trace: owner %q", v.Owner)
		}
	}
}

// TestRealExec: --exec of the outputs-only recording reproduces the 507015 fault on the emulator; the
// safe recording runs clean.
func TestRealExec(t *testing.T) {
	useEmulator(t)
	tr := traces(t)
	code, out, errs := runMain("--exec", tr["outputs-only"])
	t.Logf("outputs-only:\n%s%s", out, errs)
	if code != ExitViolation || !strings.Contains(out, "returned 507015") || !strings.Contains(out, "fault reproduced") {
		t.Errorf("outputs-only: exit %d", code)
	}
	if !strings.Contains(out, "addr:0") || !strings.Contains(out, "size:1048576 bytes") {
		t.Errorf("outputs-only: the fault lines do not name the null RoPE tensor")
	}
	code, out, errs = runMain("--exec", tr["safe"])
	t.Logf("safe:\n%s%s", out, errs)
	if code != ExitClean || !strings.Contains(out, "ran the trace clean") {
		t.Errorf("safe: exit %d", code)
	}
}
