// Package aclrt owns swapagent's dlopen binding to an AscendCL runtime, used by `swapagent replay --exec`:
// libascendcl.so, and libnnopbase.so (tensors) and libopapi.so (aclnn ops) from the same lib64, as CANN 8
// lays them out. The C helpers in aclrt.c call through dlsym'd pointers, so nothing links against the
// runtime and the binary replays against whichever library it finds. Pointers cross as integers; no Go
// memory is ever handed to the runtime.
package aclrt

/*
#cgo CFLAGS: -Wall -Wextra -Werror -std=gnu11 -I${SRCDIR}/../../include
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "aclrt.h"
*/
import "C"

import (
	"errors"
	"strings"
	"sync"
	"unsafe"
)

// Missing is the code a helper returns when the runtime lacks the symbol.
const Missing = int(C.SA_RT_MISSING)

var (
	mu     sync.Mutex
	opened string
)

// Open loads the runtime at path (libascendcl.so: a path, or a bare soname searched like
// LD_LIBRARY_PATH) and libnnopbase.so and libopapi.so from its directory. A missing companion is not an
// error: note says which, and its calls return Missing. A process keeps the first runtime it opened:
// opening another path is an error.
func Open(path string) (note string, err error) {
	mu.Lock()
	defer mu.Unlock()
	if opened != "" {
		if opened == path {
			return "", nil
		}
		return "", errors.New("aclrt: " + opened + " is already loaded; cannot load " + path + " too")
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf, nbuf [1024]C.char
	if C.sa_rt_open(cpath, &buf[0], C.size_t(len(buf)), &nbuf[0], C.size_t(len(nbuf))) != 0 {
		return "", errors.New(C.GoString(&buf[0]))
	}
	opened = path
	return C.GoString(&nbuf[0]), nil
}

// RecentErrMsg returns aclGetRecentErrMsg's lines (nil when none).
func RecentErrMsg() []string {
	p := C.sa_rt_recent_err()
	if p == nil {
		return nil
	}
	s := strings.TrimRight(C.GoString(p), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func u(p uint64) C.uintptr_t { return C.uintptr_t(p) }

func Init() int           { return int(C.sa_rt_init()) }
func Finalize() int       { return int(C.sa_rt_finalize()) }
func SetDevice(d int) int { return int(C.sa_rt_set_device(C.int32_t(d))) }
func SyncDevice() int     { return int(C.sa_rt_sync_device()) }

// Malloc allocates device memory; which: 0 aclrtMalloc, 1 aclrtMallocAlign32, 2 aclrtMallocCached.
func Malloc(which int, size uint64, policy int32) (uint64, int) {
	var p C.uintptr_t
	r := C.sa_rt_malloc(C.int(which), C.uint64_t(size), C.int32_t(policy), &p)
	return uint64(p), int(r)
}
func Free(p uint64) int { return int(C.sa_rt_free(u(p))) }
func MallocHost(size uint64) (uint64, int) {
	var p C.uintptr_t
	r := C.sa_rt_malloc_host(C.uint64_t(size), &p)
	return uint64(p), int(r)
}
func FreeHost(p uint64) int { return int(C.sa_rt_free_host(u(p))) }
func Memcpy(dst, dmax, src, count uint64, kind int32) int {
	return int(C.sa_rt_memcpy(u(dst), C.uint64_t(dmax), u(src), C.uint64_t(count), C.int32_t(kind)))
}
func MemcpyAsync(dst, dmax, src, count uint64, kind int32, stream uint64) int {
	return int(C.sa_rt_memcpy_async(u(dst), C.uint64_t(dmax), u(src), C.uint64_t(count), C.int32_t(kind), u(stream)))
}
func Memset(p, maxc uint64, value int32, count uint64) int {
	return int(C.sa_rt_memset(u(p), C.uint64_t(maxc), C.int32_t(value), C.uint64_t(count)))
}
func MemsetAsync(p, maxc uint64, value int32, count, stream uint64) int {
	return int(C.sa_rt_memset_async(u(p), C.uint64_t(maxc), C.int32_t(value), C.uint64_t(count), u(stream)))
}
func SyncStream(s uint64) int { return int(C.sa_rt_sync_stream(u(s))) }
func SyncStreamTimeout(s uint64, ms int32) int {
	return int(C.sa_rt_sync_stream_timeout(u(s), C.int32_t(ms)))
}
func SyncEvent(e uint64) int { return int(C.sa_rt_sync_event(u(e))) }
func CreateStream() (uint64, int) {
	var p C.uintptr_t
	r := C.sa_rt_create_stream(&p)
	return uint64(p), int(r)
}
func DestroyStream(s uint64) int { return int(C.sa_rt_destroy_stream(u(s))) }
func CreateEvent() (uint64, int) {
	var p C.uintptr_t
	r := C.sa_rt_create_event(&p)
	return uint64(p), int(r)
}
func DestroyEvent(e uint64) int       { return int(C.sa_rt_destroy_event(u(e))) }
func RecordEvent(e, s uint64) int     { return int(C.sa_rt_record_event(u(e), u(s))) }
func StreamWaitEvent(s, e uint64) int { return int(C.sa_rt_stream_wait_event(u(s), u(e))) }
func DestroyTensor(t uint64) int      { return int(C.sa_rt_destroy_tensor(u(t))) }

// Tensor1D describes n elements of dtype at data+offset elements over a storage of storageElems
// elements; 0 when the runtime refused it.
func Tensor1D(data uint64, n int64, dtype int32, offset, storageElems int64) uint64 {
	return uint64(C.sa_rt_tensor_1d(u(data), C.int64_t(n), C.int32_t(dtype), C.int64_t(offset),
		C.int64_t(storageElems)))
}

// Ops for Op.
const (
	OpMul         = 0
	OpAdd         = 1 // alpha 1
	OpInplaceCopy = 2 // a <- b
)

// Op runs GetWorkspaceSize and the launch of op on stream; launched reports whether the failure (if any)
// came from the launch phase.
func Op(op int, a, b, out, stream uint64) (code int, launched bool) {
	var stage C.int
	r := C.sa_rt_op(C.int(op), u(a), u(b), u(out), u(stream), &stage)
	return int(r), stage == 1
}

// HostScratch allocates n zeroed bytes outside Go's heap for a scratch host buffer.
func HostScratch(n uint64) uint64 { return uint64(C.sa_rt_scratch(C.uint64_t(n))) }

// FreeScratch frees a HostScratch buffer.
func FreeScratch(p uint64) { C.sa_rt_scratch_free(u(p)) }
