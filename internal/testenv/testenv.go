// Package testenv finds the repository root and the build outputs that integration tests run.
// A missing build output fails the test with the command that makes it: tests never skip silently.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
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
