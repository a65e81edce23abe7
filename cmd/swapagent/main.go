// Command swapagent is the thin driver over the project's libraries: it parses flags (pflag) and hands
// off to run (inject the agent), report (package report's renderers), replay, doctor, probe and version. Each subcommand lives in
// its own file; exit codes are documented in docs/cli.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"swapagent/doctor"
	"swapagent/replay"
)

// Exit codes shared by the subcommands.
const (
	exitOK    = 0
	exitFail  = 1 // the command could not finish (e.g. an output file could not be written)
	exitUsage = 2 // bad usage or bad input
)

type command struct {
	name, args, summary string
	run                 func(args []string) int
}

var commands []command

func init() {
	commands = []command{
		{"run", "[--policy P] [--out DIR] [--lib PATH] -- CMD [ARG...]",
			"run CMD with the agent preloaded and summarise each process at the end", cmdRun},
		{"report", "TRACE|DIR [--format text|json|perfetto|svg] [-o FILE]",
			"summarise traces, or render them as JSON, a Perfetto timeline or an SVG chart", cmdReport},
		{"replay", replay.Usage, "simulate a swap policy on a trace, or re-issue its runtime calls (--exec)",
			func(a []string) int { return replay.Main(a, os.Stdout, os.Stderr) }},
		{"doctor", "DIR [--format text|json]", "diagnose null-address faults from an msrun log directory",
			func(a []string) int { return doctor.Main(a, os.Stdout, os.Stderr) }},
		{"probe", probeSynopsis, "time runtime calls and C++ functions with eBPF uprobes; print latency histograms",
			cmdProbe},
		{"version", "", "print the version, the control ABI version and build information", cmdVersion},
		{"help", "[COMMAND]", "show this help, or a command's flags", cmdHelp},
	}
}

func main() {
	os.Exit(mainArgs(os.Args[1:]))
}

func mainArgs(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help":
		usage(os.Stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "swapagent: unknown command %q (try `swapagent help`)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "swapagent: layer-level activation swap agent for AscendCL processes\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace("swapagent "+c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(w, "\nExit codes: run returns CMD's own; report and help 0, or 2 on bad usage or input.\n")
}

func cmdHelp(args []string) int {
	if len(args) == 1 {
		for _, c := range commands {
			if c.name == args[0] && c.name != "help" {
				return c.run([]string{"--help"})
			}
		}
	}
	usage(os.Stdout)
	return exitOK
}

// newFlags makes a subcommand's flag set: errors come back to the caller (one line, exit 2) instead
// of pflag printing the whole usage.
func newFlags(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// parseFlags parses args; it returns (code, true) when the command must stop: help printed (0) or bad
// usage reported in one line (2).
func parseFlags(fs *pflag.FlagSet, args []string, synopsis string) (int, bool) {
	err := fs.Parse(args)
	if err == nil {
		return 0, false
	}
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(os.Stdout, "Usage: swapagent %s %s\n\nFlags:\n", fs.Name(), synopsis)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return exitOK, true
	}
	return usageError(fs.Name(), "%v", err), true
}

// usageError prints one line and returns exit code 2.
func usageError(cmd, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "swapagent %s: %s\n", cmd, fmt.Sprintf(format, a...))
	return exitUsage
}
