// msrun_test.go runs the reproduction the way the report did: MindSpore's own msrun launcher (from the
// test environment's MindSpore 2.10) starting a scheduler and two workers under `swapagent run`, then
// `swapagent doctor` on msrun's log directory with the traces beside it.
package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

func TestMsrunWorkersTracedAndDiagnosedPerRank(t *testing.T) {
	msrun := testenv.Path(t, ".venv/bin/msrun")
	sim := testenv.Path(t, testenv.DecoderSim)
	cli := testenv.Path(t, testenv.CLI)
	dir := t.TempDir()
	logs, out := filepath.Join(dir, "logs"), filepath.Join(dir, "logs", "swapagent-out")
	// msrun starts `python SCRIPT ARGS` in every role; the script becomes decoder-sim.
	script := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(script, []byte("import os, sys\nos.execv(sys.argv[1], sys.argv[1:])\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "run", "--policy", "outputs-only", "--out", out, "--", msrun,
		"--worker_num=2", "--local_worker_num=2", "--master_port="+strconv.Itoa(port), "--log_dir="+logs,
		"--join=True", script, sim, "--steps", "1")
	cmd.WaitDelay = 10 * time.Second
	runOut, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("msrun under swapagent timed out:\n%s", runOut)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("msrun under outputs-only: %v (it must fail like the reported job)\n%s", err, runOut)
	}

	// One trace per worker, named by rank; the scheduler (MS_ROLE=MS_SCHED) leaves none.
	traces, _ := filepath.Glob(filepath.Join(out, "*.swtrace"))
	var ranks []string
	for _, tr := range traces {
		ranks = append(ranks, strings.Split(filepath.Base(tr), ".")[1])
	}
	if strings.Join(ranks, ",") != "rank0,rank1" {
		t.Errorf("traces %v: want one per worker rank (rank0, rank1) and none for the scheduler", traces)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	doc, err := exec.CommandContext(ctx2, cli, "doctor", logs).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("doctor: %v, want exit 1 (diagnosed)\n%s", err, doc)
	}
	for _, want := range []string{"rank 0 (worker_0.log", "rank 1 (worker_1.log", "4096 x 64 float32",
		"released by layer.0", "keyword input of layer.0..layer.10"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, doc)
		}
	}
}
