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
	"runtime/debug"
	"sync"

	"swapagent/agent"
	"swapagent/offload"
	"swapagent/tracker"
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
// mover's own stream, each bracketed by two events (its token is the end event's sequence number), and
// the ordering against the job's streams done with events on the device (docs/design.md, "Stream
// ordering"). Events are pooled: one is recorded again only once the host knows its last record completed.
type runtimeMover struct {
	mu     sync.Mutex
	stream uintptr
	idle   []uintptr // events free for reuse
	fences []uintptr // events After recorded on the job's streams, waited for by the copies to come
	seq    uint64    // tokens handed out
	done   uint64    // every copy up to this token completed
	flight []flight  // copies not known complete, in launch order
	stalls []stall   // waits put on the job's streams, not measured yet
	tl     offload.Timeline
	// lastEnd is the end event of the latest copy measured, kept from the pool while the copy after it
	// may still be measured from it (copies retire in launch order, so that copy is the next one retired).
	lastEnd uintptr
}

type flight struct {
	seq        uint64
	n          uint64 // bytes
	start, end uintptr
	fences     []uintptr // complete once this copy is: it waited for them
	// queued: launched while the copy before it was still running on the stream, with nothing else to
	// wait for, so the stream is busy with it from that copy's end (the gap between two copies, which a
	// runtime spends on each, is link time the job waits for).
	queued bool
}

// stall brackets one aclrtStreamWaitEvent on a job's stream: the time between the two records is what
// that stream waited for the copy.
type stall struct{ before, after uintptr }

// maxStalls bounds the unmeasured waits kept; older ones are dropped unmeasured.
const maxStalls = 4096

var _ offload.Mover = (*runtimeMover)(nil)

func aclErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s returned %d", offload.ErrRuntime, op, int(rc))
}

// streamLocked returns the mover's stream, creating it on first use.
func (m *runtimeMover) streamLocked() (uintptr, error) {
	if m.stream == 0 {
		var s C.uintptr_t
		if err := aclErr("aclrtCreateStream", C.sa_real_create_stream(&s)); err != nil {
			return 0, err
		}
		m.stream = uintptr(s)
	}
	return m.stream, nil
}

func (m *runtimeMover) eventLocked() (uintptr, error) {
	if n := len(m.idle); n > 0 {
		ev := m.idle[n-1]
		m.idle = m.idle[:n-1]
		return ev, nil
	}
	var ev C.uintptr_t
	if err := aclErr("aclrtCreateEvent", C.sa_real_create_event(&ev)); err != nil {
		return 0, err
	}
	return uintptr(ev), nil
}

