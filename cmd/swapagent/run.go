// run.go owns `swapagent run`: start CMD with the agent preloaded and configured, forward signals to it,
// return its exit status, and summarise the traces its processes wrote during the run.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"swapagent/agent"
	"swapagent/internal/cli"
	"swapagent/offload"
	"swapagent/report"
	"swapagent/trace"
)

var runCmd = cli.Command{
	Name:     "run",
	Synopsis: "[--policy P] [--out DIR] [--lib PATH] [--python auto|off] -- CMD [ARG...]",
	About: `Runs CMD with the agent preloaded and, once it has exited, prints on stderr a summary of every
process that wrote a trace: its memory figures, swap activity, keep reasons and faults.

In Python processes the bootstrap (first on PYTHONPATH) installs the guard: an unmodified job whose own
swap (hyper-parallel's) releases storages asks the agent before each release, and the policy decides.
--python off (or SWAPAGENT_PYTHON=off) leaves Python processes as they are.

Exit: CMD's own; 128+N if CMD died of signal N; 126 if CMD cannot be run, 127 if it is not found;
2 on bad usage or a missing agent library.`,
}

// forwarded are the signals run passes on to CMD, each unless run inherited it ignored (catchForwarded).
var forwarded = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// catchForwarded relays to ch the signals to forward to CMD (run's and probe's). One ignored when this
// process started (SIGHUP under nohup, SIGINT and SIGQUIT in a background job of a non-interactive shell)
// stays ignored: it is neither caught nor forwarded, and CMD inherits SIG_IGN through exec (Go resets
// only the signals it handles to the default in the child), so CMD gets what it would have got without
// run in front of it.
func catchForwarded(ch chan<- os.Signal) {
	var sigs []os.Signal
	for _, s := range forwarded {
		if ignoredAtStart(s) {
			signal.Ignore(s) // SIGQUIT and SIGTERM had the runtime's handler: back to SIG_IGN
			continue
		}
		sigs = append(sigs, s)
	}
	if len(sigs) > 0 { // Notify with no signal would catch every signal
		signal.Notify(ch, sigs...)
	}
}

func cmdRun(args []string) int {
	c := runCmd
	flags := c.Flags()
	flags.SetInterspersed(false) // everything from CMD on belongs to CMD, with or without "--"
	policy := flags.String("policy", "", "swap policy `P`: safe, outputs-only or off (default $SWAPAGENT_POLICY, else safe)")
	out := flags.String("out", "", "trace and log `DIR` (default $SWAPAGENT_OUT, else ./swapagent-out)")
	lib := flags.String("lib", "", "agent library `PATH` (default $SWAPAGENT_LIB, else ../lib/libswapagent.so beside this program)")
	python := flags.String("python", "", "Python auto-instrumentation `MODE`: auto or off (default $SWAPAGENT_PYTHON, else auto)")
	if code, stop := c.Parse(flags, args, os.Stdout, os.Stderr); stop {
		return code
	}
	argv := flags.Args()
	if len(argv) == 0 {
		return c.UsageError(os.Stderr, "missing CMD")
	}
	// The flags by the agent's own rules (offload.ParsePolicy: exact, lower-case names; agent.PythonMode), so
	// run never accepts a value the agent would then refuse, nor refuses one it accepts. The same settings
	// in the environment are checked with the others below.
	if flags.Changed("policy") {
		if _, err := offload.ParsePolicy(*policy); err != nil {
			return c.UsageError(os.Stderr, "bad --policy %q (want safe, outputs-only or off, in lower case)", *policy)
		}
	}
	pyMode := *python
	if flags.Changed("python") {
		var ok bool
		if pyMode, ok = agent.PythonMode(pyMode); !ok {
			return c.UsageError(os.Stderr, "bad --python %q (want auto or off)", *python)
		}
	} else if env := os.Getenv(agent.EnvPython); env != "" {
		pyMode = env // as it is: a bad one is refused below
		if m, ok := agent.PythonMode(env); ok {
			pyMode = m
		}
	}

	libPath, err := agentLibrary(*lib)
	if err != nil {
		c.Errorf(os.Stderr, "%v", err)
		return exitUsage
	}
	outDir := *out
	if !flags.Changed("out") {
		outDir = os.Getenv("SWAPAGENT_OUT")
	}
	if outDir == "" {
		outDir = "swapagent-out" // the agent's own default, made absolute below
	}
	if outDir, err = filepath.Abs(outDir); err != nil {
		return c.UsageError(os.Stderr, "bad --out: %v", err)
	}

	env, warn := agentEnv(os.Environ(), libPath, outDir, *policy, flags.Changed("policy"), companionDir(), pyMode)
	// Every setting the agent and its companions read (agent.Settings), by their one rule: each bad one
	// named on its own line now, and nothing run, rather than warned of in every process of the job.
	if ps := agent.CheckEnv(func(k string) (string, bool) { v := getenv(env, k); return v, v != "" }); len(ps) > 0 {
		for _, p := range ps {
			c.Errorf(os.Stderr, "%s", p.Refusal())
		}
		return exitUsage
	}
	if warn != "" {
		c.Errorf(os.Stderr, "%s", warn)
	}
	before := traceSet(outDir)
	began := time.Now()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	// Catch the signals before the child exists so none is lost in between; they are sent on after Start.
	sigs := make(chan os.Signal, 8)
	catchForwarded(sigs)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		code := 126 // found but not runnable, as a shell says
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = 127
		}
		c.Errorf(os.Stderr, "%v", err)
		return code
	}
	done := make(chan struct{})
	go forwardSignals(cmd.Process, sigs, done)
	werr := cmd.Wait()
	close(done)

	code := exitStatus(cmd.ProcessState, werr)
	summarise(outDir, before, began, pyMode != "off" && companionDir() != "")
	return code
}

