// signals_test.go proves that the Go runtime inside libswapagent.so cannot steal the host's
// process-directed signals: its threads block them, while the host's own thread keeps its mask. A shell
// whose SIGTERM trap landed on a Go thread never ran it (swapagent run's SIGTERM test hung under load).
// SIGCHLD is the exception Go insists on unblocking; the kernel offers a process-directed signal to the
// main thread first whenever that thread wants it, as a shell in sigsuspend does.
package shimtest

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	const sigint, sighup, sigterm = 2, 1, 15
	for tid, m := range masks {
		if tid == strconv.Itoa(cmd.Process.Pid) {
			if m != 0 {
				t.Errorf("the host's thread has mask %#x; the agent must leave it unchanged (0)", m)
			}
			continue
		}
		for _, s := range []int{sigint, sighup, sigterm} {
			if m&bit(s) == 0 {
				t.Errorf("Go thread %s does not block signal %d (mask %#x)", tid, s, m)
			}
		}
		if m&bit(11) != 0 {
			t.Errorf("Go thread %s blocks SIGSEGV (mask %#x)", tid, m)
		}
	}
}
