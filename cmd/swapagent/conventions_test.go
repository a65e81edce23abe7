// conventions_test.go holds every command to the one CLI convention (internal/cli): a bad flag is one
// error line and the usage on stderr with exit 2, --help prints the usage once on stdout; and checks the
// input conventions of report: - and pipes, salvage of a damaged batch, a bad file in a directory, an
// msrun log directory, control characters.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/internal/tracetest"
	"swapagent/trace"
)

// allCommands are the subcommands with a valid first argument where one is needed, so the bad flag is
// the only problem.
var allCommands = []struct {
	name string
	args []string
}{
	{"run", []string{"--", "true"}},
	{"report", []string{"x.swtrace"}},
	{"replay", []string{"x.swtrace"}},
	{"plan", []string{"x.swtrace", "--budget", "1G"}},
	{"doctor", []string{"."}},
	{"probe", []string{"--", "true"}},
	{"version", nil},
}

// TestEveryCommandBadFlag is the must-show: every command's bad flag (unknown, or missing its value)
// gives one error line and the usage on stderr, nothing on stdout, exit 2.
func TestEveryCommandBadFlag(t *testing.T) {
	for _, c := range allCommands {
		t.Run(c.name, func(t *testing.T) {
			r := swapagent(t, nil, append([]string{c.name, "--no-such-flag"}, c.args...)...)
			usageErr(t, r, c.name, "unknown flag: --no-such-flag")
			r = swapagent(t, nil, c.name, "-Z")
			usageErr(t, r, c.name, "unknown shorthand flag: 'Z'")
		})
	}
	// Flags that take a value, given none.
	for _, c := range []struct{ name, flag string }{{"run", "--policy"}, {"report", "--format"}, {"replay", "--policy"},
		{"plan", "--budget"}, {"doctor", "--format"}, {"probe", "--pid"}} {
		usageErr(t, swapagent(t, nil, c.name, c.flag), c.name, "flag needs an argument", c.flag)
	}
	// A control character in a flag is escaped, not sent to the terminal.
	r := swapagent(t, nil, "report", "--\x1b[31mred")
	usageErr(t, r, "report", `--\x1b[31mred`)
	if strings.ContainsRune(r.Stderr, 0x1b) {
		t.Errorf("raw escape on stderr: %q", r.Stderr)
	}
}

// TestEveryCommandHelp: --help, -h and `help COMMAND` print the usage once, on stdout, exit 0.
func TestEveryCommandHelp(t *testing.T) {
	for _, c := range allCommands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := swapagent(t, nil, args...)
			if r.Code != 0 || r.Stderr != "" || strings.Count(r.Stdout, "Usage: swapagent "+c.name) != 1 ||
				!strings.Contains(r.Stdout, "Exit") && c.name != "version" {
				t.Errorf("%v: exit %d stdout %q stderr %q", args, r.Code, r.Stdout, r.Stderr)
			}
		}
	}
}

