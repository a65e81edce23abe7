// cli_test.go runs the built command (build/bin/swapagent) the way users do: usage and exit codes,
// `report` over good and damaged traces, and `run` with its environment, exit status and signals.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"swapagent/internal/testenv"
	"swapagent/internal/tracetest"
	"swapagent/trace"
)

type result = testenv.Result

// swapagent runs the built command with a deadline, extra environment (over testenv.CleanEnv) and args.
func swapagent(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return testenv.Run(t, 60*time.Second, append(testenv.CleanEnv(), env...), testenv.Path(t, testenv.CLI), args...)
}

// oneLine checks that stderr is exactly one line containing each of want.
func oneLine(t *testing.T, r result, want ...string) {
	t.Helper()
	if strings.Count(r.Stderr, "\n") != 1 || !strings.HasSuffix(r.Stderr, "\n") {
		t.Errorf("stderr is not one line: %q", r.Stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.Stderr, w) {
			t.Errorf("stderr %q lacks %q", r.Stderr, w)
		}
	}
}

// usageErr checks a bad-usage result: exit 2, nothing on stdout, and on stderr one line naming the
// problem (with each of want) followed by the command's usage.
func usageErr(t *testing.T, r result, cmd string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
	if r.Code != 2 || r.Stdout != "" || len(lines) != 3 || !strings.HasPrefix(lines[0], "swapagent "+cmd+": ") ||
		!strings.HasPrefix(lines[1], "Usage: swapagent "+cmd) {
		t.Errorf("exit %d stdout %q stderr %q: want exit 2, one error line and the usage on stderr", r.Code, r.Stdout, r.Stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("error line %q lacks %q", lines[0], w)
		}
	}
}

