package trace

import "strings"

// Class says what a traced runtime function does, by its name (KindFunc); the argument layout of each
// class's KindCall events is in docs/trace-format.md. Every reader that interprets calls asks here.
type Class uint8

// Classes. The zero value means "not looked up yet", so a cache indexed by function id can start empty.
const (
	ClassUnknown        Class = iota
	ClassOther                // everything else: counted, not interpreted
	ClassDeviceAlloc          // aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached, aclrtMapMem: Args[0] ptr, Args[1] size
	ClassDeviceFree           // aclrtFree, aclrtUnmapMem: Args[0] ptr
	ClassHostAlloc            // aclrtMallocHost: Args[0] ptr, Args[1] size
	ClassHostFree             // aclrtFreeHost: Args[0] ptr
	ClassTensor               // aclCreateTensor: Args[0] tensor, Args[1] data address, Args[2] extent
	ClassLaunch               // an aclnn op's four-argument launch: Args[4] tensors created for it
	ClassException            // the runtime's exception callback: Args task, stream, thread, device, error code
	ClassCopyAsync            // aclrtMemcpyAsync: Args dst, src, count, kind, destMax, stream
	ClassMemsetAsync          // aclrtMemsetAsync: Args ptr, count, value, maxCount, stream
	ClassEventRecord          // aclrtRecordEvent, aclrtResetEvent: Args event, stream
	ClassStreamWait           // aclrtStreamWaitEvent: Args stream, event
	ClassStreamDestroy        // aclrtDestroyStream, aclrtDestroyStreamForce: Args stream
	ClassReserve              // aclrtReserveMemAddress: Args[0] ptr, Args[1] size (address space, not memory)
	ClassReserveRelease       // aclrtReleaseMemAddress: Args[0] ptr
)

// ClassOf classifies a runtime function name.
func ClassOf(name string) Class {
	switch name {
	case "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtMapMem":
		return ClassDeviceAlloc
	case "aclrtFree", "aclrtUnmapMem":
		return ClassDeviceFree
	case "aclrtReserveMemAddress":
		return ClassReserve
	case "aclrtReleaseMemAddress":
		return ClassReserveRelease
	case "aclrtMallocHost":
		return ClassHostAlloc
	case "aclrtFreeHost":
		return ClassHostFree
	case "aclCreateTensor":
		return ClassTensor
	case "aclrtExceptionCallback":
		return ClassException
	case "aclrtMemcpyAsync":
		return ClassCopyAsync
	case "aclrtMemsetAsync":
		return ClassMemsetAsync
	case "aclrtRecordEvent", "aclrtResetEvent":
		return ClassEventRecord
	case "aclrtStreamWaitEvent":
		return ClassStreamWait
	case "aclrtDestroyStream", "aclrtDestroyStreamForce":
		return ClassStreamDestroy
	}
	if IsLaunch(name) {
		return ClassLaunch
	}
	return ClassOther
}

// Stream returns the stream a call of class c enqueued work on (0 is the default stream); false for calls
// that enqueue nothing.
func (c Class) Stream(args [6]uint64) (uint64, bool) {
	switch c {
	case ClassLaunch:
		return args[3], true
	case ClassCopyAsync:
		return args[5], true
	case ClassMemsetAsync:
		return args[4], true
	case ClassEventRecord:
		return args[1], true
	case ClassStreamWait:
		return args[0], true
	}
	return 0, false
}

// IsLaunch reports whether name is an aclnn op's four-argument launch (not its GetWorkspaceSize).
func IsLaunch(name string) bool {
	return strings.HasPrefix(name, "aclnn") && !strings.HasSuffix(name, "GetWorkspaceSize")
}
