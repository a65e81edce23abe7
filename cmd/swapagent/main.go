// Command swapagent is the thin driver over the project's libraries: it parses flags (pflag, through
// internal/cli's conventions) and hands off to run (inject the agent), report (package report's
// renderers), replay, doctor, probe and version. Each subcommand lives in its own file; exit codes are
// documented in docs/cli.md.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"swapagent/doctor"
	"swapagent/internal/cli"
	"swapagent/plan"
	"swapagent/replay"
)

// Exit codes shared by the subcommands.
const (
	exitOK      = 0
	exitFail    = 1 // the command could not finish (e.g. an output file could not be written)
	exitUsage   = cli.ExitUsage
	exitPartial = 3 // the output was written, but some input was left out (a bad file, a damaged batch)
	exitNoClaim = 4 // report --baseline: written, but a run faulted before a whole step, so no saving is claimed
)

type command struct {
	cli.Command
	summary string
	run     func(args []string) int
}

var commands []command

func init() {
	commands = []command{
		{runCmd, "run CMD with the agent preloaded and summarise each process at the end", cmdRun},
		{reportCmd, "summarise traces, or render them as JSON, a Perfetto timeline or an SVG chart", cmdReport},
		{replay.Command, "simulate a swap policy on a trace, or re-issue its runtime calls (--exec)",
			func(a []string) int { return replay.Main(a, os.Stdout, os.Stderr) }},
		{plan.Command, "find the swap configuration that fits a device-memory budget, from a profiling run",
			func(a []string) int { return plan.Main(a, os.Stdout, os.Stderr) }},
		{doctor.Command, "diagnose null-address faults from an msrun log directory",
			func(a []string) int { return doctor.Main(a, os.Stdout, os.Stderr) }},
		{probeCmd, "time runtime calls and C++ functions with eBPF uprobes; print latency histograms", cmdProbe},
		{versionCmd, "print the version, the control ABI version and build information", cmdVersion},
		{cli.Command{Name: "help", Synopsis: "[COMMAND]"}, "show this help, or a command's flags", cmdHelp},
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
	case "--version":
		return cmdVersion(args[1:])
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.run(args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "swapagent: unknown command %q\n", cli.Escape(args[0]))
	usage(os.Stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "swapagent: layer-level activation swap agent for AscendCL processes\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace("swapagent "+c.Name+" "+c.Synopsis), c.summary)
	}
	fmt.Fprintf(w, "\nRun 'swapagent help COMMAND' for a command's flags and exit codes (docs/cli.md).\n")
}

func cmdHelp(args []string) int {
	if len(args) > 1 {
		fmt.Fprintf(os.Stderr, "swapagent help: want at most one COMMAND, got %d arguments\n", len(args))
		usage(os.Stderr)
		return exitUsage
	}
	if len(args) == 1 && args[0] != "help" {
		for _, c := range commands {
			if c.Name == args[0] && c.Name != "help" {
				return c.run([]string{"--help"})
			}
		}
		fmt.Fprintf(os.Stderr, "swapagent help: unknown command %q\n", cli.Escape(args[0]))
		usage(os.Stderr)
		return exitUsage
	}
	usage(os.Stdout)
	return exitOK
}