func TestUsageAndVersion(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"no args", nil, 2, "", "Usage:"},
		{"help", []string{"help"}, 0, "swapagent report", ""},
		{"help report", []string{"help", "report"}, 0, "--format", ""},
		{"--help", []string{"--help"}, 0, "swapagent run", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"version", []string{"version"}, 0, "control ABI: 1", ""},
		{"version extra arg", []string{"version", "x"}, 2, "", "unexpected argument"},
		{"help of an unknown command", []string{"help", "frob"}, 2, "", `unknown command "frob"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := swapagent(t, nil, c.args...)
			if r.Code != c.code || !strings.Contains(r.Stdout, c.stdout) || !strings.Contains(r.Stderr, c.stderr) {
				t.Errorf("exit %d stdout %q stderr %q; want exit %d, stdout with %q, stderr with %q",
					r.Code, r.Stdout, r.Stderr, c.code, c.stdout, c.stderr)
			}
		})
	}
	r := swapagent(t, nil, "version")
	for _, w := range []string{"swapagent ", "go: go1.", "revision: "} {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("version output lacks %q:\n%s", w, r.Stdout)
		}
	}
}

// --- report ---

const fault = `{"kernel":"aclnnMul","addr":"0x0","size":4096,"storage":"0x7f00","released_by":"layer.0","owner":"input of layer.1"}`

func events() []trace.Event {
	evs := []trace.Event{
		{Kind: trace.KindFunc, Fn: 1, Text: "aclrtMalloc"},
		{Kind: trace.KindFunc, Fn: 2, Text: "aclrtFree"},
		{Kind: trace.KindGroup, Group: 1, Text: "layer.0"},
	}
	for i := range 40 {
		ts := int64(i) * 1000
		evs = append(evs,
			trace.Event{Kind: trace.KindCall, TS: ts, Fn: 1, Args: [6]uint64{uint64(0x1000 + i), 1 << 20}},
			trace.Event{Kind: trace.KindCall, TS: ts + 500, Fn: 2, Args: [6]uint64{uint64(0x1000 + i)}})
	}
	return append(evs,
		trace.Event{Kind: trace.KindFault, TS: 50000, Text: fault},
		trace.Event{Kind: trace.KindStats, TS: 60000, Text: `{"offloaded_storages":11,"offloaded_bytes":1024,"restored_bytes":1024,"kept":{"input":2},"released_external":0,"peak_device_bytes":1048576,"faults":[]}`})
}

// traceBytes encodes events with a batch boundary after flushAfter events; it also returns the header size.
func traceBytes(t *testing.T, evs []trace.Event, flushAfter int) ([]byte, int) {
	t.Helper()
	var buf bytes.Buffer
	h := trace.Header{Version: trace.Version, PID: 321, Host: "node7", Rank: 0, StartUnix: time.Now().UnixNano(),
		Argv: []string{"decoder-sim", "--steps", "1"}}
	// Every batch its own compressed chunk: damage to one costs that batch alone, as the cases below expect.
	w, err := trace.NewWriterOptions(&buf, h, trace.Options{ChunkBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	hl := buf.Len()
	for i := range evs {
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if i+1 == flushAfter {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), hl
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	data, hl := traceBytes(t, events(), 20)
	good := writeFile(t, dir, "node7.rank0.321.swtrace", data)
	bad := t.TempDir()
	corrupt := tracetest.BeyondRepair(t, data, hl+24) // the first batch, and its parity: it is lost
	absurd := tracetest.BeyondRepair(t, data, hl+24)
	binary.LittleEndian.PutUint32(absurd[hl+4:], 0xFFFFFFFF)

	type check func(t *testing.T, r result)
	cases := []struct {
		name string
		args []string
		code int
		chk  check
	}{
		{"text", []string{"report", good}, 0, func(t *testing.T, r result) {
			for _, w := range []string{"process 321 rank 0 on node7", "aclrtMalloc", "faults: 1", "11 storages offloaded"} {
				if !strings.Contains(r.Stdout, w) {
					t.Errorf("text lacks %q:\n%s", w, r.Stdout)
				}
			}
		}},
		{"dir json", []string{"report", dir, "--format", "json"}, 0, func(t *testing.T, r result) {
			var doc struct {
				Processes []struct {
					PID               int               `json:"pid"`
					OffloadedStorages *uint64           `json:"offloaded_storages"`
					OffloadedBytes    *uint64           `json:"offloaded_bytes"`
					RestoredBytes     *uint64           `json:"restored_bytes"`
					Kept              map[string]uint64 `json:"kept"`
					ReleasedExternal  *uint64           `json:"released_external"`
					PeakDeviceBytes   *uint64           `json:"peak_device_bytes"`
					Faults            []map[string]any  `json:"faults"`
					Calls             map[string]uint64 `json:"calls"`
				} `json:"processes"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
				t.Fatalf("bad JSON (%v): %s", err, r.Stdout)
			}
			p := doc.Processes[0]
			if p.PID != 321 || p.OffloadedStorages == nil || *p.OffloadedStorages != 11 || p.OffloadedBytes == nil ||
				p.RestoredBytes == nil || p.ReleasedExternal == nil || p.PeakDeviceBytes == nil ||
				*p.PeakDeviceBytes != 1<<20 || p.Kept["input"] != 2 || len(p.Kept) != 7 ||
				len(p.Faults) != 1 || p.Faults[0]["kernel"] != "aclnnMul" || p.Calls["aclrtMalloc"] != 40 {
				t.Errorf("JSON content: %s", r.Stdout)
			}
		}},
		// Cut inside the last data block, before the close mark: what a killed process leaves.
		{"truncated after a good batch", []string{"report", writeFile(t, bad, "killed.swtrace",
			data[:bytes.LastIndex(data[:bytes.LastIndex(data, []byte("SWZB"))], []byte("SWZB"))+30])}, 3,
			func(t *testing.T, r result) {
				oneLine(t, r, "killed.swtrace", "trace not closed (process killed?): events after #20 ")
				if !strings.Contains(r.Stdout, "process 321") {
					t.Errorf("no summary: %q", r.Stdout)
				}
			}},
		{"truncated in the first batch", []string{"report", writeFile(t, bad, "early.swtrace", data[:hl+8])}, 2,
			func(t *testing.T, r result) { oneLine(t, r, "early.swtrace") }},
		{"corrupt first batch: the rest is reported", []string{"report", writeFile(t, bad, "corrupt.swtrace", corrupt)}, 3,
			func(t *testing.T, r result) {
				oneLine(t, r, "corrupt.swtrace: corrupt batch 0 at offset", "20 events (#1 to #20) lost at the start",
					"checksum mismatch")
				if !strings.Contains(r.Stdout, "process 321") ||
					!strings.Contains(r.Stdout, "1 damaged batches skipped (20 events lost)") {
					t.Errorf("no summary: %q", r.Stdout)
				}
			}},
		{"absurd length: the rest is reported", []string{"report", writeFile(t, bad, "absurd.swtrace", absurd), "--format", "json"}, 3,
			func(t *testing.T, r result) { oneLine(t, r, "absurd.swtrace", "20 events (#1 to #20) lost") }},
		{"empty", []string{"report", writeFile(t, bad, "empty.swtrace", nil)}, 2,
			func(t *testing.T, r result) { oneLine(t, r, "empty.swtrace", "empty") }},
		{"not a trace", []string{"report", writeFile(t, bad, "README", []byte("# hello\n"))}, 2,
			func(t *testing.T, r result) { oneLine(t, r, "README", "not a readable trace") }},
		{"missing", []string{"report", filepath.Join(bad, "nope")}, 2,
			func(t *testing.T, r result) { oneLine(t, r, "nope", "no such file") }},
		{"dir without traces", []string{"report", t.TempDir()}, 2,
			func(t *testing.T, r result) { oneLine(t, r, "no trace files") }},
		{"no path", []string{"report"}, 2, func(t *testing.T, r result) { usageErr(t, r, "report", "missing TRACE, DIR or -") }},
		{"bad format", []string{"report", good, "--format", "xml"}, 2, func(t *testing.T, r result) { usageErr(t, r, "report", "xml") }},
		{"unknown flag", []string{"report", good, "--frob"}, 2, func(t *testing.T, r result) { usageErr(t, r, "report", "--frob") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := swapagent(t, nil, c.args...)
			if r.Code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", r.Code, c.code, r.Stderr)
			}
			if (r.Code == 0 || r.Code == 3) && r.Code == c.code && r.Stdout == "" {
				t.Error("no output")
			}
			c.chk(t, r)
		})
	}
}

