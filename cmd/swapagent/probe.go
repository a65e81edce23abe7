// probe.go owns `swapagent probe`: time runtime calls and C++ functions of libraries with eBPF uprobes
// (package bpf), in a command it starts, in a running process, or in every process, and print one
// latency histogram per function.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"swapagent/bpf"
	"swapagent/internal/cli"
)

var probeCmd = cli.Command{
	Name:     "probe",
	Synopsis: "[--pid PID | -- CMD [ARG...]] [--lib PATH]... [--func NAME]... [--duration D] [-o FILE]",
	About: `Times functions of the runtime libraries (and any C or C++ function, --func) with eBPF uprobes and
prints one latency histogram per function: in CMD, which it starts, in process PID, or in every
process that maps the libraries. Needs root.

Exit: with CMD, CMD's own status (128+N if it died of signal N, 126 if it cannot be run, 127 if it is
not found); otherwise 0. 2 on bad usage, a library or --func that matches nothing, no root or no
eBPF support; 1 if the histograms could not be read or written (with CMD: when CMD itself succeeded).`,
}

func cmdProbe(args []string) int {
	c := probeCmd
	flags := c.Flags()
	flags.SetInterspersed(false) // everything from CMD on belongs to CMD
	pid := flags.Int("pid", 0, "probe the running process `PID` until SIGINT, --duration or its exit")
	libs := flags.StringArray("lib", nil, "library `PATH` to probe (repeatable; default libascendcl.so, libnnopbase.so and libopapi.so from $ASCEND_HOME_PATH/lib64, else from the emulator beside this program)")
	funcs := flags.StringArray("func", nil, "also probe functions matching `NAME`: a symbol, a demangled C++ name, a glob or a substring of one (repeatable)")
	duration := flags.Duration("duration", 0, "with --pid or alone, stop after `D` (e.g. 30s)")
	out := flags.StringP("output", "o", "", "write the histograms to `FILE` instead of standard output (which CMD shares)")
	if code, stop := c.Parse(flags, args, os.Stdout, os.Stderr); stop {
		return code
	}
	argv := flags.Args()
	switch {
	case *pid != 0 && len(argv) > 0:
		return c.UsageError(os.Stderr, "give --pid or CMD, not both")
	case *pid < 0:
		return c.UsageError(os.Stderr, "bad --pid %d", *pid)
	case *duration < 0 || (*duration > 0 && len(argv) > 0):
		return c.UsageError(os.Stderr, "--duration needs a positive value and applies only without CMD")
	}
	fail := func(format string, a ...any) int {
		c.Errorf(os.Stderr, format, a...)
		return exitUsage
	}
	if *pid != 0 {
		if err := syscall.Kill(*pid, 0); errors.Is(err, syscall.ESRCH) {
			return fail("no process %d", *pid)
		}
	}
	paths, err := probeLibraries(*libs)
	if err != nil {
		return fail("%v", err)
	}
	targets, skipped, err := resolveProbes(paths, *funcs)
	if err != nil {
		return fail("%v", err)
	}
	for _, p := range skipped {
		if len(*libs) > 0 { // the default layout has libraries without any of them (libnnopbase.so)
			c.Errorf(os.Stderr, "warning: %s defines none of the probed functions: not probed", p)
		}
	}
	if os.Geteuid() != 0 {
		return fail("eBPF probes need root")
	}

	sigs := make(chan os.Signal, 8)
	catchForwarded(sigs)
	defer signal.Stop(sigs)

	var cmd *exec.Cmd
	var resume func() error
	if len(argv) > 0 {
		cmd = exec.Command(argv[0], argv[1:]...)
		if cmd.Err != nil { // not found on PATH, or not a file: as a shell says, 127
			c.Errorf(os.Stderr, "%v", cmd.Err)
			return 127
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if resume, err = bpf.StartPaused(cmd); err != nil {
			c.Errorf(os.Stderr, "%v", err)
			return 126
		}
		*pid = cmd.Process.Pid
	}
	var probes []*bpf.Probe
	defer func() {
		for _, p := range probes {
			p.Close()
		}
	}()
	nfuncs := 0
	for _, t := range targets {
		p, err := bpf.Attach(bpf.Options{Path: t.path, Funcs: t.funcs, PID: *pid})
		if err != nil {
			if cmd != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			return fail("%v", err)
		}
		probes = append(probes, p)
		nfuncs += len(t.funcs)
		c.Errorf(os.Stderr, "%d functions of %s attached", len(t.funcs), t.path)
	}

	code := exitOK
	if cmd != nil {
		if err := resume(); err != nil {
			_ = cmd.Process.Kill()
		}
		done := make(chan struct{})
		go forwardSignals(cmd.Process, sigs, done)
		werr := cmd.Wait()
		close(done)
		code = exitStatus(cmd.ProcessState, werr)
		if code != 0 {
			c.Errorf(os.Stderr, "%s exited with status %d", argv[0], code)
		}
	} else {
		waitProbe(*pid, *duration, sigs)
	}
	failed := func() int { // the probe itself failed: say so in the status unless CMD's already does
		if code == exitOK {
			return exitFail
		}
		return code
	}

	var stats []bpf.Stats
	var calls uint64
	for _, p := range probes {
		s, err := p.Stats()
		if err != nil {
			c.Errorf(os.Stderr, "%v", err)
			return failed()
		}
		stats = append(stats, s...)
	}
	for _, s := range stats {
		calls += s.Calls
	}
	if calls == 0 {
		c.Errorf(os.Stderr, "warning: none of the %d probed functions was called: does the process load %s? "+
			"(probes attach to those files; /proc/PID/maps names the ones it maps; give them with --lib)",
			nfuncs, strings.Join(targetPaths(targets), ", "))
	}
	if *out == "" {
		bpf.Write(os.Stdout, stats)
		return code
	}
	if err := writeFileAtomic(*out, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		bpf.Write(bw, stats)
		return bw.Flush()
	}); err != nil {
		c.Errorf(os.Stderr, "%v", err)
		return failed()
	}
	return code
}

