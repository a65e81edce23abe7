// probe.go owns `swapagent probe`: time runtime calls and C++ functions of a library with eBPF uprobes
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
	"syscall"
	"time"

	"swapagent/bpf"
)

const probeSynopsis = "[--pid PID | -- CMD [ARG...]] [--lib PATH] [--func NAME]... [--duration D]"

func cmdProbe(args []string) int {
	flags := newFlags("probe")
	flags.SetInterspersed(false) // everything from CMD on belongs to CMD
	pid := flags.Int("pid", 0, "probe the running process `PID` until SIGINT, --duration or its exit")
	lib := flags.String("lib", "", "library `PATH` to probe (default $ASCEND_HOME_PATH/lib64/libascendcl.so, else the emulator beside this program)")
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
	path, err := probeLibrary(*lib)
	if err != nil {
		return usageError("probe", "%v", err)
	}
	syms, err := bpf.Resolve(path, bpf.RuntimeFuncs, *funcs)
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
	p, err := bpf.Attach(bpf.Options{Path: path, Funcs: syms, PID: *pid})
	if err != nil {
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return usageError("probe", "%v", err)
	}
	defer p.Close()
	fmt.Fprintf(os.Stderr, "swapagent probe: %d functions of %s attached\n", len(syms), path)

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

	stats, err := p.Stats()
	if err != nil {
		fmt.Fprintf(os.Stderr, "swapagent probe: %v\n", err)
		return exitFail
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

// probeLibrary finds the library to probe: --lib, else the toolkit's runtime under $ASCEND_HOME_PATH,
// else the emulator installed beside this program (build/bin/../ascend/latest).
func probeLibrary(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("library not found: %v", err)
		}
		return flag, nil
	}
	var tried []string
	if home := os.Getenv("ASCEND_HOME_PATH"); home != "" {
		tried = append(tried, filepath.Join(home, "lib64", "libascendcl.so"))
	}
	if exe, err := os.Executable(); err == nil {
		tried = append(tried, filepath.Join(filepath.Dir(exe), "..", "ascend", "latest", "lib64", "libascendcl.so"))
	}
	for _, p := range tried {
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
	}
	return "", fmt.Errorf("libascendcl.so not found (tried %v); give --lib PATH", tried)
}
