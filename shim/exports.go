// exports.go owns the Go entries behind the control ABI's C side (shim/c/calls.c, shim/c/control.c): one for
// every call that takes a group or pointers (sa_go_run: the C side read the arguments and hands over its
// copy), the handle queries, the stats and the process's end. The C side has already refused in a forked
// child, so these never run there. Each contains a panic inside the agent (containPanic).
package main

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sa_go.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"swapagent/agent"
	"swapagent/offload"
	"swapagent/trace"
)

// containPanic contains a panic inside the agent: the agent goes inert (the C side passes every call through
// and refuses control calls), one line says so, and the call returns fail. The host process goes on.
// recover works only in the deferred function itself, hence containPanic and containPanicVoid.
func containPanic[T any](call string, ret *T, fail T) {
	if r := recover(); r != nil {
		contain(call, r)
		*ret = fail
	}
}

func containPanicVoid(call string) {
	if r := recover(); r != nil {
		contain(call, r)
	}
}

func contain(call string, r any) {
	if a := theAgent; a != nil {
		a.Fail(call, r)
		return
	}
	native{}.Disable()
}

//export sa_go_set_storage_ops
func sa_go_set_storage_ops(release, restore, ctx C.uintptr_t) (ret C.int) {
	defer containPanic("swapagent_set_storage_ops", &ret, trace.CodeEDISABLED)
	a := theAgent
	if a == nil {
		return trace.CodeEDISABLED
	}
	if (release == 0) != (restore == 0) {
		return C.int(a.Invalid("set_storage_ops", "one of release and restore is NULL"))
	}
	if release == 0 {
		return C.int(a.SetStorageOps(nil))
	}
	return C.int(a.SetStorageOps(cStorageOps{release: uintptr(release), restore: uintptr(restore), ctx: uintptr(ctx)}))
}

// sa_go_run runs a control call now from the C side's copy of it (which the C side frees), and writes its
// outputs (the saves' handles, a release's token) into that copy for the C side to give the caller.
//
//export sa_go_run
func sa_go_run(addr C.uintptr_t) (ret C.int64_t) {
	defer containPanic(callFuncs[callKind(uint64(addr))], &ret, trace.CodeEDISABLED)
	c, handles, d := callOf(uint64(addr))
	a := theAgent
	if a == nil {
		return trace.CodeEDISABLED
	}
	r := a.Run(c)
	copy(handles, c.Handles)
	d.token = C.int64_t(c.Token)
	return C.int64_t(r)
}

//export sa_go_queueing
func sa_go_queueing(keepBelow *C.uint64_t) (ret C.int) {
	defer containPanic("swapagent_call", &ret, C.SA_QUEUE_NONE)
	a := theAgent
	if a == nil {
		return C.SA_QUEUE_NONE
	}
	q, below := a.Queueing()
	*keepBelow = C.uint64_t(below)
	switch q {
	case offload.QueueAll:
		return C.SA_QUEUE_ALL
	case offload.QueueUntilMove:
		return C.SA_QUEUE_UNTIL_MOVE
	}
	return C.SA_QUEUE_NONE
}

// sa_go_refused refuses a call whose arguments the C side could not read: named by its kind, or by call.
//
//export sa_go_refused
func sa_go_refused(kind C.int, call, detail *C.char) (ret C.int) {
	defer containPanic("swapagent_call", &ret, trace.CodeEINVAL)
	a := theAgent
	if a == nil {
		return trace.CodeEDISABLED
	}
	name := agent.CallName(int(kind))
	if call != nil {
		name = C.GoString(call)
	}
	return C.int(a.Invalid(name, C.GoString(detail)))
}

//export sa_go_unpack
func sa_go_unpack(handle C.int64_t) (ret C.uintptr_t) {
	defer containPanic("swapagent_unpack", &ret, 0)
	a := theAgent
	if a == nil {
		return 0
	}
	return C.uintptr_t(a.Unpack(int64(handle)))
}

//export sa_go_state
func sa_go_state(handle C.int64_t) (ret C.int) {
	defer containPanic("swapagent_state", &ret, trace.CodeEDISABLED)
	return handleCall(handle, (*agent.Agent).State)
}

//export sa_go_keep_reason
func sa_go_keep_reason(handle C.int64_t) (ret C.int) {
	defer containPanic("swapagent_keep_reason", &ret, trace.CodeEDISABLED)
	return handleCall(handle, (*agent.Agent).KeepReason)
}

// handleCall runs a control call that takes only a handle.
func handleCall(handle C.int64_t, call func(*agent.Agent, int64) int) C.int {
	a := theAgent
	if a == nil {
		return trace.CodeEDISABLED
	}
	return C.int(call(a, int64(handle)))
}

// sa_go_stats_json returns the stats JSON in C memory the caller frees (NULL when the agent is inert), its
// length in *length.
//
//export sa_go_stats_json
func sa_go_stats_json(length *C.size_t) (ret *C.char) {
	defer containPanic("swapagent_stats_json", &ret, nil)
	a := theAgent
	if a == nil {
		return nil
	}
	js := a.StatsJSON()
	*length = C.size_t(len(js))
	return (*C.char)(C.CBytes(append(js, 0)))
}

