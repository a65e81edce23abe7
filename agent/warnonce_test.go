package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The first process of a group warns, the rest of the group do not, and a marker left by another group
// that had the same number does not silence this one.
func TestFirstToWarnOncePerGroup(t *testing.T) {
	if startTime(syscall.Getpgrp()) == "" {
		t.Fatal("no /proc start time for the process group")
	}
	out := filepath.Join(t.TempDir(), "out")
	if !firstToWarn(out) || firstToWarn(out) || firstToWarn(out) {
		t.Fatal("want true once, then false for the rest of the group")
	}
	marker, _ := filepath.Glob(filepath.Join(out, ".settings-warned.*"))
	if len(marker) != 1 || os.WriteFile(marker[0], []byte("1"), 0o644) != nil {
		t.Fatalf("marker %v", marker)
	}
	if !firstToWarn(out) || firstToWarn(out) {
		t.Error("a stale marker of another group: want one warning again")
	}
}
