// probe_test.go proves the probes end to end as root (CI runs as root; elsewhere these tests fail with
// the reason): AscendCL calls of decoder-sim on the emulator, and C++ methods found by demangled name.
package bpf

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("eBPF probe tests must run as root (unprivileged BPF is disabled here; CI runs as root)")
	}
}

// target is a library and the functions of it to probe.
type target struct {
	lib   string
	funcs []Symbol
}

// probeRun starts argv paused, probes each target in it, lets it run to the end and returns its stdout
// and the measured stats by symbol name.
func probeRun(t *testing.T, targets []target, argv ...string) (string, map[string]Stats) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	resume, err := StartPaused(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var probes []*Probe
	for _, tg := range targets {
		p, err := Attach(Options{Path: tg.lib, Funcs: tg.funcs, PID: cmd.Process.Pid})
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(err)
		}
		defer p.Close()
		probes = append(probes, p)
	}
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out.String())
	}
	var stats []Stats
	byName := map[string]Stats{}
	for _, p := range probes {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			byName[s.Func.Name] = s
		}
		stats = append(stats, st...)
	}
	var report strings.Builder
	Write(&report, stats)
	t.Logf("probe report:\n%s", report.String())
	return out.String(), byName
}

func TestProbeDecoderSim(t *testing.T) {
	needRoot(t)
	sim := testenv.Path(t, testenv.DecoderSim)
	// The runtime functions live where CANN 8 puts them: aclrt* in libascendcl, aclnn ops in libopapi.
	var targets []target
	for _, lib := range []string{testenv.ACLLib, testenv.OpAPILib} {
		lib = testenv.Path(t, lib)
		funcs, err := Resolve(lib, RuntimeFuncs, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(funcs) > 0 {
			targets = append(targets, target{lib, funcs})
		}
	}
	out, stats := probeRun(t, targets, sim, "--steps", "1")

	// decoder-sim prints how often it called each runtime function: the probes must agree.
	printed := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^calls (\w+) (\d+)$`).FindAllStringSubmatch(out, -1) {
		printed[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
	}
	if printed["aclnnMul"] == 0 {
		t.Fatalf("decoder-sim printed no `calls aclnnMul N` line:\n%s", out)
	}
	for _, name := range RuntimeFuncs {
		s, probed := stats[name]
		if !probed {
			t.Errorf("%s: not probed", name)
			continue
		}
		if s.Calls != printed[name] {
			t.Errorf("%s: probes counted %d calls, decoder-sim printed %d", name, s.Calls, printed[name])
		}
		if s.Calls > 0 && (s.Total <= 0 || s.Quantile(0.5) <= 0) {
			t.Errorf("%s: %d calls but latency total %v, p50 %v", name, s.Calls, s.Total, s.Quantile(0.5))
		}
	}
}

func TestProbeCxxByDemangledName(t *testing.T) {
	needRoot(t)
	lib, user := buildPool(t, true) // stripped: the methods are found through .dynsym
	syms, err := Symbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	funcs := Match(syms, "mindspore::device::ascend::AscendMemoryPool::*")
	if len(funcs) != 2 {
		t.Fatalf("matched %d methods, want AllocTensorMem and FreeTensorMem", len(funcs))
	}
	_, stats := probeRun(t, []target{{lib, funcs}}, user, "37")
	for _, f := range funcs {
		if s := stats[f.Name]; s.Calls != 37 || s.Total <= 0 {
			t.Errorf("%s: %d calls in %v, want 37 calls taking time", f.Demangled, s.Calls, s.Total)
		}
	}
}

// TestProbeOtherProcess checks the pid filter: a process that is not the target is not counted.
func TestProbeOtherProcess(t *testing.T) {
	needRoot(t)
	lib, user := buildPool(t, false)
	funcs, err := Resolve(lib, nil, []string{"*AllocTensorMem*"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Attach(Options{Path: lib, Funcs: funcs, PID: os.Getpid()}) // this test never calls it
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, user, "5").CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", user, err, out)
	}
	stats, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats[0].Calls != 0 {
		t.Errorf("counted %d calls of another process", stats[0].Calls)
	}
}
