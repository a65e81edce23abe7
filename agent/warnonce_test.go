package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// The first process of a group warns, the rest of the group do not, and a marker left by another group
// that had the same number does not silence this one; once the group's leader has exited, a marker for
// the number is taken as the group's.
func TestFirstToWarnOncePerGroup(t *testing.T) {
	if startTime(os.Getpid()) == "" {
		t.Fatal("no /proc start time for this process")
	}
	out := filepath.Join(t.TempDir(), "out")
	const pg, stamp = 4242, "1234567"
	if !firstOfGroup(out, pg, stamp) || firstOfGroup(out, pg, stamp) || firstOfGroup(out, pg, stamp) {
		t.Fatal("want true once, then false for the rest of the group")
	}
	if firstOfGroup(out, pg, "") {
		t.Error("the leader gone: the group's marker must still silence the rest of the group")
	}
	if !firstOfGroup(out, pg, "7654321") || firstOfGroup(out, pg, "7654321") {
		t.Error("a stale marker of another group: want one warning again")
	}
	if !firstOfGroup(out, pg+1, "") || firstOfGroup(out, pg+1, "") {
		t.Error("a group without its leader and no marker: want one warning")
	}
	// This process's own group, whichever it is.
	own := filepath.Join(t.TempDir(), "own")
	if !firstToWarn(own) || firstToWarn(own) {
		t.Error("this process's group: want true once")
	}
}