// agentLibrary resolves the library to preload: --lib, else $SWAPAGENT_LIB, else the build layout's
// <exe dir>/../lib/libswapagent.so. The result is absolute: the child may change directory.
func agentLibrary(flag string) (string, error) {
	p, from := flag, "--lib"
	if p == "" {
		p, from = os.Getenv("SWAPAGENT_LIB"), "SWAPAGENT_LIB"
	}
	if p == "" {
		dir, err := exeDir()
		if err != nil {
			return "", fmt.Errorf("cannot locate the agent library: %v (pass --lib)", err)
		}
		p, from = filepath.Join(dir, "..", "lib", "libswapagent.so"), "default"
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("bad agent library path %q: %v", p, err)
	}
	fi, err := os.Stat(abs)
	if err != nil || fi.IsDir() {
		return "", fmt.Errorf("agent library not found: %s (from %s; run `make build`, or pass --lib)", abs, from)
	}
	// LD_PRELOAD separates entries with spaces and colons and cannot quote them.
	if strings.ContainsAny(abs, " :\t") {
		return "", fmt.Errorf("agent library path %q contains a space or colon, which LD_PRELOAD cannot carry", abs)
	}
	return abs, nil
}

func exeDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Dir(exe), nil
}

// companionDir is the directory holding the Python package swapagent: the source tree's <repo>/python
// (two levels above build/bin) or the release archive's <prefix>/python (one level above bin), or "".
func companionDir() string {
	dir, err := exeDir()
	if err != nil {
		return ""
	}
	for _, p := range []string{filepath.Join(dir, "..", "python"), filepath.Join(dir, "..", "..", "python")} {
		if fi, err := os.Stat(filepath.Join(p, "swapagent", "_bootstrap", "sitecustomize.py")); err == nil && !fi.IsDir() {
			return filepath.Clean(p)
		}
	}
	return ""
}

