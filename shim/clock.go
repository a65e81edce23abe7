package main

import _ "unsafe" // go:linkname

// nanotime is the Go runtime's CLOCK_MONOTONIC reading (the vDSO's, as the C side's sa_now): the agent's
// own stamps are on the ring's clock without a call into C.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
