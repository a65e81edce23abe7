package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"
)

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func wantPlace(t *testing.T, tr *Tracker, addr, n uint64, write bool, want Place) {
	t.Helper()
	got, err := tr.Place(addr, n, write)
	if got != want {
		t.Fatalf("Place(%#x, %d, write %v) = %d (%v), want %d", addr, n, write, got, err, want)
	}
	if want == Nowhere && (!errors.Is(err, ErrInvalid) || !errors.Is(err, ErrPointer)) {
		t.Fatalf("Place(%#x, %d): error %v is not ErrInvalid and ErrPointer", addr, n, err)
	}
	if want != Nowhere && err != nil {
		t.Fatalf("Place(%#x, %d): %v", addr, n, err)
	}
}

// A device range must lie in one allocation; adjacent VMM mappings of one reservation count as one, mapped
// or not address space never does, and adjacent plain allocations are two storages.
func TestPlaceDevice(t *testing.T) {
	tr := New()
	tr.Alloc(0x10000, 0x1000)
	tr.Alloc(0x11000, 0x1000) // adjacent, not VMM
	tr.Reserve(0x100000, 0x400000)
	tr.Alloc(0x100000, 0x100000) // two mappings, then unmapped space
	tr.Alloc(0x200000, 0x100000)
	wantPlace(t, tr, 0x10000, 0x1000, false, OnDevice)
	wantPlace(t, tr, 0x10800, 0x800, true, OnDevice)
	wantPlace(t, tr, 0x10000, 0x1001, false, Nowhere)     // past the end, into the next allocation
	wantPlace(t, tr, 0x100000, 0x200000, false, OnDevice) // across both mappings
	wantPlace(t, tr, 0x180000, 0x100000, false, OnDevice)
	wantPlace(t, tr, 0x200000, 0x100001, false, Nowhere) // into the unmapped part
	wantPlace(t, tr, 0x300000, 0x1000, false, Nowhere)   // reserved, not mapped
	wantPlace(t, tr, 0xf000, 0x2000, false, Nowhere)     // runs into an allocation
	wantPlace(t, tr, 0, 1, false, Nowhere)
	wantPlace(t, tr, 0x10000, 0, false, Nowhere)
	wantPlace(t, tr, ^uint64(0)-10, 100, false, Nowhere) // wraps
	if !tr.Reserved(0x300000) || tr.Reserved(0x500000) {
		t.Fatal("Reserved disagrees with Reserve")
	}
	tr.Unreserve(0x100000)
	if tr.Reserved(0x300000) {
		t.Fatal("Unreserve kept the reservation")
	}
	wantPlace(t, tr, 0x100000, 0x200000, false, Nowhere) // no longer one reservation's mappings
	wantPlace(t, tr, 0x300000, 0x1000, false, Nowhere)   // no host maps: nothing is host memory
}