func targetPaths(ts []probeTarget) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.path
	}
	return out
}

// waitProbe returns on a signal, when d has passed (if set), or when process pid (if set) is gone.
func waitProbe(pid int, d time.Duration, sigs <-chan os.Signal) {
	var deadline <-chan time.Time
	if d > 0 {
		deadline = time.After(d)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sigs:
			return
		case <-deadline:
			return
		case <-tick.C:
			if pid != 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				return
			}
		}
	}
}

// toolkitLibs are the runtime libraries probed by default, as CANN 8 splits the API: aclrt* in
// libascendcl.so, tensors and executors in libnnopbase.so, aclnn ops in libopapi.so.
var toolkitLibs = []string{"libascendcl.so", "libnnopbase.so", "libopapi.so"}

// probeLibraries finds the libraries to probe: --lib, else the toolkit's runtime libraries from the first
// lib64 that has libascendcl.so: $ASCEND_HOME_PATH/lib64, else the emulator installed beside this program
// (build/bin/../ascend/latest/lib64). The other two are probed where that lib64 has them.
func probeLibraries(flags []string) ([]string, error) {
	if len(flags) > 0 {
		for _, f := range flags {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("library not found: %v", err)
			}
		}
		return flags, nil
	}
	var dirs, tried []string
	if home := os.Getenv("ASCEND_HOME_PATH"); home != "" {
		dirs = append(dirs, filepath.Join(home, "lib64"))
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Join(filepath.Dir(exe), "..", "ascend", "latest", "lib64"))
	}
	for _, d := range dirs {
		acl := filepath.Join(d, toolkitLibs[0])
		tried = append(tried, acl)
		if !fileExists(acl) {
			continue
		}
		var out []string
		for _, l := range toolkitLibs {
			if p := filepath.Clean(filepath.Join(d, l)); fileExists(p) {
				out = append(out, p)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("libascendcl.so not found (tried %v); give --lib PATH", tried)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// probeTarget is one library and its functions to time (one bpf.Probe each).
type probeTarget struct {
	path  string
	funcs []bpf.Symbol
}

// resolveProbes picks in each library the runtime calls it defines (bpf.RuntimeFuncs) and what each --func
// pattern matches there; a library with nothing to probe is left out (skipped names it). A pattern that
// matches in no library, or nothing to probe at all, is an error.
func resolveProbes(paths, patterns []string) (out []probeTarget, skipped []string, err error) {
	matched := make([]bool, len(patterns))
	for _, path := range paths {
		syms, err := bpf.Symbols(path)
		if err != nil {
			return nil, nil, err
		}
		var here []string
		for i, p := range patterns {
			if len(bpf.Match(syms, p)) > 0 {
				matched[i] = true
				here = append(here, p)
			}
		}
		if len(here) == 0 && !definesAny(syms, bpf.RuntimeFuncs) {
			skipped = append(skipped, path)
			continue
		}
		funcs, err := bpf.Resolve(path, bpf.RuntimeFuncs, here)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, probeTarget{path, funcs})
	}
	for i, ok := range matched {
		if !ok {
			return nil, nil, fmt.Errorf("pattern %q matches no function of %s", patterns[i], strings.Join(paths, ", "))
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("none of the probed functions (%s) is defined in %s", strings.Join(bpf.RuntimeFuncs, ", "),
			strings.Join(paths, ", "))
	}
	return out, skipped, nil
}

func definesAny(syms []bpf.Symbol, names []string) bool {
	for _, s := range syms {
		for _, n := range names {
			if s.Name == n {
				return true
			}
		}
	}
	return false
}
