// main.go owns the `swapagent doctor` subcommand: flags, output format and exit codes.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

// Exit codes of `swapagent doctor`.
const (
	ExitClean     = 0 // no fault found
	ExitDiagnosed = 1 // at least one fault diagnosed
	ExitBadInput  = 2 // bad flags or directory
)

const usage = "usage: swapagent doctor [--format text|json] DIR"

// Main runs `swapagent doctor` with the arguments after the subcommand name and returns its exit code:
// 0 no fault, 1 faults diagnosed, 2 bad input (one line on stderr).
func Main(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("doctor", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "text", "output format: text or json")
	help := fs.BoolP("help", "h", false, "show help")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "swapagent doctor: %v (%s)\n", err, usage)
		return ExitBadInput
	}
	if *help {
		fmt.Fprintln(stdout, usage)
		fmt.Fprintln(stdout, "Reads an msrun log directory (worker_<rank>.log, scheduler.log) and the swapagent traces")
		fmt.Fprintln(stdout, "beside it, finds null-address and aicore faults and names their cause.")
		fmt.Fprintln(stdout, "Exit: 0 no fault, 1 fault diagnosed, 2 bad input.")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return ExitClean
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "swapagent doctor: unknown --format %q (want text or json)\n", *format)
		return ExitBadInput
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "swapagent doctor: need exactly one log directory, got %d arguments (%s)\n", fs.NArg(), usage)
		return ExitBadInput
	}
	res, err := Diagnose(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "swapagent doctor: %s\n", oneLine(err))
		return ExitBadInput
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "swapagent doctor: %s\n", oneLine(err))
			return ExitBadInput
		}
	} else {
		res.Render(stdout)
	}
	if res.Diagnosed() {
		return ExitDiagnosed
	}
	return ExitClean
}
