//go:build !cgo

// ignored_nocgo.go: without cgo only the runtime's own record is left, which keeps an inherited SIG_IGN
// for SIGHUP and SIGINT alone (the nohup and background-job cases); ignored.go records every signal.
package main

import (
	"os/signal"
	"syscall"
)

// ignoredAtStart reports whether sig was ignored when this process started (SIGHUP and SIGINT only).
func ignoredAtStart(sig syscall.Signal) bool { return signal.Ignored(sig) }