// agentEnv returns env with the agent configured. Our library goes LAST in LD_PRELOAD: libraries the
// user preloads keep their place (sanitizer runtimes must come first, and the user's interposers stay
// outermost), and the agent still sees every call that reaches the runtime. Another libswapagent.so
// already listed is dropped: two agents (two Go runtimes) in one process are not supported.
func agentEnv(env []string, lib, outDir, policy string, policySet bool, pyDir, pyMode string) ([]string, string) {
	var warn string
	var keep []string
	for _, item := range strings.FieldsFunc(getenv(env, "LD_PRELOAD"), func(r rune) bool { return r == ':' || r == ' ' }) {
		if item == lib {
			continue
		}
		if filepath.Base(item) == "libswapagent.so" {
			warn = fmt.Sprintf("replacing %s in LD_PRELOAD with %s", item, lib)
			continue
		}
		keep = append(keep, item)
	}
	env = setenv(env, "LD_PRELOAD", strings.Join(append(keep, lib), ":"))
	env = setenv(env, "SWAPAGENT_LIB", lib) // for companions in children that drop LD_PRELOAD
	env = setenv(env, "SWAPAGENT_OUT", outDir)
	if policySet {
		env = setenv(env, "SWAPAGENT_POLICY", policy)
	}
	if pyDir != "" || pyMode != "" { // the agent then names a Python process the bootstrap never reached
		if pyMode == "" {
			pyMode = "auto"
		}
		env = setenv(env, "SWAPAGENT_PYTHON", pyMode)
	}
	if pyDir != "" {
		// The bootstrap first (Python imports the first sitecustomize on the path; it chains the job's
		// own), then the package it imports; the job's entries keep their order after them.
		boot := filepath.Join(pyDir, "swapagent", "_bootstrap")
		var pp []string
		if pyMode != "off" {
			pp = append(pp, boot)
		}
		pp = append(pp, pyDir)
		for _, p := range filepath.SplitList(getenv(env, "PYTHONPATH")) {
			if p != boot && p != pyDir { // an empty entry (the working directory) stays
				pp = append(pp, p)
			}
		}
		env = setenv(env, "PYTHONPATH", strings.Join(pp, string(filepath.ListSeparator)))
	}
	return env, warn
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- { // the last entry wins, as in getenv(3) after putenv
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

func setenv(env []string, key, val string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}

// forwardSignals sends each caught signal on to the child until done. A SIGINT or SIGQUIT typed at
// the terminal already reached the child (same process group); forwarding it would deliver it twice,
// so those two are forwarded only when we are not in the terminal's foreground process group.
func forwardSignals(p *os.Process, sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && inForeground() {
				continue
			}
			_ = p.Signal(sig) // the child may have exited meanwhile: nothing to do
		}
	}
}

// inForeground reports whether this process is in the foreground process group of its controlling
// terminal (false without one).
func inForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// exitStatus maps the child's end to an exit code the way a shell does: its own code, or 128+signal.
func exitStatus(ps *os.ProcessState, werr error) int {
	if ps == nil {
		runCmd.Errorf(os.Stderr, "%v", werr)
		return exitFail
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// traceSet lists the traces already in dir (none when it does not exist yet).
func traceSet(dir string) map[string]bool {
	set := make(map[string]bool)
	files, _ := trace.FindTraces(dir)
	for _, f := range files {
		set[f] = true
	}
	return set
}

// unwritable says why no file can be made in dir, or "" when one can.
func unwritable(dir string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err.Error()
	}
	f, err := os.CreateTemp(dir, ".swapagent-probe-*")
	if err != nil {
		return err.Error()
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return ""
}

// summarise prints, on stderr, a summary of every trace this run wrote: files that did not exist
// before it, or older names (a reused pid) whose header says they started after the run began.
// python says whether the bootstrap was offered to Python processes: those it never reached are named.
func summarise(dir string, before map[string]bool, began time.Time, python bool) {
	files, _ := trace.FindTraces(dir)
	var sums []*report.Summary
	for _, f := range files {
		if before[f] && !startedAfter(f, began) {
			continue
		}
		s, err := report.LoadFile(f, nil)
		if err != nil {
			runCmd.Errorf(os.Stderr, "%v", err)
			continue
		}
		for _, n := range s.Warnings {
			runCmd.Errorf(os.Stderr, "%s", n)
		}
		sums = append(sums, s)
	}
	if len(sums) == 0 {
		if why := unwritable(dir); why != "" { // said at the job's start too, maybe hours ago
			runCmd.Errorf(os.Stderr, "no traces written to %s during this run: %s", dir, why)
		} else {
			runCmd.Errorf(os.Stderr, "no traces written to %s during this run", dir)
		}
		return
	}
	fmt.Fprintln(os.Stderr)
	runCmd.Errorf(os.Stderr, "%d traced process(es), traces in %s", len(sums), dir)
	_ = report.WriteRunText(os.Stderr, sums)
	if python {
		for _, s := range sums {
			if v, ok := s.Meta[trace.MetaPythonGuard]; v == "absent" || (!ok && trace.IsPython(s.Header.Argv)) {
				runCmd.Errorf(os.Stderr, "process %d (%s) is a Python process the guard did not reach: it was "+
					"started with -I or -S, or its PYTHONPATH was replaced, so its own swap ran unguarded",
					s.Header.PID, cli.Escape(strings.Join(s.Header.Argv, " ")))
			}
		}
	}
}

func startedAfter(file string, t time.Time) bool {
	f, err := trace.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	return err == nil && r.Header().StartUnix >= t.UnixNano()
}
