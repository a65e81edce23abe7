// hostmaps.go owns the proof that host memory is readable: an index of the readable mappings of
// /proc/self/maps, read again on a miss (mappings come and go; a correct caller rarely misses, and a miss
// is what a bad pointer costs), and reads through the kernel (process_vm_readv on this very process), which
// answer EFAULT where a plain load would fault. An index can be older than the memory (a range freed or
// protected since it was read), so a hit is confirmed by reading the range's first and last byte that way.
// A host storage (a CPU tensor of a companion run with include_cpu, a test, a dry run) and the arrays and
// names a caller passes the ABI are proven here before anything touches them.
package tracker

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ProcMaps is the process's own mapping list.
const ProcMaps = "/proc/self/maps"

// HostMaps is an index of the readable mappings of one process. Safe for concurrent use.
type HostMaps struct {
	path  string
	mu    sync.Mutex
	m     spans // readable mappings; id 1 when also writable
	avail bool  // the file could be read
	stale bool  // memory went away since the list was read (Invalidate): read it again before trusting it
	self  bool  // the list is this process's: a hit can be confirmed by reading
	reads uint64
	buf   []byte
}

// NewHostMaps returns an index of the mappings listed in path (ProcMaps for this process); nothing is
// read before the first lookup.
func NewHostMaps(path string) *HostMaps { return &HostMaps{path: path, self: path == ProcMaps} }

// Covers reports whether [addr, addr+n) lies in readable mappings (writable too when write), adjacent
// mappings counting as one: the kernel splits a buffer's memory for reasons that are not the buffer's.
func (h *HostMaps) Covers(addr, n uint64, write bool) bool {
	if addr == 0 || n == 0 || addr > ^uint64(0)-n {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads == 0 || !h.coversLocked(addr, addr+n, write) {
		h.refreshLocked()
		if !h.coversLocked(addr, addr+n, write) {
			return false
		}
	}
	if !h.self {
		return true
	}
	// The index may be older than the memory: its first and last byte must still read.
	var two [2]byte
	if got, exact := readSelf(two[:], []uint64{addr, addr + n - 1}); exact && got < 2 {
		h.refreshLocked()
		return false
	}
	return true
}

// Read copies [addr, addr+len(dst)) into dst through the kernel, page by page: it stops before the first
// page that cannot be read and returns the bytes copied. exact is false when the kernel refuses the call
// itself (a seccomp filter): nothing was read, and only the index can speak.
func (h *HostMaps) Read(dst []byte, addr uint64) (n int, exact bool) {
	if len(dst) == 0 {
		return 0, true
	}
	if addr == 0 || addr > ^uint64(0)-uint64(len(dst)) {
		return 0, true
	}
	page := uint64(os.Getpagesize())
	var at []uint64
	var lens []int
	for off := uint64(0); off < uint64(len(dst)); {
		c := min(page-(addr+off)%page, uint64(len(dst))-off)
		at, lens = append(at, addr+off), append(lens, int(c))
		off += c
	}
	return readPieces(dst, at, lens)
}

// vm is 1 while process_vm_readv works on this process, 2 once the kernel refused it.
var vm atomic.Int32

// selfPID is this process's ID, read once: a system call per read would cost as much as the read. The Go
// side never runs in a forked child (the C side refuses every call there), so it cannot change.
var selfPID = os.Getpid()

// Indexed reports whether [addr, addr+n) lies in readable mappings (writable too when write) by the index
// alone, read again on a miss and after Invalidate: no system call when it is there. The index may still be
// older than memory the process unmapped by itself, so this is no proof that a load would not fault; it is
// what a save is checked against, the copy of the storage being proven with Covers (and made through the
// kernel) when it comes.
func (h *HostMaps) Indexed(addr, n uint64, write bool) bool {
	if addr == 0 || n == 0 || addr > ^uint64(0)-n {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads == 0 || h.stale || !h.coversLocked(addr, addr+n, write) {
		h.refreshLocked()
		return h.coversLocked(addr, addr+n, write)
	}
	return true
}

// Write copies src to [addr, addr+len(src)) through the kernel (process_vm_writev), so memory that cannot
// be written is an error rather than a fault: it returns whether every byte was written, and exact false
// when the kernel refuses the call itself (then nothing was written and only the index can speak).
func (h *HostMaps) Write(src []byte, addr uint64) (done, exact bool) {
	if len(src) == 0 {
		return true, true
	}
	if addr == 0 || addr > ^uint64(0)-uint64(len(src)) || vm.Load() == 2 {
		return false, vm.Load() != 2
	}
	local := []unix.Iovec{{Base: &src[0]}}
	local[0].SetLen(len(src))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(src)}}
	n, err := unix.ProcessVMWritev(selfPID, local, remote, 0)
	if err != nil {
		if errors.Is(err, unix.EFAULT) || errors.Is(err, unix.ENOMEM) {
			return false, true
		}
		return false, false
	}
	return n == len(src), true
}

// readSelf reads one byte at each of at into dst.
func readSelf(dst []byte, at []uint64) (int, bool) {
	lens := make([]int, len(at))
	for i := range lens {
		lens[i] = 1
	}
	return readPieces(dst, at, lens)
}

// ReadPieces copies the pieces (address at[i], length lens[i]) into dst, in order and packed, in one read
// through the kernel (up to 1024 pieces a call): it stops before the first piece that cannot be read whole
// and returns the bytes copied, a sum of whole pieces. exact is false when the kernel refuses the call
// itself (nothing was read). Many C arguments cost one system call this way instead of one each.
func (h *HostMaps) ReadPieces(dst []byte, at []uint64, lens []int) (n int, exact bool) {
	return readPieces(dst, at, lens)
}

