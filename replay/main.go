// main.go owns the `swapagent replay` command line: flags, loading traces (bad input is exit 2), and the
// choice between the simulation and --exec.
package replay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"swapagent/offload"
	"swapagent/trace"
)

// Exit codes of `swapagent replay`.
const (
	ExitClean     = 0 // no violation (simulation) / the runtime ran the trace clean (--exec)
	ExitViolation = 1 // violations found (simulation) / the runtime faulted (--exec)
	ExitBadInput  = 2 // bad usage, missing or corrupt trace
)

// Usage is the one-line synopsis for the CLI's help.
const Usage = "TRACE|DIR [--policy safe|outputs-only|off] [--prefetch N] [--min-bytes N] [--exec] [--format text|json]"

// Main runs `swapagent replay` with args (the words after "replay") and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "safe", "policy to simulate: safe, outputs-only or off")
	prefetch := fs.Int("prefetch", 1, "groups restored ahead in backward (default: as recorded, else 1)")
	minBytes := fs.Uint64("min-bytes", offload.DefaultMinBytes, "size threshold for the small rule (default: as recorded)")
	execMode := fs.Bool("exec", false, "re-issue the trace's runtime calls against the AscendCL runtime")
	format := fs.String("format", "text", "output format: text or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: swapagent replay %s\n", Usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "usage: swapagent replay %s\n", Usage)
			fs.PrintDefaults()
			return ExitClean
		}
		return ExitBadInput // pflag already printed the error
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "swapagent replay: "+format+"\n", a...)
		return ExitBadInput
	}
	if fs.NArg() != 1 {
		return bad("want exactly one TRACE (a .swtrace file or a directory), got %d", fs.NArg())
	}
	pol, err := offload.ParsePolicy(*policy)
	if err != nil {
		return bad("--policy: %v", err)
	}
	if *format != "text" && *format != "json" {
		return bad("--format %q: want text or json", *format)
	}
	if *prefetch < 0 {
		return bad("--prefetch %d: must be >= 0", *prefetch)
	}
	files, err := trace.FindTraces(fs.Arg(0))
	if err != nil {
		return bad("%v", err)
	}
	if len(files) == 0 {
		return bad("%s: no %s files", fs.Arg(0), trace.FileSuffix)
	}
	if *execMode {
		if len(files) != 1 {
			return bad("--exec replays one process: %s holds %d traces", fs.Arg(0), len(files))
		}
		for _, name := range []string{"policy", "prefetch", "min-bytes"} {
			if fs.Changed(name) {
				fmt.Fprintf(stderr, "swapagent replay: note: --%s is ignored with --exec (the trace's calls are re-issued as recorded)\n", name)
			}
		}
		return runExec(files[0], *format, stdout, stderr)
	}
	opts := Options{Policy: pol, Prefetch: *prefetch, PrefetchSet: fs.Changed("prefetch"), MinBytes: *minBytes,
		MinBytesSet: fs.Changed("min-bytes")}
	var results []*Result
	code := ExitClean
	for _, f := range files {
		h, events, note, err := load(f)
		if err != nil {
			return bad("%v", err)
		}
		r := Simulate(h, events, opts)
		r.File = f
		if note != "" {
			r.Notes = append([]string{note}, r.Notes...)
		}
		if len(r.Violations) > 0 {
			code = ExitViolation
		}
		results = append(results, r)
	}
	if *format == "json" {
		if err := WriteJSON(stdout, results); err != nil {
			fmt.Fprintf(stderr, "swapagent replay: write: %v\n", err)
			return ExitViolation
		}
		return code
	}
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		WriteText(stdout, r)
	}
	return code
}

// load reads one trace. A truncated tail (the process died mid-batch) is usable and gives a note; a
// missing file, a bad header or a corrupt batch is bad input.
func load(file string) (trace.Header, []trace.Event, string, error) {
	if _, err := os.Stat(file); err != nil {
		return trace.Header{}, nil, "", fmt.Errorf("%s: %w", file, errors.Unwrap(err))
	}
	h, events, err := trace.ReadFile(file)
	switch {
	case err == nil:
		return h, events, "", nil
	case errors.Is(err, trace.ErrTruncated):
		return h, events, fmt.Sprintf("the trace ends inside a batch (process killed?): replayed the %d events before it",
			len(events)), nil
	case strings.Contains(err.Error(), file):
		return h, nil, "", err
	default:
		return h, nil, "", fmt.Errorf("%s: %w", file, err)
	}
}
