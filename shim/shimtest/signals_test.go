// signals_test.go proves that the Go runtime inside libswapagent.so cannot steal the host's
// process-directed signals: its threads block every asynchronous one, SIGCHLD and SIGPROF included (Go's
// table marks them "always unblock"; shim/c/signals.c clears that), while the host's own thread keeps its
// mask. A shell whose SIGTERM trap landed on a Go thread never ran it, and coreutils timeout, whose SIGCHLD
// a Go thread took, waited out its whole deadline (26 of 60 runs beside a CPU hog before the fix). Each
// host below waits the way supervisors do, beside a CPU hog that makes the lost signal likely.
package shimtest

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// sigBlk returns the blocked-signal mask of each thread of pid.
func sigBlk(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	out := map[string]uint64{}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(task, "status"))
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "SigBlk:"); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatalf("%s: %q", task, l)
				}
				out[filepath.Base(task)] = m
			}
		}
	}
	return out
}

func TestGoThreadsLeaveProcessSignalsToTheHost(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	cmd.Env = testenv.AgentEnv(t, t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Sample until two readings 50 ms apart agree: while a thread is being created its creator blocks
	// every signal for a moment, and the new thread starts with all of them blocked.
	var masks map[string]uint64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		prev := masks
		if masks = sigBlk(t, cmd.Process.Pid); len(masks) > 1 && maps.Equal(prev, masks) {
			break
		}
	}
	if len(masks) < 2 {
		t.Fatalf("the Go runtime started no thread in the preloaded process: %v", masks)
	}
	bit := func(sig int) uint64 { return 1 << (sig - 1) }
	// SIGHUP SIGINT SIGQUIT SIGUSR1 SIGUSR2 SIGPIPE SIGALRM SIGTERM SIGCHLD SIGPROF SIGWINCH SIGIO, and the
	// real-time signals from glibc's SIGRTMIN (34: glibc keeps 32 and 33 for itself, unblocked).
	async := []int{1, 2, 3, 10, 12, 13, 14, 15, 17, 27, 28, 29}
	for s := 34; s <= 64; s++ {
		async = append(async, s)
	}
	for tid, m := range masks {
		if tid == strconv.Itoa(cmd.Process.Pid) {
			if m != 0 {
				t.Errorf("the host's thread has mask %#x; the agent must leave it unchanged (0)", m)
			}
			continue
		}
		for _, s := range async {
			if m&bit(s) == 0 {
				t.Errorf("Go thread %s does not block signal %d (mask %#x)", tid, s, m)
			}
		}
		if m&bit(11) != 0 {
			t.Errorf("Go thread %s blocks SIGSEGV (mask %#x)", tid, m)
		}
	}
}

// cpuHog keeps one CPU busy until the test ends: a host thread that is not running when its signal
// arrives is when an agent thread would take it. One, not one per CPU: the other packages' tests run
// beside these (msrun's two workers must both reach their fault), and with the fix the outcome does
// not depend on the load; one hog was enough to show the loss before it (11 of 30 timeout runs late).
func cpuHog(t *testing.T) {
	t.Helper()
	hog := exec.Command("sh", "-c", "while :; do :; done")
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hog.Process.Kill(); _ = hog.Wait() })
}

// coreutils timeout blocks SIGCHLD, starts its command and waits in sigsuspend: a child that cannot start
// ends at once, and timeout must return then, not at its deadline.
func TestTimeoutSeesItsChildExit(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Fatal("coreutils timeout is not installed")
	}
	cpuHog(t)
	env := testenv.AgentEnv(t, t.TempDir())
	late := 0
	for i := 0; i < 60; i++ {
		start := time.Now()
		r := testenv.Run(t, 30*time.Second, env, "timeout", "4", "/nonexistent")
		if r.Code != 127 {
			t.Fatalf("timeout 4 /nonexistent: exit %d, want 127 (command not found)\n%s", r.Code, r.Stderr)
		}
		// Its own deadline, 4 s, is the symptom: a missed SIGCHLD; a run never takes that long otherwise.
		if time.Since(start) >= 4*time.Second {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of 60 runs waited out timeout's deadline: their SIGCHLD went to an agent thread", late)
	}
}

// A host that blocks SIGCHLD and SIGTERM and takes them with sigtimedwait sees all of 1000 of each.
func TestSigtimedwaitSeesEverySignal(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-sigwait")
	cpuHog(t)
	r := testenv.Run(t, 5*time.Minute, testenv.AgentEnv(t, t.TempDir()), prog, "1000")
	if r.Code != 0 || !strings.Contains(r.Stdout, "signals 2000 of 2000 seen") {
		t.Errorf("sa-sigwait: exit %d\n%s%s", r.Code, r.Stdout, testenv.Tail(r.Stderr, 10))
	}
}

// The exit abort: CPython's faulthandler (PYTHONFAULTHANDLER=1, as the Python tests run) disables and frees
// the main thread's alternate signal stack at interpreter exit, after the Go runtime adopted it, and a signal
// landing while Go code runs there is "fatal error: non-Go code disabled sigaltstack", a Go dump and SIGABRT.
// sa-altstack does the same to its main thread and calls the agent under a rain of SIGURG (Go's preemption
// signal): before the agent lent the thread a stack for its calls (shim/c/signals.c), 20 of 20 runs aborted.
func TestGoNeverRunsOnADisabledSignalStack(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-altstack")
	for round := 0; round < 10; round++ {
		r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, t.TempDir()), prog, "calls", "200")
		if r.Code != 0 || !strings.Contains(r.Stdout, "survived") {
			t.Fatalf("round %d: sa-altstack exit %d\n%s%s", round, r.Code, r.Stdout, testenv.Tail(r.Stderr, 8))
		}
	}
	r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, t.TempDir()), prog, "exit")
	if r.Code != 0 || strings.Contains(r.Stderr, "fatal error") {
		t.Fatalf("sa-altstack exit: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 8))
	}
}

// A small init under the agent forwards SIGTERM to its child and reaps it, and exits with its status.
func TestInitForwardsSIGTERMAndReaps(t *testing.T) {
	prog := testenv.Path(t, "build/test/sa-minit")
	cpuHog(t)
	for round := 0; round < 5; round++ {
		cmd := exec.Command(prog, "sleep", "30")
		cmd.Env = testenv.AgentEnv(t, t.TempDir())
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n') // "child PID": the child runs, the init waits
		if !strings.HasPrefix(line, "child ") {
			_ = cmd.Process.Kill()
			t.Fatalf("sa-minit said %q", line)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Logf("killed: %v", <-done)
			t.Fatalf("round %d: the init did not end 20 s after SIGTERM: it never saw SIGTERM or its child's SIGCHLD", round)
		}
		if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
			t.Errorf("round %d: exit %d (%v), want 143: the child ended by the forwarded SIGTERM", round, code, err)
		}
	}
}

// The agent's stderr line to a closed pipe fails quietly: Go's os.Stderr would have raised SIGPIPE on the
// host (sleep was killed by it before the agent wrote with write(2)).
func TestClosedStderrNeverEndsTheHost(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	defer w.Close()
	cmd := exec.Command("/bin/sleep", "0.1")
	cmd.Env = testenv.AgentEnv(t, t.TempDir(), "SWAPAGENT_POLICY=bogus") // the agent prints one line
	cmd.Stderr = w
	if err := cmd.Run(); err != nil {
		t.Errorf("sleep under the agent, stderr a closed pipe: %v; want exit 0", err)
	}
}