func TestReportOutputFile(t *testing.T) {
	dir := t.TempDir()
	data, _ := traceBytes(t, events(), 0)
	good := writeFile(t, dir, "a.1.swtrace", data)
	out := filepath.Join(dir, "report.json")
	r := swapagent(t, nil, "report", good, "--format=json", "-o", out)
	if r.Code != 0 || r.Stdout != "" {
		t.Fatalf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil || !json.Valid(b) {
		t.Fatalf("output file: %v %q", err, b)
	}
	r = swapagent(t, nil, "report", good, "-o", filepath.Join(dir, "no", "such", "dir", "x"))
	if r.Code != 1 {
		t.Errorf("unwritable -o: exit %d, want 1", r.Code)
	}
	oneLine(t, r, "x")
}

// -o on something that is not a regular file (/dev/null, /dev/stdout, a FIFO) writes into it: renaming a
// file over it, as a regular output is written, replaced root's /dev/null with a file.
func TestReportOutputDevice(t *testing.T) {
	dir := t.TempDir()
	data, _ := traceBytes(t, events(), 0)
	good := writeFile(t, dir, "a.1.swtrace", data)
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened without blocking, so that neither end waits for the other: a report that renames a file
	// over the FIFO instead of opening it fails here, it does not hang. The report fits the pipe's buffer.
	fd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	r := swapagent(t, nil, "report", good, "--format=json", "-o", fifo)
	if r.Code != 0 || r.Stdout != "" {
		t.Fatalf("exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	b := make([]byte, 1<<16)
	n, _ := unix.Read(fd, b)
	if n <= 0 || !json.Valid(b[:n]) {
		t.Errorf("read from the FIFO: %q", b[:max(n, 0)])
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("-o FIFO left %v (%v), want the FIFO", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".fifo.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// --- run ---

// agentLib is the library run preloads in these tests.
func agentLib(t *testing.T) string { return testenv.Path(t, testenv.AgentLib) }

func TestRunUsage(t *testing.T) {
	lib := agentLib(t)
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no command", nil, []string{"run"}, "missing CMD"},
		{"nothing after --", nil, []string{"run", "--lib", lib, "--"}, "missing CMD"},
		{"unknown flag", nil, []string{"run", "--frob", "--", "true"}, "unknown flag: --frob"},
		{"bad policy", nil, []string{"run", "--lib", lib, "--policy", "yolo", "--", "true"}, `bad --policy "yolo"`},
		// Policy names are lower case everywhere: the agent, run and replay reject the same names.
		{"policy in capitals", nil, []string{"run", "--lib", lib, "--policy", "SAFE", "--", "true"}, `bad --policy "SAFE"`},
		{"bad python mode", nil, []string{"run", "--lib", lib, "--python", "maybe", "--", "true"}, `bad --python "maybe"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			usageErr(t, swapagent(t, c.env, c.args...), "run", c.want)
		})
	}
	// A bad setting in the environment is not bad usage: one line each (agent.Settings' rule), no usage,
	// exit 2, and CMD is not run.
	out := t.TempDir()
	ran := filepath.Join(out, "ran")
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"policy in capitals", []string{"SWAPAGENT_POLICY=Safe"}, []string{`bad SWAPAGENT_POLICY "Safe" in the environment (want one of safe, outputs-only, off)`}},
		{"compiled 2", []string{"SWAPAGENT_COMPILED=2"}, []string{`bad SWAPAGENT_COMPILED "2" in the environment (want one of auto, 0, 1)`}},
		{"python mode", []string{"SWAPAGENT_PYTHON=maybe"}, []string{`bad SWAPAGENT_PYTHON "maybe" in the environment (want auto or off)`}},
		{"three at once", []string{"SWAPAGENT_POLICY=yolo", "SWAPAGENT_LOG=loud", "SWAPAGENT_COMPILED=yes"}, []string{
			`bad SWAPAGENT_POLICY "yolo"`, `bad SWAPAGENT_LOG "loud"`, `bad SWAPAGENT_COMPILED "yes"`}},
	} {
		t.Run("environment "+c.name, func(t *testing.T) {
			r := swapagent(t, c.env, "run", "--lib", lib, "--out", out, "--", "touch", ran)
			lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
			if r.Code != 2 || r.Stdout != "" || len(lines) != len(c.want) {
				t.Fatalf("exit %d stdout %q stderr %q: want 2 and %d lines", r.Code, r.Stdout, r.Stderr, len(c.want))
			}
			for i, w := range c.want {
				if !strings.HasPrefix(lines[i], "swapagent run: "+w) {
					t.Errorf("line %d %q, want %q", i, lines[i], w)
				}
			}
			if _, err := os.Stat(ran); err == nil {
				t.Errorf("CMD ran")
			}
		})
	}
	r0 := swapagent(t, nil, "run", "--lib", "/nonexistent/libswapagent.so", "--", "true")
	if r0.Code != 2 {
		t.Errorf("missing library: exit %d, want 2", r0.Code)
	}
	oneLine(t, r0, "agent library not found: /nonexistent/libswapagent.so")
	r := swapagent(t, []string{"SWAPAGENT_LIB=/nonexistent/env.so"}, "run", "--", "true")
	if r.Code != 2 || !strings.Contains(r.Stderr, "/nonexistent/env.so (from SWAPAGENT_LIB") {
		t.Errorf("SWAPAGENT_LIB missing: exit %d stderr %q", r.Code, r.Stderr)
	}
}

func TestRunExitStatus(t *testing.T) {
	lib := agentLib(t)
	cases := []struct {
		script string
		code   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
	}
	for _, c := range cases {
		t.Run(c.script, func(t *testing.T) {
			r := swapagent(t, nil, "run", "--lib", lib, "--out", t.TempDir(), "--", "sh", "-c", c.script)
			if r.Code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", r.Code, c.code, r.Stderr)
			}
		})
	}
	r := swapagent(t, nil, "run", "--lib", lib, "--out", t.TempDir(), "--", "/nonexistent/prog")
	if r.Code != 127 {
		t.Errorf("missing program: exit %d, want 127", r.Code)
	}
}

func TestRunEnvironment(t *testing.T) {
	lib := agentLib(t)
	other := testenv.Path(t, testenv.ACLLib) // any real library stands for the user's own preload
	out := t.TempDir()
	script := `echo "LD_PRELOAD=$LD_PRELOAD"; echo "POLICY=$SWAPAGENT_POLICY"; echo "OUT=$SWAPAGENT_OUT"; echo "PYTHONPATH=$PYTHONPATH"; echo "PYTHON=$SWAPAGENT_PYTHON"`

	r := swapagent(t, []string{"LD_PRELOAD=" + other, "SWAPAGENT_POLICY=off", "PYTHONPATH=/x"},
		"run", "--lib", lib, "--out", out, "--", "sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	want := map[string]string{
		"LD_PRELOAD": other + ":" + lib, // the user's first, ours last
		"POLICY":     "off",             // no --policy: the environment's is kept
		"OUT":        out,
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// The bootstrap first, then the package it imports, then the job's own entries.
	py := filepath.Join(testenv.Root(t), "python")
	boot := filepath.Join(py, "swapagent", "_bootstrap")
	if got["PYTHONPATH"] != boot+":"+py+":/x" {
		t.Errorf("PYTHONPATH = %q, want %q", got["PYTHONPATH"], boot+":"+py+":/x")
	}
	if got["PYTHON"] != "auto" {
		t.Errorf("SWAPAGENT_PYTHON = %q, want auto", got["PYTHON"])
	}
	// --python off: the package stays reachable, the bootstrap is left out.
	r = swapagent(t, []string{"PYTHONPATH=/x"}, "run", "--lib", lib, "--out", out, "--python", "off", "--",
		"sh", "-c", script)
	got = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if r.Code != 0 || got["PYTHONPATH"] != py+":/x" || got["PYTHON"] != "off" {
		t.Errorf("--python off: exit %d, PYTHONPATH %q, SWAPAGENT_PYTHON %q; want 0, %q, off", r.Code,
			got["PYTHONPATH"], got["PYTHON"], py+":/x")
	}
	if r := swapagent(t, nil, "run", "--lib", lib, "--python", "maybe", "--", "true"); r.Code != 2 ||
		!strings.Contains(r.Stderr, "bad --python") {
		t.Errorf("--python maybe: exit %d, stderr %q; want 2 and a bad --python line", r.Code, r.Stderr)
	}

	// Flags override the environment; a relative --out becomes absolute; ours is not listed twice.
	cwd := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Path(t, testenv.CLI), "run", "--lib", lib, "--policy", "outputs-only",
		"--out", "rel", "--", "sh", "-c", script)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "SWAPAGENT_POLICY=off")
	b, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"LD_PRELOAD=" + lib + "\n", "POLICY=outputs-only\n", "OUT=" + filepath.Join(cwd, "rel") + "\n"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("output lacks %q:\n%s", w, b)
		}
	}
}

func TestRunForwardsSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Path(t, testenv.CLI), "run", "--lib", agentLib(t), "--out", t.TempDir(),
		"--", "sh", "-c", `trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	// Own process group, so a failure can never leave the looping child behind (it would hold the pipe).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q (%v)", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	restc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(rd); restc <- b }()
	var rest []byte
	select {
	case rest = <-restc:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("the child did not end within 30 s of SIGTERM to swapagent run; stderr: %s", errb.String())
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(rest), "got TERM") {
		t.Errorf("exit %d (%v), output %q; want 3 and the trap's line", code, err, rest)
	}
}