// readPieces reads the pieces (address, length) into dst, in order and packed, stopping at the first piece
// that cannot be read whole.
func readPieces(dst []byte, at []uint64, lens []int) (int, bool) {
	if vm.Load() == 2 {
		return 0, false
	}
	const maxIov = 1024 // IOV_MAX
	done := 0
	for i := 0; i < len(at); i += maxIov {
		j := min(i+maxIov, len(at))
		local := make([]unix.Iovec, 0, j-i)
		remote := make([]unix.RemoteIovec, 0, j-i)
		want := 0
		for k := i; k < j; k++ {
			iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&dst[done+want]))}
			iov.SetLen(lens[k])
			local = append(local, iov)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(at[k]), Len: lens[k]})
			want += lens[k]
		}
		n, err := unix.ProcessVMReadv(selfPID, local, remote, 0)
		if err != nil {
			if errors.Is(err, unix.EFAULT) || errors.Is(err, unix.ENOMEM) {
				vm.Store(1)
				return done, true
			}
			vm.Store(2)
			return 0, false
		}
		vm.Store(1)
		done += n
		if n < want {
			return done, true
		}
	}
	return done, true
}

// ReadableEnd returns the end of the run of readable mappings holding addr, looking no further than
// addr+max (for a C string of at most max bytes). The list is read again on a miss; a caller that finds
// the run too short may Refresh and ask again.
func (h *HostMaps) ReadableEnd(addr, max uint64) (uint64, bool) {
	if addr == 0 {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if end, ok := h.endLocked(addr, max); ok && h.reads > 0 {
		return end, true
	}
	h.refreshLocked()
	return h.endLocked(addr, max)
}

// Invalidate says that memory went away (the runtime freed device memory, which an emulator keeps in host
// mappings): the next lookup reads the list again.
func (h *HostMaps) Invalidate() {
	h.mu.Lock()
	h.stale = true
	h.mu.Unlock()
}

// Refresh reads the list again.
func (h *HostMaps) Refresh() {
	h.mu.Lock()
	h.refreshLocked()
	h.mu.Unlock()
}

// Available reports whether the mapping list could be read (false without /proc): nothing is proven then.
func (h *HostMaps) Available() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads == 0 {
		h.refreshLocked()
	}
	return h.avail
}

// Reads returns how many times the list was read.
func (h *HostMaps) Reads() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
}

func (h *HostMaps) coversLocked(lo, hi uint64, write bool) bool {
	i, ok := h.m.find(lo)
	if !ok {
		return false
	}
	for {
		sp := h.m.s[i]
		if write && sp.id != 1 {
			return false
		}
		if hi <= sp.end {
			return true
		}
		if i++; i == len(h.m.s) || h.m.s[i].base != sp.end {
			return false
		}
	}
}

func (h *HostMaps) endLocked(addr, max uint64) (uint64, bool) {
	i, ok := h.m.find(addr)
	if !ok {
		return 0, false
	}
	limit := spanEnd(addr, max)
	end := h.m.s[i].end
	for end < limit && i+1 < len(h.m.s) && h.m.s[i+1].base == end {
		i++
		end = h.m.s[i].end
	}
	return min(end, limit), true
}

func (h *HostMaps) refreshLocked() {
	h.reads++
	h.stale = false
	f, err := os.Open(h.path)
	if err != nil {
		h.avail, h.m.s = false, h.m.s[:0]
		return
	}
	defer f.Close()
	h.buf = h.buf[:0]
	for {
		if len(h.buf) == cap(h.buf) {
			h.buf = append(h.buf, 0)[:len(h.buf)]
		}
		n, err := f.Read(h.buf[len(h.buf):cap(h.buf)])
		h.buf = h.buf[:len(h.buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			h.avail, h.m.s = false, h.m.s[:0]
			return
		}
	}
	h.avail = true
	h.m.s = parseMaps(h.buf, h.m.s[:0])
}

// parseMaps appends the readable mappings of a maps listing ("lo-hi perms offset dev inode path"), sorted
// as the kernel lists them. Left out: the vDSO's data pages ([vvar*], parts of which fault when read) and
// device files other than /dev/zero and /dev/shm (a driver's registers, such as an NPU's, are no memory).
func parseMaps(b []byte, out []span) []span {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		lo, rest, ok := hexField(line, '-')
		if !ok {
			continue
		}
		hi, rest, ok := hexField(rest, ' ')
		if !ok || hi <= lo || len(rest) < 4 || rest[0] != 'r' {
			continue
		}
		var w uint64
		if rest[1] == 'w' {
			w = 1
		}
		if path := mapsPath(rest); bytes.HasPrefix(path, []byte("[vvar")) ||
			(bytes.HasPrefix(path, []byte("/dev/")) && !bytes.HasPrefix(path, []byte("/dev/shm/")) &&
				!bytes.HasPrefix(path, []byte("/dev/zero"))) {
			continue
		}
		out = append(out, span{base: lo, end: hi, id: w})
	}
	return out
}

func hexField(b []byte, sep byte) (uint64, []byte, bool) {
	var v uint64
	for i, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c == sep && i > 0:
			return v, b[i+1:], true
		default:
			return 0, nil, false
		}
	}
	return 0, nil, false
}

// mapsPath returns the path field: what follows the fourth space-separated field after perms.
func mapsPath(rest []byte) []byte {
	for k := 0; k < 4; k++ { // perms, offset, dev, inode
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return nil
		}
		rest = bytes.TrimLeft(rest[i:], " ")
	}
	return rest
}