// recordLocked records a pooled event on stream.
func (m *runtimeMover) recordLocked(stream uintptr) (uintptr, error) {
	ev, err := m.eventLocked()
	if err != nil {
		return 0, err
	}
	if err := aclErr("aclrtRecordEvent", C.sa_real_record_event(C.uintptr_t(ev), C.uintptr_t(stream))); err != nil {
		m.idle = append(m.idle, ev)
		return 0, err
	}
	return ev, nil
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

// After records an event on each of streams and makes the mover's stream wait for it.
func (m *runtimeMover) After(streams []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	own, err := m.streamLocked()
	if err != nil {
		return err
	}
	for _, s := range streams {
		ev, err := m.recordLocked(uintptr(s))
		if err != nil {
			return err
		}
		err = aclErr("aclrtStreamWaitEvent", C.sa_real_stream_wait_event(C.uintptr_t(own), C.uintptr_t(ev)))
		// Not recorded again before the host knows this record completed: a runtime need not keep apart
		// the records of one event pending on two streams.
		m.fences = append(m.fences, ev)
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *runtimeMover) copy(dst, src, n uint64, kind int) (offload.Copy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.streamLocked()
	if err != nil {
		return 0, err
	}
	queued := false
	if k := len(m.flight); k > 0 && len(m.fences) == 0 {
		queued = C.sa_real_event_done(C.uintptr_t(m.flight[k-1].end)) == 0
	}
	start, err := m.recordLocked(s)
	if err != nil {
		return 0, err
	}
	if err := aclErr("aclrtMemcpyAsync", C.sa_real_memcpy_async(C.uintptr_t(dst), C.size_t(n), C.uintptr_t(src),
		C.size_t(n), C.int(kind), C.uintptr_t(s))); err != nil {
		m.idle = append(m.idle, start)
		return 0, err
	}
	end, err := m.recordLocked(s)
	if err != nil {
		// Without its own event the copy completes with the stream: wait for it here.
		m.idle = append(m.idle, start)
		return 0, aclErr("aclrtSynchronizeStream", C.sa_real_sync_stream(C.uintptr_t(s)))
	}
	m.seq++
	m.flight = append(m.flight, flight{seq: m.seq, n: n, start: start, end: end, fences: m.fences, queued: queued})
	m.fences = nil
	return offload.Copy(m.seq), nil
}

func (m *runtimeMover) CopyOut(dstHost, srcDevice, n uint64) (offload.Copy, error) {
	return m.copy(dstHost, srcDevice, n, memcpyDeviceToHost)
}

func (m *runtimeMover) CopyIn(dstDevice, srcHost, n uint64) (offload.Copy, error) {
	return m.copy(dstDevice, srcHost, n, memcpyHostToDevice)
}

// findLocked returns the in-flight copy of token c, or nil when it is known complete.
func (m *runtimeMover) findLocked(c offload.Copy) *flight {
	if uint64(c) <= m.done {
		return nil
	}
	for i := range m.flight {
		if m.flight[i].seq == uint64(c) {
			return &m.flight[i]
		}
	}
	return nil
}

// latest returns the token of the latest copy launched.
func (m *runtimeMover) latest() offload.Copy {
	m.mu.Lock()
	defer m.mu.Unlock()
	return offload.Copy(m.seq)
}

// Wait synchronizes on c's end event; copies complete in launch order on the mover's stream, so every
// earlier copy is complete too and their events return to the pool.
func (m *runtimeMover) Wait(c offload.Copy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.findLocked(c)
	if f == nil {
		return nil
	}
	if err := aclErr("aclrtSynchronizeEvent", C.sa_real_sync_event(C.uintptr_t(f.end))); err != nil {
		return err
	}
	m.retireLocked(uint64(c))
	return nil
}

// retireLocked measures and recycles the copies up to token c, which the host knows completed.
func (m *runtimeMover) retireLocked(c uint64) {
	k := 0
	for k < len(m.flight) && m.flight[k].seq <= c {
		f := m.flight[k]
		from := f.start
		if f.queued && m.lastEnd != 0 {
			from = m.lastEnd
		}
		var ns C.uint64_t
		if C.sa_real_event_elapsed_ns(C.uintptr_t(from), C.uintptr_t(f.end), &ns) == 0 {
			m.tl.CopyNS += uint64(ns)
			m.tl.CopyBytes += f.n
		}
		if m.lastEnd != 0 {
			m.idle = append(m.idle, m.lastEnd)
		}
		m.lastEnd = f.end
		m.idle = append(append(m.idle, f.start), f.fences...)
		k++
	}
	m.flight = append(m.flight[:0], m.flight[k:]...)
	m.done = max(m.done, c)
	m.measureStallsLocked()
}

// Before makes each of streams wait for c's end event, bracketed by two records so the stall can be
// measured once the stream passed them.
func (m *runtimeMover) Before(c offload.Copy, streams []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.findLocked(c)
	if f == nil {
		return nil // complete: whatever the host enqueues from now on runs after it
	}
	for _, s := range streams {
		st := uintptr(s)
		before, err := m.recordLocked(st)
		if err != nil {
			return err
		}
		if err := aclErr("aclrtStreamWaitEvent", C.sa_real_stream_wait_event(C.uintptr_t(st), C.uintptr_t(f.end))); err != nil {
			m.idle = append(m.idle, before)
			return err
		}
		after, err := m.recordLocked(st)
		if err != nil {
			m.idle = append(m.idle, before)
			continue // the wait is in place; only its measurement is lost
		}
		if len(m.stalls) >= maxStalls {
			m.stalls = m.stalls[1:]
		}
		m.stalls = append(m.stalls, stall{before, after})
	}
	m.measureStallsLocked()
	return nil
}

// measureStallsLocked adds up the waits whose closing record completed and recycles their events. A
// runtime without aclrtQueryEventStatus leaves the stall unmeasured (0).
func (m *runtimeMover) measureStallsLocked() {
	k := 0
	for _, s := range m.stalls {
		switch C.sa_real_event_done(C.uintptr_t(s.after)) {
		case 0: // not yet
			m.stalls[k] = s
			k++
			continue
		case 1:
			var ns C.uint64_t
			if C.sa_real_event_elapsed_ns(C.uintptr_t(s.before), C.uintptr_t(s.after), &ns) == 0 {
				m.tl.StallNS += uint64(ns)
			}
		}
		m.idle = append(m.idle, s.before, s.after)
	}
	m.stalls = m.stalls[:k]
}

// finish runs before the application's aclFinalize, the mover's last use of the runtime: its copies
// complete and are timed, and the waits it put on the job's streams are measured, which after it nothing
// could answer.
func (m *runtimeMover) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stream != 0 && C.sa_real_sync_stream(C.uintptr_t(m.stream)) == 0 {
		m.retireLocked(m.seq) // every copy completed: each is timed
	}
	for _, s := range m.stalls {
		C.sa_real_sync_event(C.uintptr_t(s.after))
	}
	m.measureStallsLocked()
}

// Timeline returns what the device timeline measured so far.
func (m *runtimeMover) Timeline() offload.Timeline {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measureStallsLocked()
	return m.tl
}

// hybridMover copies a storage with the runtime when the pointer rule places it in device memory the
// runtime handed out, and with memcpy when it places it in host memory: CPU tensors of companions run with
// include_cpu, and dry runs in processes that never load a runtime. Anything else is refused, so a failed
// copy is a failed offload (the storage stays on device), never a fault. Host buffers are pinned when a
// runtime is present.
type hybridMover struct {
	rt  runtimeMover
	mem *offload.MemcpyMover
	// place is the tracker's pointer rule, as far as drained.
	place  func(addr, n uint64, write bool) (tracker.Place, error)
	goBufs sync.Map // Addr -> true for buffers the memcpy mover owns
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
	switch p, err := m.place(src, n, false); p {
	case tracker.OnDevice:
		return m.rt.CopyOut(dstHost, src, n)
	case tracker.OnHost:
		if err := m.settle(); err != nil {
			return 0, err
		}
		return 0, hostCopy(func() error { _, err := m.mem.CopyOut(dstHost, src, n); return err })
	default:
		return 0, fmt.Errorf("%w: copy out refused: %v", offload.ErrRuntime, err)
	}
}

func (m *hybridMover) CopyIn(dst, srcHost, n uint64) (offload.Copy, error) {
	switch p, err := m.place(dst, n, true); p {
	case tracker.OnDevice:
		return m.rt.CopyIn(dst, srcHost, n)
	case tracker.OnHost:
		if err := m.settle(); err != nil {
			return 0, err
		}
		return 0, hostCopy(func() error { _, err := m.mem.CopyIn(dst, srcHost, n); return err })
	default:
		return 0, fmt.Errorf("%w: copy in refused: %v", offload.ErrRuntime, err)
	}
}

// settle waits for every runtime copy launched so far: host buffers are pooled across both paths, and a
// memcpy runs on the host at once, so it must not overwrite a buffer a queued copy back still reads from
// (or one a copy out still fills).
func (m *hybridMover) settle() error {
	return m.rt.Wait(m.rt.latest())
}

// hostCopy runs a memcpy the pointer rule allowed. Should the memory go away between the check and the
// copy (another thread unmapping it), the fault becomes an error here instead of the end of the process.
func hostCopy(cp func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: host copy faulted: %v", offload.ErrRuntime, r)
		}
	}()
	return cp()
}

// Wait: memcpy copies are complete when they return (token 0); runtime copies have events.
func (m *hybridMover) Wait(c offload.Copy) error { return m.rt.Wait(c) }

// After orders the runtime copies; memcpy copies run on the host in program order.
func (m *hybridMover) After(streams []uint64) error { return m.rt.After(streams) }

// Before orders the streams after a runtime copy; a memcpy copy (token 0) is complete already.
func (m *hybridMover) Before(c offload.Copy, streams []uint64) error {
	if c == 0 {
		return nil
	}
	return m.rt.Before(c, streams)
}

// Timeline is the runtime mover's.
func (m *hybridMover) Timeline() offload.Timeline { return m.rt.Timeline() }

// theMover is the engine's mover (nil when the agent is inert), for the application's aclFinalize.
var theMover *hybridMover

// wireEngine starts the offload engine with the hybrid mover.
func wireEngine(a *agent.Agent) {
	theMover = &hybridMover{mem: offload.NewMemcpyMover(), place: a.Tracker().Place}
	a.StartEngine(theMover)
}
