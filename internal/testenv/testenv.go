// Package testenv finds the repository root and the build outputs that integration tests run.
// A missing build output fails the test with the command that makes it: tests never skip silently.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Root returns the repository root (the directory holding go.mod).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Path returns the absolute path of a build output relative to the root (for example
// "build/bin/decoder-sim"), failing the test when it has not been built.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Root(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: %s is missing: run `make build` first (%v)", rel, err)
	}
	return p
}

// Well-known build outputs. The emulated runtime is laid out as CANN 8 is: aclrt* in ACLLib, tensors and
// executors in NNOpBaseLib, aclnn ops in OpAPILib.
const (
	ACLLib      = "build/ascend/latest/lib64/libascendcl.so"
	NNOpBaseLib = "build/ascend/latest/lib64/libnnopbase.so"
	OpAPILib    = "build/ascend/latest/lib64/libopapi.so"
	ACLRoot     = "build/ascend/latest"
	DecoderSim  = "build/bin/decoder-sim"
	AgentLib    = "build/lib/libswapagent.so"
	CLI         = "build/bin/swapagent"
)

// Result is one finished process: its output, its exit code (-1 when a signal ended it) and the error
// Run got (nil, an *exec.ExitError, ...), for tests that look at how it ended.
type Result struct {
	Stdout, Stderr string
	Code           int
	Err            error
}

// CleanEnv is this process's environment without what steers the agent, the emulator or msrun's
// scheduler check (SWAPAGENT_*, ACLSIM_*, LD_PRELOAD, MS_ROLE, RANK, RANK_ID): a test states what it
// wants, whatever the shell that runs it has set.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SWAPAGENT_") || strings.HasPrefix(k, "ACLSIM_") || k == "LD_PRELOAD" ||
			k == "MS_ROLE" || k == "RANK" || k == "RANK_ID" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// AgentEnv is CleanEnv with the built agent preloaded, its output in out, and extra.
func AgentEnv(t testing.TB, out string, extra ...string) []string {
	t.Helper()
	return append(append(CleanEnv(), "LD_PRELOAD="+Path(t, AgentLib), "SWAPAGENT_OUT="+out), extra...)
}

// OnlyTrace is the path of the one trace a run wrote into dir; the test fails when there is not exactly one.
func OnlyTrace(t testing.TB, dir string) string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.swtrace"))
	if len(paths) != 1 {
		t.Fatalf("%s holds %d traces, want 1: %v", dir, len(paths), paths)
	}
	return paths[0]
}

// Run runs name with the whole environment env (nil: CleanEnv()), bounded by timeout. A process that
// times out or cannot start fails the test (with the end of its stderr); how it exited is the caller's
// to judge.
func Run(t testing.TB, timeout time.Duration, env []string, name string, args ...string) Result {
	t.Helper()
	if env == nil {
		env = CleanEnv()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v: timed out after %v\nstderr (tail):\n%s", filepath.Base(name), args, timeout,
			Tail(errb.String(), 20))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s %v: %v", filepath.Base(name), args, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: cmd.ProcessState.ExitCode(), Err: err}
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
