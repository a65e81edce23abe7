// tracelevel.go owns the trace levels (SWAPAGENT_TRACE): the one rule of which records each level writes
// (traceKeeps). The sink applies it to what it writes and to nothing else: the tracker's feed, the fault
// checks and their diagnosis, the stats and the summaries are the same at every level.
package agent

import (
	"strings"

	"swapagent/trace"
)

// Trace levels, SWAPAGENT_TRACE's values.
const (
	// TraceAll records every event: the trace as it was before levels existed.
	TraceAll = "all"
	// TraceMemory records what memory and swap analysis needs: allocations and frees, copies, syncs,
	// kernel launches, and every swap-ABI, fault, log, metadata and stats record. It drops the per-op
	// bookkeeping (tensor creation, workspace-size queries, executor calls).
	TraceMemory = "memory"
	// TraceOff records the stats, the faults and the metadata only; the file is still written.
	TraceOff = "off"
)

// TraceLevels are the levels SWAPAGENT_TRACE accepts, in the order error messages list them.
var TraceLevels = []string{TraceAll, TraceMemory, TraceOff}

// traceKeeps is the trace-level rule: whether level records an event of kind; fn is the function's name
// for a KindCall ("" otherwise). KindFunc and KindGroup name records are always allowed: the sink writes
// them only before the first kept record that uses the name, so a level that keeps no call writes no
// function name. An unknown level records everything (LoadConfig admits only TraceLevels).
func traceKeeps(level string, kind trace.Kind, fn string) bool {
	switch level {
	case TraceOff:
		switch kind {
		case trace.KindStats, trace.KindFault, trace.KindMeta, trace.KindFunc, trace.KindGroup:
			return true
		}
		return false
	case TraceMemory:
		if kind == trace.KindCall {
			return memoryCall(fn)
		}
		return true // every swap-ABI record, faults, logs, lost counts, metadata, stats, names
	}
	return true
}

// memoryCall is the memory level's rule for runtime calls, by name.
//
// Every kernel launch is kept: whether one touches a watched or released storage is known only to the C
// launch check (which reports it as a fault, kept at every level), not to the drain that writes the call,
// so the memory level cannot keep only those.
func memoryCall(fn string) bool {
	switch trace.ClassOf(fn) {
	case trace.ClassDeviceAlloc, trace.ClassDeviceFree, trace.ClassHostAlloc, trace.ClassHostFree,
		trace.ClassReserve, trace.ClassReserveRelease, // VMM address space
		trace.ClassCopyAsync, trace.ClassMemsetAsync,
		trace.ClassEventRecord, trace.ClassStreamWait, trace.ClassStreamDestroy,
		trace.ClassException, trace.ClassLaunch:
		return true
	case trace.ClassTensor:
		return false
	}
	switch fn {
	case "aclrtMemcpy", "aclrtMemset", // copies
		"aclrtMallocPhysical", "aclrtFreePhysical", // VMM physical memory (mapped by aclrtMapMem)
		"aclrtCreateStream", "aclrtCreateStreamWithConfig", // the streams and events syncs name
		"aclrtCreateEvent", "aclrtCreateEventWithFlag", "aclrtCreateEventExWithFlag", "aclrtDestroyEvent",
		"aclrtSetExceptionInfoCallback", "aclInit", "aclFinalize": // once per process
		return true
	}
	// The syncs; everything else is per-op bookkeeping (aclDestroyTensor, aclCreateTensorList,
	// aclSetTensorAddr, aclSetDynamicTensorAddr, executor calls, aclnn*GetWorkspaceSize) or a query that
	// changes nothing (aclrtGetMemInfo, aclrtQueryEventStatus, aclrtStreamQuery, aclrtGetLastError, ...).
	return strings.HasPrefix(fn, "aclrtSynchronize")
}
