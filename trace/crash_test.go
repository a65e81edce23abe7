// crash_test.go owns the crash-safety proof: a child process writing a trace is killed with
// SIGKILL mid-run, and the file must still hold every event of its flushed batches, in order.
package trace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "SWAPAGENT_TRACE_CRASH_CHILD"

// TestCrashChild is the child's body; it does nothing unless the parent test started it.
// It writes batches of sequentially numbered events forever, printing the count after each flush.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	w, err := NewWriter(f, Header{PID: os.Getpid(), Host: "crash", Rank: -1})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var n uint64
	deadline := time.Now().Add(20 * time.Second) // never outlive a lost parent for long
	for batch := 0; time.Now().Before(deadline); batch++ {
		// Batches of varying size, some big enough to fill several automatic batches.
		size := 1 + batch%97*13
		if batch%50 == 0 {
			size = 20000
		}
		for range size {
			ev := Event{Kind: KindCall, Fn: 1, TID: uint32(n % 3), TS: int64(n) * 1000,
				Args: [6]uint64{n, 0x100000000000 + n*64, n % 7}}
			if err := w.Add(&ev); err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			n++
		}
		if err := w.Flush(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Fprintln(out, n)
		out.Flush()
	}
	fmt.Println("error: not killed within 20s")
	os.Exit(3)
}

func TestSIGKILLLeavesReadableTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.1.swtrace")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the child has flushed a good number of events, then kill it while it writes.
	var flushed uint64
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %s", sc.Text())
		}
		flushed = v
		if flushed >= 200_000 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL (flushed %d events)", err, flushed)
	}

	h, evs, err := ReadFile(path)
	if err != nil && !errors.Is(err, ErrTruncated) {
		t.Fatalf("ReadFile after SIGKILL: %v", err)
	}
	t.Logf("child flushed at least %d events; file holds %d, read error: %v", flushed, len(evs), err)
	if h.Host != "crash" || h.PID != cmd.Process.Pid {
		t.Errorf("header %+v, want host crash and pid %d", h, cmd.Process.Pid)
	}
	if uint64(len(evs)) < flushed {
		t.Fatalf("file holds %d events, the child had flushed %d", len(evs), flushed)
	}
	for i := range evs {
		n := uint64(i)
		want := Event{Kind: KindCall, Fn: 1, TID: uint32(n % 3), TS: int64(n) * 1000,
			Args: [6]uint64{n, 0x100000000000 + n*64, n % 7}}
		if !sameEvent(&evs[i], &want) {
			t.Fatalf("event %d: got %+v, want %+v", i, evs[i], want)
		}
	}
}
