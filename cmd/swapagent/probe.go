// probe.go owns `swapagent probe`: time runtime calls and C++ functions of libraries with eBPF uprobes
// (package bpf), in a command it starts, in a running process, or in every process, and print one
// latency histogram per function.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"swapagent/bpf"
)

const probeSynopsis = "[--pid PID | -- CMD [ARG...]] [--lib PATH]... [--func NAME]... [--duration D]"

func cmdProbe(args []string) int {
	flags := newFlags("probe")
	flags.SetInterspersed(false) // everything from CMD on belongs to CMD
	pid := flags.Int("pid", 0, "probe the running process `PID` until SIGINT, --duration or its exit")
	libs := flags.StringArray("lib", nil, "library `PATH` to probe (repeatable; default libascendcl.so, libnnopbase.so and libopapi.so from $ASCEND_HOME_PATH/lib64, else from the emulator beside this program)")
	funcs := flags.StringArray("func", nil, "also probe functions matching `NAME`: a symbol, a demangled C++ name, a glob or a substring of one (repeatable)")
	duration := flags.Duration("duration", 0, "with --pid or alone, stop after `D` (e.g. 30s)")
	if code, stop := parseFlags(flags, args, probeSynopsis); stop {
		return code
	}
	argv := flags.Args()
	switch {
	case *pid != 0 && len(argv) > 0:
		return usageError("probe", "give --pid or CMD, not both (usage: swapagent probe %s)", probeSynopsis)
	case *pid < 0:
		return usageError("probe", "bad --pid %d", *pid)
	case *duration < 0 || (*duration > 0 && len(argv) > 0):
		return usageError("probe", "--duration needs a positive value and applies only without CMD")
	}
	if *pid != 0 {
		if err := syscall.Kill(*pid, 0); errors.Is(err, syscall.ESRCH) {
			return usageError("probe", "no process %d", *pid)
		}
	}
	paths, err := probeLibraries(*libs)
	if err != nil {
		return usageError("probe", "%v", err)
	}
	targets, err := resolveProbes(paths, *funcs)
	if err != nil {
		return usageError("probe", "%v", err)
	}
	if os.Geteuid() != 0 {
		return usageError("probe", "eBPF probes need root")
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	var cmd *exec.Cmd
	var resume func() error
	if len(argv) > 0 {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if resume, err = bpf.StartPaused(cmd); err != nil {
			return usageError("probe", "%v", err)
		}
		*pid = cmd.Process.Pid
	}
	var probes []*bpf.Probe
	defer func() {
		for _, p := range probes {
			p.Close()
		}
	}()
	for _, t := range targets {
		p, err := bpf.Attach(bpf.Options{Path: t.path, Funcs: t.funcs, PID: *pid})
		if err != nil {
			if cmd != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			return usageError("probe", "%v", err)
		}
		probes = append(probes, p)
		fmt.Fprintf(os.Stderr, "swapagent probe: %d functions of %s attached\n", len(t.funcs), t.path)
	}

	if cmd != nil {
		if err := resume(); err != nil {
			_ = cmd.Process.Kill()
		}
		done := make(chan struct{})
		go forwardSignals(cmd.Process, sigs, done)
		err := cmd.Wait()
		close(done)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "swapagent probe: %s: %v\n", argv[0], ee)
		}
	} else {
		waitProbe(*pid, *duration, sigs)
	}

	var stats []bpf.Stats
	for _, p := range probes {
		s, err := p.Stats()
		if err != nil {
			fmt.Fprintf(os.Stderr, "swapagent probe: %v\n", err)
			return exitFail
		}
		stats = append(stats, s...)
	}
	bpf.Write(os.Stdout, stats)
	return exitOK
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
// pattern matches there; a library with nothing to probe is left out. A pattern that matches in no library,
// or nothing to probe at all, is an error.
func resolveProbes(paths, patterns []string) ([]probeTarget, error) {
	matched := make([]bool, len(patterns))
	var out []probeTarget
	for _, path := range paths {
		syms, err := bpf.Symbols(path)
		if err != nil {
			return nil, err
		}
		var here []string
		for i, p := range patterns {
			if len(bpf.Match(syms, p)) > 0 {
				matched[i] = true
				here = append(here, p)
			}
		}
		if len(here) == 0 && !definesAny(syms, bpf.RuntimeFuncs) {
			continue
		}
		funcs, err := bpf.Resolve(path, bpf.RuntimeFuncs, here)
		if err != nil {
			return nil, err
		}
		out = append(out, probeTarget{path, funcs})
	}
	for i, ok := range matched {
		if !ok {
			return nil, fmt.Errorf("pattern %q matches no function of %s", patterns[i], strings.Join(paths, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no function to probe in %s", strings.Join(paths, ", "))
	}
	return out, nil
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