// Host memory is what the process mapped readable (writable, to copy into), read again on a miss.
func TestPlaceHost(t *testing.T) {
	tr := New()
	hm := NewHostMaps(ProcMaps)
	tr.CheckPointers(hm)
	buf := make([]byte, 1<<16)
	wantPlace(t, tr, addrOf(buf), uint64(len(buf)), true, OnHost)
	wantPlace(t, tr, 0x12345678, 4096, false, Nowhere)
	// Two read-only pages, then one that cannot be read (freed device memory of the emulator looks so).
	m, err := syscall.Mmap(-1, 0, 3*4096, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if err := syscall.Mprotect(m[:8192], syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	ro := m[:8192]
	reads := hm.Reads()
	wantPlace(t, tr, addrOf(ro), 8192, false, OnHost) // a mapping made after the last read: found on a miss
	if hm.Reads() == reads {
		t.Fatal("a miss did not read the maps again")
	}
	wantPlace(t, tr, addrOf(ro), 8192, true, Nowhere) // read-only: nothing may be copied into it
	wantPlace(t, tr, addrOf(ro), 8193, false, Nowhere)
	wantPlace(t, tr, addrOf(m[8192:]), 1, false, Nowhere)
	// Device memory is never host memory, even where the process can read it.
	tr.Alloc(addrOf(buf)+4096, 4096)
	wantPlace(t, tr, addrOf(buf), 8192, false, Nowhere)
	wantPlace(t, tr, addrOf(buf)+4096, 4096, false, OnDevice)
	tr.Reserve(addrOf(buf)+16384, 4096)
	wantPlace(t, tr, addrOf(buf)+16384, 16, false, Nowhere)
	if end, ok := hm.ReadableEnd(addrOf(buf), 100); !ok || end != addrOf(buf)+100 {
		t.Fatalf("ReadableEnd = %#x %v, want %#x", end, ok, addrOf(buf)+100)
	}
	if end, ok := hm.ReadableEnd(addrOf(ro), 1<<20); !ok || end != addrOf(ro)+8192 {
		t.Fatalf("ReadableEnd of the read-only mapping = %#x %v", end, ok)
	}
	if _, ok := hm.ReadableEnd(0x12345678, 100); ok {
		t.Fatal("ReadableEnd of an unmapped address")
	}
}

func TestParseMaps(t *testing.T) {
	in := "1000-2000 r--p 00000000 fe:00 1 /usr/bin/x\n" +
		"2000-3000 rw-p 00000000 00:00 0 \n" +
		"3000-4000 ---p 00000000 00:00 0\n" +
		"4000-5000 r--p 00000000 00:00 0 [vvar]\n" +
		"5000-6000 r--p 00000000 00:00 0 [vvar_vclock]\n" +
		"6000-7000 rw-s 00000000 00:05 9 /dev/davinci0\n" +
		"7000-8000 rw-s 00000000 00:05 9 /dev/shm/buf with spaces\n" +
		"8000-9000 r-xp 00000000 00:00 0 [vdso]\n" +
		"garbage\n" +
		"9000-9000 r--p 00000000 00:00 0\n" +
		"a000-b000 rw-p 00000000 00:00 0 [stack]"
	got := parseMaps([]byte(in), nil)
	want := []span{{0x1000, 0x2000, 0}, {0x2000, 0x3000, 1}, {0x7000, 0x8000, 1}, {0x8000, 0x9000, 0},
		{0xa000, 0xb000, 1}}
	if len(got) != len(want) {
		t.Fatalf("parseMaps = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("parseMaps = %v, want %v", got, want)
		}
	}
	path := filepath.Join(t.TempDir(), "maps")
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	hm := NewHostMaps(path)
	if !hm.Covers(0x1800, 0x1000, false) || hm.Covers(0x1800, 0x1000, true) || !hm.Covers(0x2000, 0x1000, true) {
		t.Fatal("adjacent mappings: read across, write only in the writable one")
	}
	if hm.Covers(0x6000, 16, false) || hm.Covers(0x4000, 16, false) || hm.Covers(0x2800, 0x1000, false) {
		t.Fatal("a device file, [vvar] or unreadable memory passed")
	}
	if NewHostMaps(filepath.Join(t.TempDir(), "none")).Available() {
		t.Fatal("a missing maps file is available")
	}
}

// With CheckPointers a save or a restored base outside memory is EINVAL and changes nothing; the order
// rule is checked first.
func TestStrictSaveAndRestore(t *testing.T) {
	tr := New()
	tr.CheckPointers(NewHostMaps(ProcMaps))
	tr.Alloc(0x7000_0000_0000, 1<<20)
	if _, err := tr.Save("g", 0x12345678, 4096, 0); !errors.Is(err, ErrOrder) {
		t.Fatalf("save outside a region: %v, want ErrOrder", err)
	}
	if err := tr.EnterRegion("g", nil, 0); err != nil {
		t.Fatal(err)
	}
	bad := []struct{ p, n uint64 }{{0x12345678, 4096}, {0x7000_0000_0000, 1<<20 + 1}, {0x7000_0000_0000 - 8, 16}}
	for _, c := range bad {
		if _, err := tr.Save("g", c.p, c.n, 0); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrPointer) {
			t.Fatalf("save of %#x (%d bytes): %v, want ErrInvalid and ErrPointer", c.p, c.n, err)
		}
	}
	s, err := tr.Save("g", 0x7000_0000_0000, 1<<20, 0)
	if err != nil || s.Index != 0 {
		t.Fatalf("legit save after refused ones: %+v %v (index must be 0: refused saves leave nothing)", s, err)
	}
	if _, err := tr.ExitRegion("g", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Released(s.Storage, "g"); err != nil {
		t.Fatal(err)
	}
	tr.Free(0x7000_0000_0000)
	if err := tr.Restored(s.Storage, 0x12345678); !errors.Is(err, ErrPointer) {
		t.Fatalf("restore to garbage: %v, want ErrPointer", err)
	}
	tr.Alloc(0x7100_0000_0000, 1<<19)
	if err := tr.Restored(s.Storage, 0x7100_0000_0000); !errors.Is(err, ErrPointer) {
		t.Fatalf("restore into an allocation too small: %v, want ErrPointer", err)
	}
	if info, _ := tr.Storage(s.Storage); !info.Released {
		t.Fatal("a refused restore changed the storage")
	}
	tr.Alloc(0x7200_0000_0000, 1<<20)
	if err := tr.Restored(s.Storage, 0x7200_0000_0000); err != nil {
		t.Fatalf("restore to a new allocation: %v", err)
	}
	if b, ok := tr.Base(s.Storage); !ok || b != 0x7200_0000_0000 {
		t.Fatalf("base after restore: %#x %v", b, ok)
	}
}

// An index older than the memory must not vouch for it: a range protected since the last read is found by
// reading through the kernel. Read stops before the first page it cannot read.
func TestHostMapsStaleAndRead(t *testing.T) {
	hm := NewHostMaps(ProcMaps)
	m, err := syscall.Mmap(-1, 0, 2*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	copy(m[4096-3:], "ab\x00")
	if !hm.Covers(addrOf(m), 8192, true) {
		t.Fatal("a fresh mapping is not covered")
	}
	if err := syscall.Mprotect(m[4096:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if hm.Covers(addrOf(m), 8192, false) {
		t.Fatal("a range protected since the index was read is still covered")
	}
	if !hm.Covers(addrOf(m), 4096, false) {
		t.Fatal("the readable page is no longer covered")
	}
	buf := make([]byte, 100)
	n, exact := hm.Read(buf, addrOf(m)+4096-10)
	if !exact {
		t.Skip("process_vm_readv refused here: only the index speaks")
	}
	if n != 10 || string(buf[7:10]) != "ab\x00" {
		t.Fatalf("Read across into a protected page: %d bytes %q, want 10 ending in ab\\0", n, buf[:n])
	}
	if n, _ := hm.Read(buf, 0x12345678); n != 0 {
		t.Fatalf("Read of an unmapped address: %d bytes", n)
	}
}
