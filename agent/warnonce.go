package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// firstToWarn says whether this process is the first of its job to print its settings' problems: the
// processes a job starts share its process group and its output directory (a launcher's shims start a dozen
// Python processes with the same environment), so a marker there names the group and its leader's start
// time; a later group that reuses the number warns again. Once the leader has exited, a marker for the
// number is taken as the group's (a rare later group with a leader gone too may then stay silent). Where it
// cannot tell (no /proc, no writable directory) every process warns. The problems go into every process's trace either way.
func firstToWarn(out string) bool {
	if startTime(os.Getpid()) == "" {
		return true // no /proc
	}
	pg := syscall.Getpgrp()
	return firstOfGroup(out, pg, startTime(pg))
}

// firstOfGroup is firstToWarn for group pg, whose leader started at stamp ("" when it has exited).
func firstOfGroup(out string, pg int, stamp string) bool {
	if os.MkdirAll(out, 0o755) != nil {
		return true // nowhere to leave a marker
	}
	path := filepath.Join(out, fmt.Sprintf(".settings-warned.%d", pg))
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
		_, _ = f.WriteString(stamp)
		_ = f.Close()
		return true
	}
	if b, err := os.ReadFile(path); err == nil && (string(b) == stamp || stamp == "") {
		// The group's marker; or, with its leader gone (a launcher that left its workers running), a marker
		// for its number, taken as the group's own: a number is not reused while the group has members.
		return false
	}
	_ = os.WriteFile(path, []byte(stamp), 0o644) // another group's, long gone
	return true
}

// startTime is process pid's start time in clock ticks since boot (/proc/PID/stat, field 22), "" when
// unknown.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:]) // from field 3 (state) on
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
