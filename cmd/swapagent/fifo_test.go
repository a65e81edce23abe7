package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// TestReadersRefuseSpecialFiles: every reader opens only regular files (and anonymous pipes: `-`,
// process substitution). A FIFO named *.swtrace, on the command line or alone in a directory, is refused
// at once with one line; testenv.Run fails the test when a command has not returned within 5 s (it would
// wait for a writer forever). A socket and a device on the command line get the same one line.
func TestReadersRefuseSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "h.1.swtrace")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "s.swtrace")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cli := testenv.Path(t, testenv.CLI)
	run := func(args ...string) result {
		t.Helper()
		return testenv.Run(t, 5*time.Second, testenv.CleanEnv(), cli, args...)
	}
	refused := func(t *testing.T, r result, path, what string) {
		t.Helper()
		if r.Code != exitUsage || r.Stdout != "" {
			t.Errorf("exit %d stdout %q, want %d and nothing", r.Code, r.Stdout, exitUsage)
		}
		oneLine(t, r, path+": "+what+", not a regular file")
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"report", []string{"report"}},
		{"report json", []string{"report", "--format", "json"}},
		{"replay", []string{"replay"}},
		{"plan", []string{"plan", "--budget", "1G"}},
	} {
		t.Run(c.name+" FIFO named", func(t *testing.T) {
			refused(t, run(append(c.args, fifo)...), fifo, "a named pipe (FIFO)")
		})
		t.Run(c.name+" FIFO in a directory", func(t *testing.T) {
			refused(t, run(append(c.args, dir)...), fifo, "a named pipe (FIFO)")
		})
	}
	// Beside a readable trace the FIFO is skipped with its one line, and the rest is read (exit 3).
	mixed := t.TempDir()
	good, err := os.ReadFile(testenv.Path(t, "trace/testdata/v1.swtrace"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mixed, "a.swtrace"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	mixedFIFO := filepath.Join(mixed, "b.swtrace")
	if err := syscall.Mkfifo(mixedFIFO, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"report", "replay"} {
		t.Run(cmd+" FIFO beside a trace", func(t *testing.T) {
			r := run(cmd, mixed)
			if r.Code != exitPartial || !strings.Contains(r.Stdout, "a.swtrace") {
				t.Errorf("exit %d stdout %q, want %d and the trace read", r.Code, r.Stdout, exitPartial)
			}
			oneLine(t, r, "skipped "+mixedFIFO+": a named pipe (FIFO), not a regular file")
		})
	}
	t.Run("report socket", func(t *testing.T) { refused(t, run("report", sock), sock, "a socket") })
	t.Run("report device", func(t *testing.T) { refused(t, run("report", "/dev/null"), "/dev/null", "a character device") })
	// doctor takes a directory: there a FIFO is a trace that cannot be read, one note.
	t.Run("doctor FIFO in a directory", func(t *testing.T) {
		r := run("doctor", dir)
		if r.Code != 0 || r.Stderr != "" || strings.Count(r.Stdout, "h.1.swtrace") != 1 ||
			!strings.Contains(r.Stdout, "\nnote: skipped trace: "+fifo+": a named pipe (FIFO), not a regular file\n") {
			t.Errorf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
		}
	})
	t.Run("doctor FIFO named", func(t *testing.T) {
		r := run("doctor", fifo)
		if r.Code != 2 || r.Stdout != "" {
			t.Errorf("exit %d stdout %q", r.Code, r.Stdout)
		}
		oneLine(t, r, fifo+": not a directory")
	})
}

// TestReadersReadAnonymousPipes: what refusing FIFOs must not take away: a trace on standard input and
// through /dev/fd/N (process substitution) is read.
func TestReadersReadAnonymousPipes(t *testing.T) {
	tr := testenv.Path(t, "trace/testdata/v1.swtrace")
	r := testenv.Run(t, 30*time.Second, testenv.CleanEnv(), "bash", "-c",
		`"$1" report <(cat "$2") && "$1" report - < <(cat "$2")`, "bash", testenv.Path(t, testenv.CLI), tr)
	if r.Code != 0 || strings.Count(r.Stdout, "process 1234 on host-a") != 2 || !strings.Contains(r.Stdout, "trace: /dev/fd/") {
		t.Errorf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
}

// TestPipedTraceReadOnce: report and replay read a file twice (the pool model's second pass, replay's
// simulation); a pipe through /dev/fd/N cannot be read twice, so it is read once, as standard input is.
// A decoder-sim trace has the device allocations that make them want the second pass.
func TestPipedTraceReadOnce(t *testing.T) {
	out := t.TempDir()
	if r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, out), testenv.Path(t, testenv.DecoderSim),
		"--layers", "2", "--steps", "2"); r.Code != 0 {
		t.Fatalf("decoder-sim: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	path := testenv.OnlyTrace(t, out)
	for _, cmd := range []string{"report", "replay"} {
		r := testenv.Run(t, 30*time.Second, testenv.CleanEnv(), "bash", "-c", `"$1" "$2" <(cat "$3")`, "bash",
			testenv.Path(t, testenv.CLI), cmd, path)
		if r.Code != 0 || r.Stderr != "" || !strings.Contains(r.Stdout, "/dev/fd/") {
			t.Errorf("%s <(cat trace): exit %d stdout %q stderr %q", cmd, r.Code, testenv.Tail(r.Stdout, 3), r.Stderr)
		}
	}
}

// TestReportStdinTwice: standard input named twice (two TRACEs, or a TRACE and --baseline) is bad usage: it is
// read once, and its second name found it drained and called it an empty file.
func TestReportStdinTwice(t *testing.T) {
	for _, args := range [][]string{{"report", "-", "-"}, {"report", "-", "--baseline", "-"}} {
		usageErr(t, swapagent(t, nil, args...), "report", "standard input) given twice")
	}
}

// TestTextToFullDisk: text that cannot be written is an error, as JSON's is (replay 1, plan 2, report 1,
// doctor 2),
// never exit 0 with the output lost.
func TestTextToFullDisk(t *testing.T) {
	out := t.TempDir()
	if r := swapagent(t, nil, "run", "--policy", "off", "--out", out, "--", testenv.Path(t, testenv.DecoderSim),
		"--swap-layers", "all", "--layers", "2", "--steps", "2"); r.Code != 0 {
		t.Fatalf("profiling run: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, c := range []struct {
		args string
		code int
	}{{"report", 1}, {"replay", 1}, {"plan --budget 1G", 2}, {"doctor", 2}} {
		r := testenv.Run(t, time.Minute, testenv.CleanEnv(), "bash", "-c", `exec "$1" $2 "$3" > /dev/full`, "bash",
			testenv.Path(t, testenv.CLI), c.args, out)
		if r.Code != c.code || !strings.Contains(r.Stderr, "no space left on device") {
			t.Errorf("%s > /dev/full: exit %d stderr %q, want %d and the write's error", c.args, r.Code, r.Stderr, c.code)
		}
	}
}

// TestJoinedTraces: two traces joined into one file (cat) read as the first, and the second is said, where it
// starts and its bytes, with exit 3 (an input left out); JSON lists it. Through a pipe its writer holds open
// after the joined file, report still returns (it does not read the pipe on to its end; testenv.Run fails a
// command not done within its bound) and says the other trace, without its byte count.
func TestJoinedTraces(t *testing.T) {
	one, err := os.ReadFile(testenv.Path(t, "trace/testdata/v4.swtrace"))
	if err != nil {
		t.Fatal(err)
	}
	joined := filepath.Join(t.TempDir(), "joined.swtrace")
	if err := os.WriteFile(joined, append(slices.Clone(one), one...), 0o644); err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("another trace follows this one at byte %d (files joined?)", len(one))
	r := swapagent(t, nil, "report", joined)
	if r.Code != exitPartial || strings.Count(r.Stderr, line) != 1 ||
		!strings.Contains(r.Stderr, fmt.Sprintf("its %d bytes not read", len(one))) ||
		!strings.Contains(r.Stdout, "another trace joined after it, not read (with all that follows it)") {
		t.Errorf("report FILE: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	var doc struct {
		Processes []struct {
			Joined []struct{ Offset, Bytes int64 } `json:"joined_traces"`
		} `json:"processes"`
	}
	j := swapagent(t, nil, "report", "--format", "json", joined)
	if err := json.Unmarshal([]byte(j.Stdout), &doc); err != nil || len(doc.Processes) != 1 ||
		len(doc.Processes[0].Joined) != 1 || doc.Processes[0].Joined[0].Offset != int64(len(one)) ||
		doc.Processes[0].Joined[0].Bytes != int64(len(one)) {
		t.Errorf("report --format json: %v %+v", err, doc)
	}
	// The pipe's writer holds it open after the file, until the reader is done: a trace alone reads as itself,
	// a joined file says the other trace, and neither waits for the writer.
	for _, c := range []struct {
		data []byte
		code int
		said string
	}{{one, 0, ""}, {append(slices.Clone(one), one...), exitPartial, "standard input: " + line + ": not read"}} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Write(c.data); err != nil { // within the pipe's capacity
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, testenv.Path(t, testenv.CLI), "report", "-")
		cmd.Env, cmd.Stdin = testenv.CleanEnv(), pr
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err = cmd.Run()
		pr.Close()
		pw.Close()
		code := cmd.ProcessState.ExitCode()
		if ctx.Err() != nil || code != c.code || c.said != "" && !strings.Contains(stderr.String(), c.said) ||
			c.said == "" && stderr.String() != "" {
			t.Errorf("report - (%d bytes, a pipe held open): %v, exit %d, stderr %s", len(c.data), err, code, stderr.String())
		}
		cancel()
	}
}
