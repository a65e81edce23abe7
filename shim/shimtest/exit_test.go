package shimtest

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// Every way a process ends leaves it ending as it would without the agent: its own exit status (through
// swapagent run, 128+N for a signal N), no Go fatal error or goroutine dump on stderr, and a trace that
// reads. The job makes runtime calls through the emulator (testdata/exit_job.py) so the agent has events
// to drain when the end comes.
func TestEveryWayOfEndingIsClean(t *testing.T) {
	cli := testenv.Path(t, testenv.CLI)
	lib := testenv.Path(t, testenv.AgentLib)
	acl := testenv.Path(t, testenv.ACLLib)
	job := testenv.Path(t, "shim/shimtest/testdata/exit_job.py")
	venvPy := testenv.Path(t, ".venv/bin/python")
	cases := []struct {
		mode   string
		signal syscall.Signal // sent to the job once it says ready
		code   int            // swapagent run's exit status
		stdout string         // a line the job must print
	}{
		{"return", 0, 0, ""},
		{"exit-from-thread", 0, 5, ""},
		{"os-exit", 0, 4, ""},
		{"atexit-raises", 0, 0, ""},
		{"fork", 0, 0, "child 3"},
		{"sigterm", syscall.SIGTERM, 128 + 15, ""},
		{"sigint", syscall.SIGINT, 128 + 2, ""},
		{"companion", 0, 0, "companion installed"},
		{"companion-mindspore", 0, 0, "companion installed"},
	}
	for _, c := range cases {
		// One at a time: two of them start torch or MindSpore, and the other packages' tests run beside
		// these (msrun's two workers must both reach their fault before msrun stops them).
		t.Run(c.mode, func(t *testing.T) {
			out := t.TempDir()
			py := "/usr/bin/python3"
			if strings.HasPrefix(c.mode, "companion") {
				py = venvPy
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, cli, "run", "--lib", lib, "--out", out, "--", py, job, c.mode, acl)
			cmd.Env = append(testenv.CleanEnv(), "PYTHONPATH="+testenv.Path(t, "python"))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			var lines []string
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if f := strings.Fields(sc.Text()); c.signal != 0 && len(f) == 2 && f[0] == "ready" {
					pid, _ := strconv.Atoi(f[1])
					time.Sleep(300 * time.Millisecond) // into the busy loop
					if err := syscall.Kill(pid, c.signal); err != nil {
						t.Fatal(err)
					}
				}
			}
			err = cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("did not end within 2 minutes; stderr:\n%s", testenv.Tail(stderr.String(), 20))
			}
			if code := cmd.ProcessState.ExitCode(); code != c.code {
				t.Errorf("exit %d (%v), want %d; stderr:\n%s", code, err, c.code, testenv.Tail(stderr.String(), 20))
			}
			if c.stdout != "" && !strings.Contains(strings.Join(lines, "\n"), c.stdout) {
				t.Errorf("stdout %q, want a line %q", lines, c.stdout)
			}
			for _, bad := range []string{"fatal error", "goroutine ", "SIGABRT", "panic:"} {
				if strings.Contains(stderr.String(), bad) {
					t.Errorf("stderr has %q:\n%s", bad, testenv.Tail(stderr.String(), 30))
				}
			}
			r := testenv.Run(t, time.Minute, nil, cli, "report", "--format", "json", out)
			var doc struct {
				Processes []struct {
					Events uint64 `json:"events"`
					ABI    struct {
						RegionEnters int `json:"region_enters"`
					} `json:"abi"`
				} `json:"processes"`
			}
			if (r.Code != 0 && r.Code != 3) || json.Unmarshal([]byte(r.Stdout), &doc) != nil || len(doc.Processes) == 0 ||
				doc.Processes[0].Events == 0 {
				files, _ := filepath.Glob(filepath.Join(out, "*"))
				t.Errorf("the trace does not read: report exit %d, %d processes; files %v\n%s", r.Code, len(doc.Processes),
					files, testenv.Tail(r.Stderr, 5))
			} else if strings.HasPrefix(c.mode, "companion") && doc.Processes[0].ABI.RegionEnters == 0 {
				t.Errorf("the companion reported no region: it did not run")
			}
		})
	}
}

// The exit hook waits at most 2 s for the trace: an agent that cannot finish it (here a test hook holds
// its lock) says so in one line, and the process ends with its own status, its flushed trace readable.
func TestExitIsBoundedWhenTheTraceCannotBeFinished(t *testing.T) {
	sim := testenv.Path(t, testenv.DecoderSim)
	out := t.TempDir()
	// Run fails the test if the process outlives its minute: the hook holds the lock for ten.
	r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_TEST_HANG=shutdown"), sim, "--steps", "1")
	if r.Code != 0 {
		t.Errorf("decoder-sim: exit %d, want its own 0\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	if !strings.Contains(r.Stderr, "swapagent: the trace was not finished within 2s of exit") {
		t.Errorf("no line about the unfinished trace:\n%s", testenv.Tail(r.Stderr, 10))
	}
	cli := testenv.Path(t, testenv.CLI)
	if rep := testenv.Run(t, time.Minute, nil, cli, "report", out); rep.Code != 0 && rep.Code != 3 ||
		!strings.Contains(rep.Stdout, "decoder-sim") {
		t.Errorf("report on the unfinished trace: exit %d\n%s%s", rep.Code, rep.Stdout, rep.Stderr)
	}
}