// shutdownBound is how long the exit hook waits for the trace to be finished: a process's exit must not
// hang on the agent (a thread that holds the agent's lock forever, a full disk that blocks writes).
const shutdownBound = 2 * time.Second

//export sa_go_shutdown
func sa_go_shutdown() {
	a := theAgent
	if a == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer containPanicVoid("swapagent_shutdown")
		a.Shutdown()
	}()
	t := time.NewTimer(shutdownBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		fmt.Fprintf(stderrFD{}, "swapagent: the trace was not finished within %v of exit; what was flushed "+
			"before stays readable\n", shutdownBound)
	}
}

//export sa_go_runtime_final
func sa_go_runtime_final() {
	defer containPanicVoid("aclFinalize")
	if m := theMover; m != nil {
		m.rt.finish()
	}
}

//export sa_go_launch_fault
func sa_go_launch_fault(fn, index C.int, addr, size C.uint64_t) {
	defer containPanicVoid("swapagent_launch_fault")
	if a := theAgent; a != nil {
		a.LaunchFault(native{}.FnName(uint16(fn)), int(index), uint64(addr), uint64(size))
	}
}

//export sa_go_sync_fault
func sa_go_sync_fault(fn, code C.int) {
	defer containPanicVoid("swapagent_sync_fault")
	if a := theAgent; a != nil {
		a.SyncFault(native{}.FnName(uint16(fn)), int(code))
	}
}

// callFuncs names each call kind as a panic contained in it is reported ("swapagent_region_enter"); index 0:
// a kind the header does not define.
var callFuncs = func() (names [trace.NumCalls + 1]string) {
	for k := range names {
		names[k] = "swapagent_" + agent.CallName(k)
	}
	return names
}()

// callKind is the kind of the C side's copy of a call at addr (0 for one the header does not define).
func callKind(addr uint64) int {
	d := *(**C.sa_call)(unsafe.Pointer(&addr)) // a C address: reinterpret its bits (never a Go pointer)
	if k := int(d.kind); k <= trace.NumCalls {
		return k
	}
	return 0
}

// callOf reads the C side's copy of a call at addr (shim/c/calls.c wrote it) into an agent.Call, each part
// where the copy says it lies (sa_call's part_off and part_n, indexed by calls.def's enum sa_part), and
// returns with it the copy's room for the saves' handles and the copy itself.
func callOf(addr uint64) (*agent.Call, []int64, *C.sa_call) {
	// addr is a C address (from the C side, or read from the ring): reinterpret its bits (never a Go pointer).
	d := *(**C.sa_call)(unsafe.Pointer(&addr))
	data := unsafe.Add(unsafe.Pointer(d), unsafe.Sizeof(*d)) // the flexible array member, which cgo omits
	at := func(p C.enum_sa_part) (unsafe.Pointer, int) {
		return unsafe.Add(data, uintptr(d.part_off[p])), int(d.part_n[p])
	}
	words := func(p C.enum_sa_part) []uint64 {
		ptr, n := at(p)
		return append([]uint64(nil), unsafe.Slice((*uint64)(ptr), n)...)
	}
	c := &agent.Call{Kind: int(d.kind), NPos: int(d.n_pos), Ptr: uint64(d.ptr), Nbytes: uint64(d.nbytes),
		Others: int64(d.others), Handle: int64(d.handle)}
	c.Ptrs, c.Saves, c.Sizes, c.DescPtrs = words(C.SA_PART_PTRS), words(C.SA_PART_SAVE_PTRS),
		words(C.SA_PART_SAVE_NBYTES), words(C.SA_PART_DESC_PTRS)
	for _, v := range words(C.SA_PART_COUNTS) {
		c.Counts = append(c.Counts, int64(v))
	}
	hp, nh := at(C.SA_PART_HANDLES)
	handles := unsafe.Slice((*int64)(hp), nh)
	c.Handles = append([]int64(nil), handles...)
	if fp, nf := at(C.SA_PART_SAVE_FLAGS); nf > 0 {
		c.Flags = append([]uint32(nil), unsafe.Slice((*uint32)(fp), nf)...)
	}
	tp, nt := at(C.SA_PART_TEXT)
	text := unsafe.Slice((*byte)(tp), nt)
	if d.has_group != 0 {
		c.Group = groupName(unsafe.Slice((*byte)(unsafe.Add(data, uintptr(d.group_off))), int(d.group_len)))
	}
	if d.has_text != 0 {
		c.Text = string(text)
		if c.Kind != trace.CallNote {
			c.Descs, c.Bad = agent.SplitText(text)
		}
	}
	return c, handles, d
}

// groupNames interns group names: a companion passes the same few in every call, so a call makes no string.
// Bounded: a caller whose names never repeat starts it over.
var groupNames struct {
	sync.Mutex
	m map[string]string
}

func groupName(b []byte) string {
	groupNames.Lock()
	defer groupNames.Unlock()
	if s, ok := groupNames.m[string(b)]; ok {
		return s
	}
	if groupNames.m == nil || len(groupNames.m) >= 4096 {
		groupNames.m = make(map[string]string)
	}
	s := string(b)
	groupNames.m[s] = s
	return s
}