// flushEvery encodes events with a batch boundary every n events.
func flushEvery(t *testing.T, evs []trace.Event, n int) (data []byte, starts []int) {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriterOptions(&buf, trace.Header{Version: trace.Version, PID: 321, Host: "node7", Rank: 0,
		StartUnix: time.Now().UnixNano(), Argv: []string{"decoder-sim"}}, trace.Options{ChunkBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if i%n == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			starts = append(starts, buf.Len())
		}
		if err := w.Add(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), starts
}

// TestReportSalvagesMiddleBatch: one flipped bit in a middle batch is put right from its parity (every
// event reported, exit 3); with its parity damaged too, report prints every other batch's events and names
// the lost range with its exact count.
func TestReportSalvagesMiddleBatch(t *testing.T) {
	evs := events() // 3 names, 80 calls, a fault and the stats: 85 events
	data, starts := flushEvery(t, evs, 10)
	flipped := bytes.Clone(data)
	flipped[starts[4]+20] ^= 0x01 // one bit, inside batch 4's payload (events 40..49)
	r := swapagent(t, nil, "report", writeFile(t, t.TempDir(), "node7.rank0.321.swtrace", flipped))
	if r.Code != 3 || !strings.Contains(r.Stdout, "(85 events over") ||
		!strings.Contains(r.Stdout, "1 damaged blocks repaired (nothing lost)") {
		t.Errorf("repaired: exit %d\n%s", r.Code, r.Stdout)
	}
	oneLine(t, r, ": damaged block at offset", "repaired from its group's parity: its 10 events read, nothing lost")

	p := writeFile(t, t.TempDir(), "node7.rank0.321.swtrace", tracetest.BeyondRepair(t, data, starts[4]+20))
	r = swapagent(t, nil, "report", p)
	if r.Code != 3 {
		t.Errorf("exit %d, want 3 (written, some input lost)", r.Code)
	}
	oneLine(t, r, p+": corrupt batch 4 at offset", "10 events (#41 to #50) lost between +", "(after event 40)",
		"checksum mismatch")
	if !strings.Contains(r.Stdout, "(75 events over") ||
		!strings.Contains(r.Stdout, "1 damaged batches skipped (10 events lost)") {
		t.Errorf("text:\n%s", r.Stdout)
	}
	// Every event outside batch 4 is there: 80 calls, less the 10 of batch 4 (events 40..49 are calls).
	if !regexp.MustCompile(`aclrtMalloc +35\n`).MatchString(r.Stdout) || !regexp.MustCompile(`aclrtFree +35\n`).MatchString(r.Stdout) {
		t.Errorf("calls:\n%s", r.Stdout)
	}
	r = swapagent(t, nil, "report", p, "--format", "json")
	var doc struct {
		Processes []struct {
			Events     int `json:"events"`
			LostRanges []struct {
				Batch      int   `json:"batch"`
				Events     int   `json:"events"`
				AfterEvent int   `json:"after_event"`
				Offset     int64 `json:"offset"`
			} `json:"lost_ranges"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
		t.Fatalf("json (%v): %s", err, r.Stdout)
	}
	lr := doc.Processes[0].LostRanges
	if doc.Processes[0].Events != 75 || len(lr) != 1 || lr[0].Batch != 4 || lr[0].Events != 10 || lr[0].AfterEvent != 40 ||
		lr[0].Offset != int64(starts[4]) {
		t.Errorf("json: %+v", doc.Processes[0])
	}
}

// TestReportInputs: - reads standard input, pipes and process substitution work, a bad file in a
// directory is named and skipped (exit 3), an msrun log directory finds its swapagent-out, and control
// characters in argv never reach the terminal.
func TestReportInputs(t *testing.T) {
	data, _ := traceBytes(t, events(), 20)
	dir := t.TempDir()
	good := writeFile(t, dir, "node7.rank0.321.swtrace", data)
	cli := testenv.Path(t, testenv.CLI)
	run := func(stdin []byte, name string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		return result{Code: cmd.ProcessState.ExitCode(), Stdout: out.String(), Stderr: errb.String()}
	}
	if r := run(data, cli, "report", "-"); r.Code != 0 || !strings.Contains(r.Stdout, "trace: standard input (") {
		t.Errorf("report -: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := run(nil, "bash", "-c", cli+` report <(cat "$0") --format json`, good); r.Code != 0 || !strings.Contains(r.Stdout, `"pid": 321`) {
		t.Errorf("process substitution: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := run(nil, "bash", "-c", `cat "$0" | `+cli+` report - | head -1`, good); !strings.HasPrefix(r.Stdout, "process 321 rank 0 on node7") {
		t.Errorf("pipe: %q %q", r.Stdout, r.Stderr)
	}

	// A bad file in a directory.
	writeFile(t, dir, "broken.swtrace", []byte("this is not a trace"))
	r := swapagent(t, nil, "report", dir)
	if r.Code != 3 || !strings.Contains(r.Stdout, "process 321") {
		t.Errorf("bad file in a directory: exit %d\n%s", r.Code, r.Stdout)
	}
	oneLine(t, r, "skipped "+filepath.Join(dir, "broken.swtrace")+": not a readable trace")

	// An msrun log directory: the traces are in its swapagent-out.
	logs := t.TempDir()
	writeFile(t, logs, "worker_0.log", []byte("log\n"))
	if err := os.Mkdir(filepath.Join(logs, "swapagent-out"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(logs, "swapagent-out"), "node7.rank0.321.swtrace", data)
	r = swapagent(t, nil, "report", logs)
	if r.Code != 0 || !strings.Contains(r.Stdout, "process 321") {
		t.Errorf("msrun log dir: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	oneLine(t, r, "reading those in "+filepath.Join(logs, "swapagent-out"))

	// Control characters in argv, a name and a log line are escaped.
	evil := []trace.Event{
		{Kind: trace.KindFunc, Fn: 1, Text: "aclrt\x1b[2JMalloc"},
		{Kind: trace.KindCall, Fn: 1, TS: 10, Args: [6]uint64{0x1000, 64}},
		{Kind: trace.KindLog, TS: 20, Text: "warning\r\x1b]0;owned\x07"},
	}
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, trace.Header{Version: trace.Version, PID: 9, Host: "h\x1bx", Rank: -1,
		Argv: []string{"python", "-c", "print('\x1b[31m')"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range evil {
		_ = w.Add(&evil[i])
	}
	_ = w.Close()
	p := writeFile(t, t.TempDir(), "evil.swtrace", buf.Bytes())
	for _, format := range []string{"text", "svg"} {
		r = swapagent(t, nil, "report", p, "--format", format)
		if r.Code != 0 || strings.ContainsAny(r.Stdout, "\x1b\x07\r") || !strings.Contains(r.Stdout, `\x1b`) {
			t.Errorf("%s: exit %d, control characters in:\n%q", format, r.Code, r.Stdout)
		}
	}
}

// TestReplayPrefetchBound: replay --prefetch takes what SWAPAGENT_PREFETCH takes (0 to 1024, one bound): a
// deeper one is bad usage, as it is in the agent's environment, not a simulation of a setting no run can have.
func TestReplayPrefetchBound(t *testing.T) {
	for _, v := range []string{"-1", "1025", "99999999999"} {
		usageErr(t, swapagent(t, nil, "replay", "x.swtrace", "--prefetch", v), "replay", "bad --prefetch")
	}
}
