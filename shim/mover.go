// mover.go owns what the offload engine needs from the C side: the framework's registered storage ops
// (called through small C helpers, since Go cannot call a C function pointer) and the runtime mover,
// which copies through the REAL aclrtMallocHost / aclrtMemcpyAsync / aclrtSynchronizeStream on a stream
// of its own, so the agent's copies are never intercepted or traced as the application's.
package main

/*
#include "sa_go.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"swapagent/agent"
	"swapagent/offload"
)

// cStorageOps calls the release/restore callbacks of swapagent_set_storage_ops.
type cStorageOps struct{ release, restore, ctx uintptr }

func (o cStorageOps) Release(handle int64, ptr, nbytes uint64) error {
	if rc := C.sa_call_release(C.uintptr_t(o.release), C.uintptr_t(o.ctx), C.int64_t(handle), C.uintptr_t(ptr),
		C.size_t(nbytes)); rc != 0 {
		return fmt.Errorf("%w: release of handle %d returned %d", offload.ErrRuntime, handle, int(rc))
	}
	return nil
}

func (o cStorageOps) Restore(handle int64, nbytes uint64) (uint64, error) {
	base := uint64(C.sa_call_restore(C.uintptr_t(o.restore), C.uintptr_t(o.ctx), C.int64_t(handle), C.size_t(nbytes)))
	if base == 0 {
		return 0, fmt.Errorf("%w: restore of handle %d (%d bytes) returned 0", offload.ErrRuntime, handle, nbytes)
	}
	return base, nil
}

// ACL memcpy kinds (acl_rt.h).
const (
	memcpyHostToDevice = 1
	memcpyDeviceToHost = 2
)

// runtimeMover is offload.Mover over the real runtime: pinned host buffers, asynchronous copies on the
// mover's own stream, and Wait as a stream synchronisation (a Copy token is never 0 for a launched copy).
type runtimeMover struct {
	mu     sync.Mutex
	stream uintptr
}

var _ offload.Mover = (*runtimeMover)(nil)

func aclErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s returned %d", offload.ErrRuntime, op, int(rc))
}

func (m *runtimeMover) streamFor() (uintptr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream == 0 {
		var s C.uintptr_t
		if err := aclErr("aclrtCreateStream", C.sa_real_create_stream(&s)); err != nil {
			return 0, err
		}
		m.stream = uintptr(s)
	}
	return m.stream, nil
}

func (m *runtimeMover) AllocHost(n uint64) (offload.HostBuf, error) {
	var p C.uintptr_t
	if err := aclErr("aclrtMallocHost", C.sa_real_malloc_host(&p, C.size_t(n))); err != nil {
		return offload.HostBuf{}, err
	}
	return offload.HostBuf{Addr: uint64(p), Size: n}, nil
}

func (m *runtimeMover) FreeHost(b offload.HostBuf) error {
	return aclErr("aclrtFreeHost", C.sa_real_free_host(C.uintptr_t(b.Addr)))
}

func (m *runtimeMover) copy(dst, src, n uint64, kind int) (offload.Copy, error) {
	s, err := m.streamFor()
	if err != nil {
		return 0, err
	}
	if err := aclErr("aclrtMemcpyAsync", C.sa_real_memcpy_async(C.uintptr_t(dst), C.size_t(n), C.uintptr_t(src),
		C.size_t(n), C.int(kind), C.uintptr_t(s))); err != nil {
		return 0, err
	}
	return offload.Copy(1), nil
}

func (m *runtimeMover) CopyOut(dstHost, srcDevice, n uint64) (offload.Copy, error) {
	return m.copy(dstHost, srcDevice, n, memcpyDeviceToHost)
}

func (m *runtimeMover) CopyIn(dstDevice, srcHost, n uint64) (offload.Copy, error) {
	return m.copy(dstDevice, srcHost, n, memcpyHostToDevice)
}

func (m *runtimeMover) Wait(c offload.Copy) error {
	if c == 0 {
		return nil
	}
	s, err := m.streamFor()
	if err != nil {
		return err
	}
	return aclErr("aclrtSynchronizeStream", C.sa_real_sync_stream(C.uintptr_t(s)))
}

// hybridMover copies a storage with the runtime when its address is device memory the runtime handed
// out, and with memcpy when it is host memory: CPU tensors of companions run with include_cpu, and dry
// runs in processes that never load a runtime. Host buffers are pinned when a runtime is present.
type hybridMover struct {
	rt       runtimeMover
	mem      *offload.MemcpyMover
	isDevice func(addr uint64) bool
	goBufs   sync.Map // Addr -> true for buffers the memcpy mover owns
}

var _ offload.Mover = (*hybridMover)(nil)

func (m *hybridMover) AllocHost(n uint64) (offload.HostBuf, error) {
	if b, err := m.rt.AllocHost(n); err == nil {
		return b, nil
	}
	b, err := m.mem.AllocHost(n)
	if err == nil {
		m.goBufs.Store(b.Addr, true)
	}
	return b, err
}

func (m *hybridMover) FreeHost(b offload.HostBuf) error {
	if _, ok := m.goBufs.LoadAndDelete(b.Addr); ok {
		return m.mem.FreeHost(b)
	}
	return m.rt.FreeHost(b)
}

func (m *hybridMover) CopyOut(dstHost, src, n uint64) (offload.Copy, error) {
	if m.isDevice(src) {
		return m.rt.CopyOut(dstHost, src, n)
	}
	return m.mem.CopyOut(dstHost, src, n)
}

func (m *hybridMover) CopyIn(dst, srcHost, n uint64) (offload.Copy, error) {
	if m.isDevice(dst) {
		return m.rt.CopyIn(dst, srcHost, n)
	}
	return m.mem.CopyIn(dst, srcHost, n)
}

// Wait: memcpy copies are complete when they return (token 0); runtime copies sync the mover's stream.
func (m *hybridMover) Wait(c offload.Copy) error { return m.rt.Wait(c) }

// wireEngine starts the offload engine with the hybrid mover.
func wireEngine(a *agent.Agent) {
	a.StartEngine(&hybridMover{mem: offload.NewMemcpyMover(), isDevice: a.IsDevice})
}
