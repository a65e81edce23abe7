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
	// msrun stops every worker once one fails: on a loaded machine a worker can be stopped before it
	// reaches the fault. Such a run cannot show a per-rank diagnosis, so it is retried (at most 5 runs).
	var dir, logs, out string
	for attempt := 1; ; attempt++ {
		dir = t.TempDir()
		logs, out = filepath.Join(dir, "logs"), filepath.Join(dir, "logs", "swapagent-out")
		runMsrun(t, cli, msrun, sim, dir, logs, out)
		faulted := 0
		for _, r := range []string{"0", "1"} {
			if b, err := os.ReadFile(filepath.Join(logs, "worker_"+r+".log")); err == nil && strings.Contains(string(b), "FaultReport:addr:0") {
				faulted++
			}
		}
		if faulted == 2 || attempt == 5 {
			break
		}
		t.Logf("run %d: msrun stopped a worker before its fault; running again", attempt)
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
	var ee *exec.ExitError
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

// runMsrun runs the job under swapagent as the report did: msrun, two workers, outputs-only. It must fail.
func runMsrun(t *testing.T, cli, msrun, sim, dir, logs, out string) {
	t.Helper()
	// msrun starts `python SCRIPT ARGS` in every role; the script becomes decoder-sim. msrun stops every
	// worker once one fails, so the workers first wait for each other (a file per worker in dir): both then
	// reach the fault at about the same time however late msrun started one of them.
	script := filepath.Join(dir, "worker.py")
	src := `import glob, os, sys, time
if os.environ.get("MS_ROLE") != "MS_SCHED":
    open(os.path.join(sys.argv[1], "ready.%d" % os.getpid()), "w").close()
    deadline = time.time() + 60
    while len(glob.glob(os.path.join(sys.argv[1], "ready.*"))) < 2 and time.time() < deadline:
        time.sleep(0.01)
os.execv(sys.argv[2], sys.argv[2:])
`
	if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
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
		"--join=True", script, dir, sim, "--steps", "1")
	cmd.WaitDelay = 10 * time.Second
	runOut, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("msrun under swapagent timed out:\n%s", runOut)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("msrun under outputs-only: %v (it must fail like the reported job)\n%s", err, runOut)
	}
}
