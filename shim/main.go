// Command shim is built with -buildmode=c-shared into libswapagent.so: the C interposers of shim/c
// (linked whole from their strict-warning archive) plus the Go agent. This file owns the library's Go
// start-up (configuration, the drainer) and the Native side the agent drains through.
package main

// The C shim object ($(BUILD)/obj/shim/sashim.o, one per target architecture) reaches the link as
// -extldflags, set by shim/shim.mk: build the library with make, not with go build alone.

/*
#cgo CFLAGS: -I${SRCDIR}/c
#cgo LDFLAGS: -ldl -lpthread
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sa_go.h"

// The calling thread's ID, cached per thread: the trace's ABI events carry it, and a system call per event
// would cost more than the event.
static __thread uint32_t sa_ctl_tid;
static uint32_t sa_ctl_thread(void) {
  if (sa_ctl_tid == 0) sa_ctl_tid = (uint32_t)syscall(SYS_gettid);
  return sa_ctl_tid;
}
*/
import "C"

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"swapagent/agent"
)

// cShimHash is the hash of the C shim object, set at link time (shim/shim.mk) so that a changed object
// changes the link and Go's build cache cannot hand back a library with the old C inside.
var cShimHash string

// theAgent is nil when the agent is inert (msrun scheduler, forked child, start-up failure).
var theAgent *agent.Agent

func init() {
	if unsafe.Sizeof(agent.Raw{}) != C.sizeof_sa_event {
		os.Stderr.WriteString("swapagent: internal error: event layout mismatch; agent disabled\n")
		C.sa_set_inert()
		return
	}
	cfg, problems := agent.LoadConfig(os.LookupEnv)
	if cfg.Inert() || C.sa_is_forked() != 0 {
		C.sa_set_inert()
		return
	}
	if p := C.sa_signal_problem(); p != nil {
		problems = append(problems, "the agent's threads may take the host's SIGCHLD and SIGPROF: "+C.GoString(p))
	}
	a := agent.New(cfg, native{}, stderrFD{}, problems)
	theAgent = a
	wireEngine(a)
	a.Start()
	C.sa_set_active()
}

func main() {}

// stderrFD writes the agent's lines with write(2) on fd 2. os.Stderr would turn EPIPE (stderr a closed
// pipe) into a SIGPIPE the Go runtime raises on the whole process: the agent must never end its host.
type stderrFD struct{}

func (stderrFD) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := unix.Write(2, p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// native implements agent.Native over the C shim.
type native struct{}

func (native) Drain(dst []agent.Raw) int {
	if len(dst) == 0 {
		return 0
	}
	return int(C.sa_ring_drain((*C.sa_event)(unsafe.Pointer(&dst[0])), C.int(len(dst))))
}

func (native) FnName(fn uint16) string {
	p := C.sa_fn_name(C.int(fn))
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

func (native) TakeLost() uint64     { return uint64(C.sa_take_lost()) }
func (native) Now() int64           { return nanotime() }
func (native) StartMono() int64     { return int64(C.sa_start_mono()) }
func (native) StartWall() int64     { return int64(C.sa_start_wall()) }
func (native) CrashPending() int    { return int(C.sa_crash_pending()) }
func (native) CrashAck()            { C.sa_crash_ack() }
func (native) MarkDrainerThread()   { C.sa_drainer_thread() }
func (native) RecentErrMsg() string { return C.GoString(C.sa_err_msg()) }
func (native) Disable()             { C.sa_set_inert() }
func (native) ThreadID() uint32     { return uint32(C.sa_ctl_thread()) }
func (native) QueueClose()          { C.sa_queue_close() }
func (native) SetResident(h int64, base uint64) {
	C.sa_resident_set(C.int64_t(h), C.uintptr_t(base))
}

func (native) SetDead(ranges []uint64) {
	if len(ranges) == 0 {
		C.sa_set_dead(nil, 0)
		return
	}
	C.sa_set_dead((*C.uint64_t)(unsafe.Pointer(&ranges[0])), C.int(len(ranges)))
}

// Queued reads a queued call's copy (shim/c/calls.c wrote it, by sa_call's layout) and frees it.
func (native) Queued(addr uint64) *agent.Call {
	c, _, _ := callOf(addr)
	C.sa_call_free(C.uintptr_t(addr))
	return c
}
