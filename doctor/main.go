// main.go owns the `swapagent doctor` subcommand: flags, output format and exit codes.
package doctor

import (
	"encoding/json"
	"io"

	"swapagent/internal/cli"
)

// Exit codes of `swapagent doctor`.
const (
	ExitClean     = 0 // no fault found
	ExitDiagnosed = 1 // at least one fault diagnosed
	ExitBadInput  = 2 // bad flags or directory
)

// Command is how `swapagent doctor` is called (internal/cli's conventions).
var Command = cli.Command{
	Name:     "doctor",
	Synopsis: "[--format text|json] DIR",
	About: `Reads an msrun log directory (worker_<rank>.log, scheduler.log, or the layouts docs/doctor.md lists)
and the swapagent traces beside it, finds null-address and aicore faults and names their cause. A trace
is used for a log only when its pid, rank and time fit the log's; the output says why others do not.

Exit: 0 no fault; 1 fault diagnosed; 2 bad usage or input.`,
}

// Main runs `swapagent doctor` with the arguments after the subcommand name and returns its exit code:
// 0 no fault, 1 faults diagnosed, 2 bad input (one line on stderr; bad usage adds the usage).
func Main(args []string, stdout, stderr io.Writer) int {
	c := Command
	fs := c.Flags()
	format := fs.String("format", "text", "output `FORMAT`: text or json")
	if code, stop := c.Parse(fs, args, stdout, stderr); stop {
		return code
	}
	if *format != "text" && *format != "json" {
		return c.UsageError(stderr, "bad --format %q (want text or json)", *format)
	}
	if fs.NArg() != 1 {
		return c.UsageError(stderr, "need exactly one log directory, got %d arguments", fs.NArg())
	}
	res, err := Diagnose(fs.Arg(0))
	if err != nil {
		c.Errorf(stderr, "%s", oneLine(err))
		return ExitBadInput
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			c.Errorf(stderr, "%s", oneLine(err))
			return ExitBadInput
		}
	} else if err := res.Render(stdout); err != nil {
		c.Errorf(stderr, "%s", oneLine(err)) // as JSON's
		return ExitBadInput
	}
	if res.Diagnosed() {
		return ExitDiagnosed
	}
	return ExitClean
}
