// place.go owns the rule for the pointers a storage may have. Once CheckPointers was called (the agent
// does), Save and Restored apply it, and the mover asks Place again right before each copy: the whole
// range lies inside one live device allocation, or inside adjacent VMM mappings of one reservation, or else
// inside host memory the process has mapped readable (writable too, for a base bytes will be copied into)
// and touching no device memory. Anything else is ErrInvalid (and ErrPointer) and is never copied: a memcpy
// on it kills the process, and no recover can catch that. Host memory is proven through the kernel
// (HostMaps.Covers) where bytes are to be copied (Place, Restored); a save, which touches nothing, checks a
// host range against the index of mappings alone (HostMaps.Indexed: no system call per storage), read again
// on a miss and after the runtime freed device memory.
package tracker

import (
	"errors"
	"fmt"
	"math"
)

// Place says what memory a range is.
type Place uint8

// Places.
const (
	Nowhere  Place = iota // not proven memory: never copied
	OnDevice              // device memory the runtime handed out: copied by the runtime
	OnHost                // host memory the process mapped: copied with memcpy
)

// ErrPointer marks a range refused by the pointer rule; such errors wrap ErrInvalid too.
var ErrPointer = errors.New("not memory the agent may copy")

// CheckPointers makes Save and Restored refuse ranges the pointer rule does not place, with host memory
// proven through h.
func (t *Tracker) CheckPointers(h *HostMaps) {
	t.mu.Lock()
	t.host = h
	t.mu.Unlock()
}

// Place says where [addr, addr+n) is, or why it is nowhere the agent may copy (write: bytes are to be
// copied into it).
func (t *Tracker) Place(addr, n uint64, write bool) (Place, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.placeLocked(addr, n, write)
}

func (t *Tracker) placeLocked(addr, n uint64, write bool) (Place, error) {
	return t.placeWith(addr, n, write, hostAsk)
}

// How placeWith tells host memory: proven (HostMaps.Covers: the index, and the range's first and last
// byte read through the kernel), or by the index alone (HostMaps.Indexed, no system call on a hit).
const (
	hostAsk = iota
	hostIndex
)

func (t *Tracker) placeWith(addr, n uint64, write bool, host int) (Place, error) {
	bad := func(format string, args ...any) (Place, error) {
		return Nowhere, fmt.Errorf("%w: %w: %#x (%d bytes) %s", ErrInvalid, ErrPointer, addr, n,
			fmt.Sprintf(format, args...))
	}
	if addr == 0 || n == 0 {
		return bad("is empty")
	}
	if addr > math.MaxUint64-n {
		return bad("wraps around the address space")
	}
	hi := addr + n
	if i, ok := t.allocs.find(addr); ok {
		if t.deviceRun(i, hi) {
			return OnDevice, nil
		}
		a := t.allocs.s[i]
		return bad("runs past the end of device allocation %#x (%d bytes)", a.base, a.end-a.base)
	}
	if _, ok := t.resv.find(addr); ok {
		return bad("is VMM address space with no memory mapped")
	}
	// Device memory is never host memory, even where a host mapping lies under it (an emulator's).
	if i, j := t.allocs.overlapping(addr, hi); j > i {
		return bad("runs into device allocation %#x", t.allocs.s[i].base)
	}
	if i, j := t.resv.overlapping(addr, hi); j > i {
		return bad("runs into VMM address space %#x", t.resv.s[i].base)
	}
	if t.host != nil && ((host == hostAsk && t.host.Covers(addr, n, write)) ||
		(host == hostIndex && t.host.Indexed(addr, n, write))) {
		return OnHost, nil
	}
	what := "readable"
	if write {
		what = "writable"
	}
	return bad("is neither device memory the runtime handed out nor %s host memory", what)
}

// deviceRun reports whether allocation i holds everything up to hi, alone or, when it is a VMM mapping,
// with the mappings adjacent to it in the same reservation (a tensor of a VMM pool may span several).
func (t *Tracker) deviceRun(i int, hi uint64) bool {
	end := t.allocs.s[i].end
	if hi <= end {
		return true
	}
	r, ok := t.resv.find(t.allocs.s[i].base)
	if !ok || hi > t.resv.s[r].end {
		return false
	}
	for i+1 < len(t.allocs.s) && t.allocs.s[i+1].base == end {
		i++
		end = t.allocs.s[i].end
		if hi <= end {
			return true
		}
	}
	return false
}

// Reserve records VMM address space (aclrtReserveMemAddress): device address space with no memory until
// something is mapped into it, so never host memory.
func (t *Tracker) Reserve(ptr, size uint64) {
	if ptr == 0 {
		return
	}
	t.mu.Lock()
	t.resv.insert(span{base: ptr, end: spanEnd(ptr, size)})
	t.mu.Unlock()
}

// Unreserve forgets the reservation based at ptr (aclrtReleaseMemAddress).
func (t *Tracker) Unreserve(ptr uint64) {
	t.mu.Lock()
	if i, ok := t.resv.find(ptr); ok && t.resv.s[i].base == ptr {
		t.resv.remove(i)
		if t.host != nil {
			t.host.Invalidate()
		}
	}
	t.mu.Unlock()
}

// Reserved reports whether addr lies in VMM address space, mapped or not.
func (t *Tracker) Reserved(addr uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.resv.find(addr)
	return ok
}
