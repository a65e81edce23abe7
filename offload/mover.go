// mover.go owns the Mover interface (how bytes leave and re-enter the device) and the memcpy mover for
// storages that live in host memory.
package offload

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HostBuf is a host buffer from Mover.AllocHost (pinned memory for a runtime mover).
type HostBuf struct {
	Addr uint64
	Size uint64
}

// Copy is a mover's token for an asynchronous copy (for example an event); 0 means already complete.
// Tokens of one mover grow in launch order, and its copies complete in that order.
type Copy uint64

// Mover copies bytes between device storages and host buffers, ordered against the job's streams the
// way CUDA's and torch's record_stream rules order a side stream: with events, on the device. The engine
// calls it with its lock held: a Mover must not call back into the Engine.
type Mover interface {
	AllocHost(n uint64) (HostBuf, error)
	FreeHost(b HostBuf) error
	// After makes the copies launched from now on start only once the work queued so far on streams has
	// run (an event recorded on each stream, waited for by the mover's stream). The host does not block.
	After(streams []uint64) error
	CopyOut(dstHost, srcDevice, n uint64) (Copy, error) // launch device -> host
	CopyIn(dstDevice, srcHost, n uint64) (Copy, error)  // launch host -> device
	// Wait blocks the host until c (and every copy launched before it) completed.
	Wait(c Copy) error
	// Before makes the work queued on streams from now on wait, on the device, for c: the host does not
	// block.
	Before(c Copy, streams []uint64) error
}

// Timeline is what a mover measured on the device: the time its copies took (for a copy queued behind
// another, from that one's end: the gap between them is the link's too), the bytes they moved, and the
// time the job's streams stalled in the waits Before put on them. Copies still in flight are not included.
type Timeline struct {
	CopyNS    uint64 `json:"copy_ns"`
	CopyBytes uint64 `json:"copy_bytes"`
	StallNS   uint64 `json:"stall_ns"`
}

// TimelineMover is a Mover that measures its device timeline.
type TimelineMover interface {
	Timeline() Timeline
}

// MemcpyMover copies with memcpy: for storages whose pointers are real host addresses (CPU tensors with
// include_cpu, tests, dry runs). Its host buffers are Go memory kept alive until FreeHost. Copies are
// synchronous, so Wait returns at once. Where the kernel allows it they go through process_vm_readv and
// process_vm_writev on this process, so a storage whose memory went away is an error, not a fault.
type MemcpyMover struct {
	mu   sync.Mutex
	bufs map[uint64][]byte
}

// NewMemcpyMover returns a MemcpyMover.
func NewMemcpyMover() *MemcpyMover { return &MemcpyMover{bufs: map[uint64][]byte{}} }

// AllocHost allocates n bytes of Go memory.
func (m *MemcpyMover) AllocHost(n uint64) (HostBuf, error) {
	if n == 0 || n > 1<<40 {
		return HostBuf{}, fmt.Errorf("%w: host buffer of %d bytes", ErrInvalid, n)
	}
	b := make([]byte, n)
	a := AddrOf(b)
	m.mu.Lock()
	m.bufs[a] = b
	m.mu.Unlock()
	return HostBuf{Addr: a, Size: n}, nil
}

// FreeHost drops a buffer from AllocHost.
func (m *MemcpyMover) FreeHost(b HostBuf) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bufs[b.Addr]; !ok {
		return fmt.Errorf("%w: %#x is not a host buffer of this mover", ErrInvalid, b.Addr)
	}
	delete(m.bufs, b.Addr)
	return nil
}

// Buffers returns how many host buffers are allocated.
func (m *MemcpyMover) Buffers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bufs)
}

// CopyOut copies n bytes from srcDevice to dstHost.
func (m *MemcpyMover) CopyOut(dstHost, srcDevice, n uint64) (Copy, error) {
	return 0, memcpy(dstHost, srcDevice, n, false)
}

// CopyIn copies n bytes from srcHost to dstDevice.
func (m *MemcpyMover) CopyIn(dstDevice, srcHost, n uint64) (Copy, error) {
	return 0, memcpy(dstDevice, srcHost, n, true)
}

// Wait returns nil: memcpy copies are complete when launched.
func (m *MemcpyMover) Wait(Copy) error { return nil }

// After returns nil: a memcpy runs on the host, in program order.
func (m *MemcpyMover) After([]uint64) error { return nil }

// Before returns nil: a memcpy is complete when it returns.
func (m *MemcpyMover) Before(Copy, []uint64) error { return nil }

// vmRefused is set once the kernel refused process_vm_readv/writev (a seccomp filter): plain copies then.
var vmRefused atomic.Bool

// memcpy copies n bytes; the storage is the destination when in, else the source (the other side is a
// buffer of ours). Through the kernel where it can, so a storage whose memory went away is an error.
func memcpy(dst, src, n uint64, in bool) error {
	if dst == 0 || src == 0 {
		return fmt.Errorf("%w: memcpy with address 0 (dst %#x, src %#x)", ErrRuntime, dst, src)
	}
	if n == 0 {
		return nil
	}
	if !vmRefused.Load() {
		err := kernelCopy(dst, src, n, in)
		if err == nil || !errors.Is(err, errKernelRefused) {
			return err
		}
		vmRefused.Store(true)
	}
	copy(Bytes(dst, n), Bytes(src, n))
	return nil
}

var errKernelRefused = errors.New("process_vm_readv/writev refused")

// kernelCopy copies with process_vm_readv (out) or process_vm_writev (in) on this process, in pieces of
// 1 GiB (a call moves less than 2 GiB).
func kernelCopy(dst, src, n uint64, in bool) error {
	const chunk = 1 << 30
	for off := uint64(0); off < n; {
		c := min(n-off, chunk)
		local, remote := Bytes(dst+off, c), src+off
		if in {
			local, remote = Bytes(src+off, c), dst+off
		}
		iov := []unix.Iovec{{Base: &local[0]}}
		iov[0].SetLen(int(c))
		rio := []unix.RemoteIovec{{Base: uintptr(remote), Len: int(c)}}
		var got int
		var err error
		if in {
			got, err = unix.ProcessVMWritev(os.Getpid(), iov, rio, 0)
		} else {
			got, err = unix.ProcessVMReadv(os.Getpid(), iov, rio, 0)
		}
		switch {
		case err == nil && uint64(got) == c:
			off += c
		case err == nil || errors.Is(err, unix.EFAULT) || errors.Is(err, unix.ENOMEM):
			return fmt.Errorf("%w: memcpy of %d bytes (dst %#x, src %#x): the storage's memory is not there",
				ErrRuntime, n, dst, src)
		case off > 0: // it worked a moment ago
			return fmt.Errorf("%w: memcpy of %d bytes: %v", ErrRuntime, n, err)
		default:
			return errKernelRefused
		}
	}
	return nil
}

// Bytes views n bytes at host address addr. The address is reinterpreted through memory rather than
// converted from an integer, so checkptr (-race) accepts addresses inside Go objects.
func Bytes(addr, n uint64) []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// AddrOf returns the address of b's first byte (0 for an empty slice).
func AddrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}
