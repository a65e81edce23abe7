// main.go owns the `swapagent replay` command line: flags, loading traces (bad input is exit 2), and the
// choice between the simulation and --exec.
package replay

import (
	"fmt"
	"io"
	"strings"

	"swapagent/internal/bytesize"
	"swapagent/internal/cli"
	"swapagent/offload"
	"swapagent/report"
	"swapagent/trace"
)

// Exit codes of `swapagent replay`.
const (
	ExitClean     = 0 // no violation (simulation) / the runtime ran the trace clean (--exec)
	ExitViolation = 1 // violations found (simulation) / the runtime faulted (--exec)
	ExitBadInput  = 2 // bad usage, missing or unreadable trace
	ExitPartial   = 3 // no violation in what was read, but some input was left out (a bad file, a damaged batch)
)

// Usage is the synopsis for the CLI's help.
const Usage = "TRACE|DIR|- [--policy safe|outputs-only|off] [--prefetch N] [--min-bytes N] [--exec] [--format text|json]"

// Command is how `swapagent replay` is called (internal/cli's conventions).
var Command = cli.Command{
	Name:     "replay",
	Synopsis: Usage,
	About: `Simulates swap policy P on a recorded trace (what it would release, move and save, and which external
storage it would break), or with --exec re-issues the trace's runtime calls against the AscendCL
runtime. A directory replays each trace in it (an msrun log directory: those in its swapagent-out);
- reads one trace from standard input. Policy names are lower case, as SWAPAGENT_POLICY takes them.

Exit: 0 clean; 1 violations (--exec: the runtime faulted); 2 bad usage or input;
3 clean, but an input was left out or damaged (a bad file in a directory, events lost in damaged batches,
or damaged blocks repaired from parity).`,
}

// Main runs `swapagent replay` with args (the words after "replay") and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	c := Command
	fs := c.Flags()
	policy := fs.String("policy", trace.PolicySafe, "policy `P` to simulate: "+strings.Join(trace.Policies[:], ", "))
	// unset: as recorded, else offload.DefaultPrefetch (no default of its own for the help to print)
	prefetch := fs.Int("prefetch", 0, "`N` groups restored ahead in backward (default: as recorded)")
	minBytes := &bytesize.Flag{} // unset: as recorded, else offload.DefaultMinBytes
	fs.Var(minBytes, "min-bytes", "size threshold `N` for the small rule: 64K, 64KiB, 1M or a number of bytes (default: as recorded)")
	execMode := cli.Switch(fs, "exec", "re-issue the trace's runtime calls against the AscendCL runtime")
	format := fs.String("format", "text", "output `FORMAT`: text or json")
	if code, stop := c.Parse(fs, args, stdout, stderr); stop {
		return code
	}
	bad := func(format string, a ...any) int {
		c.Errorf(stderr, format, a...)
		return ExitBadInput
	}
	if fs.NArg() != 1 {
		return c.UsageError(stderr, "want exactly one TRACE (a .swtrace file, a directory or -), got %d", fs.NArg())
	}
	pol, err := offload.ParsePolicy(*policy)
	if err != nil {
		return c.UsageError(stderr, "bad --policy %q (want safe, outputs-only or off, in lower case)", *policy)
	}
	if *format != "text" && *format != "json" {
		return c.UsageError(stderr, "bad --format %q (want text or json)", *format)
	}
	if *prefetch < 0 || *prefetch > offload.MaxPrefetch {
		return c.UsageError(stderr, "bad --prefetch %d (0 to %d, as SWAPAGENT_PREFETCH)", *prefetch, offload.MaxPrefetch)
	}
	files, found, err := report.Inputs(fs.Arg(0))
	if err != nil {
		return bad("%v", err)
	}
	if found != "" {
		c.Errorf(stderr, "note: %s has no traces; reading those in %s", fs.Arg(0), found)
	}
	if *execMode {
		if len(files) != 1 {
			return bad("--exec replays one process: %s holds %d traces", fs.Arg(0), len(files))
		}
		for _, name := range []string{"policy", "prefetch", "min-bytes"} {
			if fs.Changed(name) {
				c.Errorf(stderr, "note: --%s is ignored with --exec (the trace's calls are re-issued as recorded)", name)
			}
		}
		return runExec(files[0], *format, stdout, stderr)
	}
	opts := Options{Policy: pol, Prefetch: *prefetch, PrefetchSet: fs.Changed("prefetch"), MinBytes: minBytes.N,
		MinBytesSet: fs.Changed("min-bytes")}
	var results []*Result
	code := ExitClean
	partial := false
	named := len(files) == 1 && found == "" // a file (or -) named on the command line
	for _, f := range files {
		r, t, notes, err := simulate(f, opts)
		if err != nil {
			if named {
				return bad("%v", err)
			}
			c.Errorf(stderr, "skipped %v", err)
			partial = true
			continue
		}
		for _, n := range notes {
			c.Errorf(stderr, "%s", n)
		}
		partial = partial || t.Damaged()
		r.File = f
		r.Notes = append(notes, r.Notes...)
		if len(r.Violations) > 0 {
			code = ExitViolation
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		return bad("%s: none of the %d trace files could be read", fs.Arg(0), len(files))
	}
	if code == ExitClean && partial {
		code = ExitPartial
	}
	if *format == "json" {
		if err := WriteJSON(stdout, results); err != nil {
			c.Errorf(stderr, "write: %v", err)
			return ExitViolation
		}
		return code
	}
	tw := cli.Terminal(stdout)
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		WriteText(tw, r)
	}
	if err := cli.WriteErr(tw); err != nil {
		c.Errorf(stderr, "write: %v", err) // as JSON's
		return ExitViolation
	}
	return code
}

// simulate simulates one trace read the way report does (trace.Scan, twice: the memory does not grow with the
// trace); a pipe (standard input, /dev/fd/N), which cannot be read twice, is loaded. notes are the
// trace's warnings.
func simulate(file string, opts Options) (*Result, *trace.File, []string, error) {
	if report.ReadOnce(file) {
		t, notes, err := load(file)
		if err != nil {
			return nil, nil, nil, err
		}
		return Simulate(t.Header, t.Events, opts), t, notes, nil
	}
	r, t, err := SimulateFile(file, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return r, t, t.Warnings(), nil
}

// load reads one trace the way report does (report.ReadTrace: trace.Read's rule, damaged batches skipped,
// a cut end kept); notes are its warnings. A missing file, a bad header or a trace with no readable event
// is bad input.
func load(file string) (*trace.File, []string, error) {
	t, err := report.ReadTrace(file)
	if err != nil {
		return nil, nil, err
	}
	return t, t.Warnings(), nil
}
