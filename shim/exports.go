// exports.go owns the Go implementations behind the control ABI's C wrappers (shim/c/control.c): C
// argument conversion only; the agent checks, records and delegates. The wrappers have already refused
// in a forked child, so these never run there.
package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"swapagent/agent"
)

const maxPtrs = 1 << 18 // trace.MaxPtrs: a larger n is a bad argument, not a reason to copy gigabytes

func goString(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// ptrSlice copies n pointers (ok false for NULL with n > 0, or an absurd n).
func ptrSlice(p *C.uintptr_t, n C.size_t) ([]uint64, bool) {
	if n == 0 {
		return nil, true
	}
	if p == nil || n > maxPtrs {
		return nil, false
	}
	src := unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(n))
	return append([]uint64(nil), src...), true
}

// guard contains a panic inside the agent: the agent goes inert (the C side passes every call through
// and refuses control calls), one line says so, and the call returns fail. The host process goes on.
// recover works only in the deferred function itself, hence guard and guardVoid.
func guard[T any](call string, ret *T, fail T) {
	if r := recover(); r != nil {
		contain(call, r)
		*ret = fail
	}
}

func guardVoid(call string) {
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
	defer guard("swapagent_set_storage_ops", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	if (release == 0) != (restore == 0) {
		return agent.EInvalid
	}
	if release == 0 {
		return C.int(a.SetStorageOps(nil))
	}
	return C.int(a.SetStorageOps(cStorageOps{release: uintptr(release), restore: uintptr(restore), ctx: uintptr(ctx)}))
}

//export sa_go_region_enter
func sa_go_region_enter(group *C.char, ptrs *C.uintptr_t, n, npos C.size_t) (ret C.int) {
	defer guard("swapagent_region_enter", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	ps, ok := ptrSlice(ptrs, n)
	if group == nil || !ok || npos > n {
		return agent.EInvalid
	}
	return C.int(a.RegionEnter(goString(group), ps, int(npos)))
}

//export sa_go_save
func sa_go_save(group *C.char, ptr C.uintptr_t, nbytes C.size_t, flags C.uint32_t) (ret C.int64_t) {
	defer guard("swapagent_save", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	if group == nil {
		return agent.EInvalid
	}
	return C.int64_t(a.Save(goString(group), uint64(ptr), uint64(nbytes), uint32(flags)))
}

//export sa_go_region_exit
func sa_go_region_exit(group *C.char, ptrs *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_region_exit", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	ps, ok := ptrSlice(ptrs, n)
	if group == nil || !ok {
		return agent.EInvalid
	}
	return C.int(a.RegionExit(goString(group), ps))
}

//export sa_go_protect
func sa_go_protect(group *C.char, ptrs *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_protect", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	ps, ok := ptrSlice(ptrs, n)
	if group == nil || !ok {
		return agent.EInvalid
	}
	return C.int(a.Protect(goString(group), ps))
}

//export sa_go_group_streams
func sa_go_group_streams(group *C.char, streams *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_group_streams", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	ss, ok := ptrSlice(streams, n)
	if group == nil || !ok {
		return agent.EInvalid
	}
	return C.int(a.GroupStreams(goString(group), ss))
}

// groupCall runs a control call that takes only a group name.
func groupCall(group *C.char, call func(*agent.Agent, string) int) C.int {
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	if group == nil {
		return agent.EInvalid
	}
	return C.int(call(a, goString(group)))
}

//export sa_go_backward_enter
func sa_go_backward_enter(group *C.char) (ret C.int) {
	defer guard("swapagent_backward_enter", &ret, agent.EDisabled)
	return groupCall(group, (*agent.Agent).BackwardEnter)
}

//export sa_go_unpack
func sa_go_unpack(handle C.int64_t) (ret C.uintptr_t) {
	defer guard("swapagent_unpack", &ret, 0)
	a := theAgent
	if a == nil {
		return 0
	}
	return C.uintptr_t(a.Unpack(int64(handle)))
}

//export sa_go_backward_exit
func sa_go_backward_exit(group *C.char) (ret C.int) {
	defer guard("swapagent_backward_exit", &ret, agent.EDisabled)
	return groupCall(group, (*agent.Agent).BackwardExit)
}

//export sa_go_state
func sa_go_state(handle C.int64_t) (ret C.int) {
	defer guard("swapagent_state", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	return C.int(a.State(int64(handle)))
}

//export sa_go_keep_reason
func sa_go_keep_reason(handle C.int64_t) (ret C.int) {
	defer guard("swapagent_keep_reason", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	return C.int(a.KeepReason(int64(handle)))
}

// sa_go_stats_json writes the stats JSON and a NUL when it fits in cap; it returns the JSON's length
// either way (the size needed, without the NUL).
//
//export sa_go_stats_json
func sa_go_stats_json(buf *C.char, capacity C.size_t) (ret C.int) {
	defer guard("swapagent_stats_json", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	if buf == nil && capacity > 0 {
		return agent.EInvalid
	}
	js := a.StatsJSON()
	if buf != nil && uint64(len(js)) < uint64(capacity) {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(js)+1)
		copy(dst, js)
		dst[len(js)] = 0
	}
	return C.int(len(js))
}

//export sa_go_shutdown
func sa_go_shutdown() {
	defer guardVoid("swapagent_shutdown")
	if a := theAgent; a != nil {
		a.Shutdown()
	}
}

//export sa_go_launch_fault
func sa_go_launch_fault(fn, index C.int, addr, size C.uint64_t) {
	defer guardVoid("swapagent_launch_fault")
	if a := theAgent; a != nil {
		a.LaunchFault(native{}.FnName(uint16(fn)), int(index), uint64(addr), uint64(size))
	}
}

//export sa_go_sync_fault
func sa_go_sync_fault(fn, code C.int) {
	defer guardVoid("swapagent_sync_fault")
	if a := theAgent; a != nil {
		a.SyncFault(native{}.FnName(uint16(fn)), int(code))
	}
}
