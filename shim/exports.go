// exports.go owns the Go implementations behind the control ABI's C wrappers (shim/c/control.c): C
// argument conversion only (a group name or pointer array is read only from memory proven readable; what
// cannot be read is EINVAL, counted by the agent); the agent checks, records and delegates. The wrappers
// have already refused in a forked child, so these never run there.
package main

/*
#include <stddef.h>
#include <stdint.h>

#include "sa_go.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"swapagent/agent"
	"swapagent/trace"
	"swapagent/tracker"
)

// maxPtrs is SWAPAGENT_MAX_PTRS: a larger n is a bad argument, not a reason to copy gigabytes.
const maxPtrs = trace.MaxPtrs

// The C arguments are read through the kernel (tracker.HostMaps.Read), so a bad pointer is EINVAL rather
// than a fault; where the kernel refuses such reads the index of readable mappings decides, and without
// /proc nothing can be proven and C's convention (the caller passes valid memory) is all there is.

// cGroup reads a group name: NULL, memory the process cannot read, and a string that does not end before
// unreadable memory are refused (a reason is returned). A name longer than trace.MaxGroup comes back cut
// at MaxGroup+1 bytes, for the agent's group rule to refuse.
func cGroup(a *agent.Agent, p *C.char) (string, string) {
	if p == nil {
		return "", "NULL group"
	}
	addr := uint64(uintptr(unsafe.Pointer(p)))
	if name, ok := groupNames.at(addr); ok {
		// Proven before at this address: the name stands if its bytes and NUL are still there (read through
		// the kernel, as the first time), which is all the full read would find.
		var small [64]byte
		b := small[:]
		if len(name)+1 > len(b) {
			b = make([]byte, len(name)+1)
		}
		b = b[:len(name)+1]
		if n, exact := a.HostMaps().Read(b, addr); exact && n == len(b) && b[len(name)] == 0 &&
			string(b[:len(name)]) == name {
			return name, ""
		}
	}
	var buf [trace.MaxGroup + 1]byte
	name, bad := cString(a, p, buf[:], "group")
	if bad == "" && len(name) <= trace.MaxGroup {
		groupNames.put(addr, name)
	}
	return name, bad
}

// groupNames remembers the group names read so far by their address (a companion passes the same bytes
// every call), so that a call reads a name's few bytes instead of MaxGroup+1 over two pages and makes no
// string. An entry is only a hint: it is used after the kernel read the same bytes at that address again.
var groupNames nameCache

type nameCache struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (c *nameCache) at(addr uint64) (string, bool) {
	c.mu.Lock()
	name, ok := c.m[addr]
	c.mu.Unlock()
	return name, ok
}

func (c *nameCache) put(addr uint64, name string) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 4096 { // bounded: a caller that passes fresh buffers every time starts it over
		c.m = make(map[uint64]string)
	}
	c.m[addr] = name
	c.mu.Unlock()
}

// cString reads a C string into buf (its length is the longest string accepted, plus one) by cGroup's
// rule; what names the argument in a refusal. A string that fills buf comes back cut at len(buf) bytes,
// for the caller's length rule to refuse.
func cString(a *agent.Agent, p *C.char, buf []byte, what string) (string, string) {
	if p == nil {
		return "", "NULL " + what
	}
	addr := uint64(uintptr(unsafe.Pointer(p)))
	hm := a.HostMaps()
	n, exact := hm.Read(buf, addr)
	for fresh := false; !exact; fresh = true {
		if !hm.Available() {
			return C.GoString(p), ""
		}
		end, ok := hm.ReadableEnd(addr, uint64(len(buf)))
		if !ok {
			break
		}
		n = copy(buf, unsafe.Slice((*byte)(unsafe.Pointer(p)), end-addr))
		if bytes.IndexByte(buf[:n], 0) >= 0 || n == len(buf) || fresh {
			break
		}
		hm.Refresh() // the string may go on in memory mapped since the index was read
	}
	if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
		return string(buf[:i]), ""
	}
	switch {
	case n == len(buf):
		return string(buf[:n]), ""
	case n == 0:
		return "", fmt.Sprintf("%s pointer %#x is not readable memory", what, addr)
	}
	return "", fmt.Sprintf("%s at %#x runs into unreadable memory", what, addr)
}

// maxDesc is the longest tensor description read (trace.ParseTensor's limits fit well inside).
const maxDesc = trace.MaxDesc

// cDescs reads n tensor descriptions (a NULL array: none, nil; a NULL entry: nothing known of that
// tensor) by cString's rule; a longer one comes back cut, for trace.ParseTensor to refuse.
func cDescs(a *agent.Agent, p **C.char, n C.size_t) ([]string, string) {
	if p == nil {
		return nil, ""
	}
	ptrs, bad := ptrSlice(a, (*C.uintptr_t)(unsafe.Pointer(p)), n, "descs")
	if bad != "" {
		return nil, bad
	}
	return descStrings(a, ptrs)
}

// descStrings reads the descriptions whose C addresses are ptrs (cDescs's rule), the short ones in one
// read (cStrings).
func descStrings(a *agent.Agent, ptrs []uint64) ([]string, string) {
	out := make([]string, len(ptrs))
	done := cStrings(a, ptrs, maxDesc+1, out)
	var buf []byte
	for i, q := range ptrs {
		if q == 0 || done[i] {
			continue
		}
		if buf == nil {
			buf = make([]byte, maxDesc+1)
		}
		// q is a C address read from C memory: reinterpret its bits (never a Go pointer).
		s, bad := cString(a, *(**C.char)(unsafe.Pointer(&q)), buf, "descs["+strconv.Itoa(i)+"]")
		if bad != "" {
			return nil, bad
		}
		out[i] = s
	}
	return out, ""
}

// cStrings reads the C strings at ptrs (0 entries skipped), each up to the end of its page and at most
// limit bytes, in one read through the kernel of as few pieces as the strings allow (overlapping or adjacent
// ranges are merged: strings a caller keeps together cost one piece), and sets out[i] for each one that
// ends (NUL) in what was read: short strings nearly always do. It returns which it set; the others
// (running past their page, in a piece that could not be read whole, or every one where the kernel refuses
// such reads) are for cString, one by one.
func cStrings(a *agent.Agent, ptrs []uint64, limit int, out []string) []bool {
	done := make([]bool, len(ptrs))
	page := uint64(os.Getpagesize())
	type str struct {
		lo, hi uint64
		i, run int
	}
	ss := make([]str, 0, len(ptrs))
	for i, q := range ptrs {
		if q != 0 && q <= ^uint64(0)-uint64(limit) {
			ss = append(ss, str{lo: q, hi: q + min(uint64(limit), page-q%page), i: i})
		}
	}
	sort.Slice(ss, func(x, y int) bool { return ss[x].lo < ss[y].lo })
	var at []uint64
	var lens []int
	for k := range ss {
		if n := len(at); n > 0 && ss[k].lo <= at[n-1]+uint64(lens[n-1]) {
			lens[n-1] = int(max(at[n-1]+uint64(lens[n-1]), ss[k].hi) - at[n-1])
		} else {
			at, lens = append(at, ss[k].lo), append(lens, int(ss[k].hi-ss[k].lo))
		}
		ss[k].run = len(at) - 1
	}
	offs, total := make([]int, len(at)), 0
	for r, l := range lens {
		offs[r] = total
		total += l
	}
	buf, ok := make([]byte, total), make([]bool, len(at))
	for r := 0; r < len(at); {
		got, exact := a.HostMaps().ReadPieces(buf[offs[r]:], at[r:], lens[r:])
		if !exact {
			break
		}
		for ; r < len(at) && got >= lens[r]; r++ {
			ok[r] = true
			got -= lens[r]
		}
		r++ // piece r could not be read whole: its strings are cString's
	}
	for _, x := range ss {
		if !ok[x.run] {
			continue
		}
		from := offs[x.run] + int(x.lo-at[x.run])
		piece := buf[from : from+int(x.hi-x.lo)]
		if j := bytes.IndexByte(piece, 0); j >= 0 {
			out[x.i], done[x.i] = string(piece[:j]), true
		}
	}
	return done
}

// ptrSlice copies n pointers by readArrays's rules: NULL with n > 0, n beyond the trace limit and an array
// the process cannot read are refused (a reason is returned).
func ptrSlice(a *agent.Agent, p *C.uintptr_t, n C.size_t, what string) ([]uint64, string) {
	arr := cArray{what: what, p: unsafe.Pointer(p), n: int(min(n, maxPtrs+1))}
	var out []uint64
	if p != nil && n > 0 && n <= maxPtrs { // nothing allocated for what readArrays refuses
		out = make([]uint64, int(n))
		arr = u64Array(what, unsafe.Pointer(p), out)
	}
	if bad := readArrays(a, []cArray{arr}); bad != "" {
		return nil, bad
	}
	return out, ""
}

// cRead copies len(dst) bytes at p into dst, from memory proven readable (through the kernel, or where
// the kernel refuses such reads, the index); false when it is not.
func cRead(a *agent.Agent, p unsafe.Pointer, dst []byte) bool {
	addr, hm := uint64(uintptr(p)), a.HostMaps()
	if got, exact := hm.Read(dst, addr); exact {
		return got == len(dst)
	}
	if hm.Available() && !hm.Covers(addr, uint64(len(dst)), false) {
		return false
	}
	copy(dst, unsafe.Slice((*byte)(p), len(dst)))
	return true
}

// cWrite copies src to p, into memory proven writable (through the kernel, or where the kernel refuses,
// the index); false when it is not.
func cWrite(a *agent.Agent, p unsafe.Pointer, src []byte) bool {
	addr, hm := uint64(uintptr(p)), a.HostMaps()
	if done, exact := hm.Write(src, addr); exact {
		return done
	}
	if hm.Available() && !hm.Covers(addr, uint64(len(src)), true) {
		return false
	}
	copy(unsafe.Slice((*byte)(p), len(src)), src)
	return true
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
		return C.int(a.Invalid("set_storage_ops", "one of release and restore is NULL"))
	}
	if release == 0 {
		return C.int(a.SetStorageOps(nil))
	}
	return C.int(a.SetStorageOps(cStorageOps{release: uintptr(release), restore: uintptr(restore), ctx: uintptr(ctx)}))
}

//export sa_go_region_enter
func sa_go_region_enter(group *C.char, ptrs *C.uintptr_t, n, npos C.size_t) (ret C.int) {
	defer guard("swapagent_region_enter", &ret, agent.EDisabled)
	return regionEnterCall(group, ptrs, nil, n, npos)
}

//export sa_go_region_enter_desc
func sa_go_region_enter_desc(group *C.char, ptrs *C.uintptr_t, descs **C.char, n, npos C.size_t) (ret C.int) {
	defer guard("swapagent_region_enter_desc", &ret, agent.EDisabled)
	return regionEnterCall(group, ptrs, descs, n, npos)
}

// regionEnterCall converts region_enter's arguments (descs NULL: none given) and calls the agent.
func regionEnterCall(group *C.char, ptrs *C.uintptr_t, descs **C.char, n, npos C.size_t) C.int {
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, ps, ds, bad := describedArgs(a, group, ptrs, descs, n, "input_ptrs")
	if bad == "" && npos > n {
		bad = fmt.Sprintf("n_positional %d > n %d", uint64(npos), uint64(n))
	}
	if bad != "" {
		return C.int(a.Invalid("region_enter", bad))
	}
	return C.int(a.RegionEnterDesc(g, ps, int(npos), ds))
}

//export sa_go_describe
func sa_go_describe(group *C.char, ptrs *C.uintptr_t, descs **C.char, n C.size_t) (ret C.int) {
	defer guard("swapagent_describe", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, ps, ds, bad := describedArgs(a, group, ptrs, descs, n, "ptrs")
	if bad == "" && descs == nil && n > 0 {
		bad = fmt.Sprintf("NULL descs with n = %d", uint64(n))
	}
	if bad != "" {
		return C.int(a.Invalid("describe", bad))
	}
	return C.int(a.Describe(g, ps, ds))
}

// describedArgs reads a group, n pointers (named arg in a refusal) and their n descriptions (descs NULL:
// none), the arguments of the calls that describe tensors; bad is why they were refused.
func describedArgs(a *agent.Agent, group *C.char, ptrs *C.uintptr_t, descs **C.char, n C.size_t,
	arg string) (g string, ps []uint64, ds []string, bad string) {
	g, bad = cGroup(a, group)
	if bad == "" {
		ps, bad = ptrSlice(a, ptrs, n, arg)
	}
	if bad == "" {
		ds, bad = cDescs(a, descs, n)
	}
	return g, ps, ds, bad
}

//export sa_go_save
func sa_go_save(group *C.char, ptr C.uintptr_t, nbytes C.size_t, flags C.uint32_t) (ret C.int64_t) {
	defer guard("swapagent_save", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	if bad != "" {
		return C.int64_t(a.Invalid("save", bad))
	}
	return C.int64_t(a.Save(g, uint64(ptr), uint64(nbytes), uint32(flags)))
}

//export sa_go_save_n
func sa_go_save_n(group *C.char, ptrs *C.uintptr_t, nbytes *C.size_t, flags *C.uint32_t, n C.size_t,
	handles *C.int64_t) (ret C.int) {
	defer guard("swapagent_save_n", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	var sv saves
	if bad == "" {
		sv, bad = readSaves(a, ptrs, nbytes, flags, n, handles, nil)
	}
	if bad != "" {
		return C.int(a.Invalid("save_n", bad))
	}
	return withHandles(a, "save_n", handles, len(sv.ptrs), func(out []int64) int {
		return a.SaveN(g, sv.ptrs, sv.sizes, sv.flags, out)
	})
}

// withHandles runs call with an array of n handles for it to fill and copies them to the C array handles.
// The C array must be writable before the call: a save the caller never hears of would leak.
func withHandles(a *agent.Agent, name string, handles *C.int64_t, n int, call func(out []int64) int) C.int {
	if n == 0 {
		return C.int(call(nil))
	}
	out := make([]int64, n)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 8*len(out))
	if !cWrite(a, unsafe.Pointer(handles), dst) {
		return C.int(a.Invalid(name, fmt.Sprintf("handles: %d values at %#x are not writable memory",
			n, uint64(uintptr(unsafe.Pointer(handles))))))
	}
	rc := call(out)
	if !cWrite(a, unsafe.Pointer(handles), dst) {
		return C.int(a.Invalid(name, "handles: no longer writable memory"))
	}
	return C.int(rc)
}

// saves are save_n's arrays, read.
type saves struct {
	ptrs, sizes []uint64
	flags       []uint32 // nil: all 0
}

// readSaves reads save_n's arrays (flags NULL: none), and the extra arrays with them, in one read through
// the kernel (readArrays).
func readSaves(a *agent.Agent, ptrs *C.uintptr_t, nbytes *C.size_t, flags *C.uint32_t, n C.size_t,
	handles *C.int64_t, extra []cArray) (saves, string) {
	var sv saves
	if n > maxPtrs {
		return sv, fmt.Sprintf("ptrs: n = %d is above the limit of %d", uint64(n), maxPtrs)
	}
	if n > 0 && handles == nil {
		return sv, fmt.Sprintf("NULL handles with n = %d", uint64(n))
	}
	if n > 0 {
		sv.ptrs, sv.sizes = make([]uint64, int(n)), make([]uint64, int(n))
		extra = append(extra, u64Array("ptrs", unsafe.Pointer(ptrs), sv.ptrs),
			u64Array("nbytes", unsafe.Pointer(nbytes), sv.sizes))
		if flags != nil {
			sv.flags = make([]uint32, int(n))
			extra = append(extra, cArray{what: "flags", p: unsafe.Pointer(flags), n: int(n),
				dst: unsafe.Slice((*byte)(unsafe.Pointer(&sv.flags[0])), 4*int(n))})
		}
	}
	return sv, readArrays(a, extra)
}

// cArray is a C array argument to read: what names it in a refusal, its address and length, and the Go
// memory its bytes go to.
type cArray struct {
	what string
	p    unsafe.Pointer
	n    int
	dst  []byte
}

// u64Array is the cArray of len(dst) 64-bit values at p.
func u64Array(what string, p unsafe.Pointer, dst []uint64) cArray {
	c := cArray{what: what, p: p, n: len(dst)}
	if len(dst) > 0 {
		c.dst = unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst))
	}
	return c
}

// readArrays reads the arrays, in one read through the kernel when each one is readable; otherwise (or
// where the kernel refuses such reads) one by one by cRead's rule, so that a refusal names the array. An
// array of no values is not read; NULL with values is refused.
func readArrays(a *agent.Agent, arrs []cArray) string {
	at, lens, total := make([]uint64, 0, len(arrs)), make([]int, 0, len(arrs)), 0
	for _, c := range arrs {
		if c.n == 0 {
			continue
		}
		if c.p == nil {
			return fmt.Sprintf("NULL %s with n = %d", c.what, c.n)
		}
		if c.n > maxPtrs {
			return fmt.Sprintf("%s: n = %d is above the limit of %d", c.what, c.n, maxPtrs)
		}
		at, lens, total = append(at, uint64(uintptr(c.p))), append(lens, len(c.dst)), total+len(c.dst)
	}
	if total == 0 {
		return ""
	}
	buf := make([]byte, total)
	if got, exact := a.HostMaps().ReadPieces(buf, at, lens); exact && got == total {
		for _, c := range arrs {
			if c.n > 0 {
				buf = buf[copy(c.dst, buf):]
			}
		}
		return ""
	}
	for _, c := range arrs {
		if c.n > 0 && !cRead(a, c.p, c.dst) {
			return fmt.Sprintf("%s: %d values at %#x are not readable memory", c.what, c.n, uint64(uintptr(c.p)))
		}
	}
	return ""
}

//export sa_go_region_end
func sa_go_region_end(group *C.char, out *C.uintptr_t, nOut C.size_t, ptrs *C.uintptr_t, nbytes *C.size_t,
	flags *C.uint32_t, nSave C.size_t, handles *C.int64_t, descPtrs *C.uintptr_t, descs **C.char,
	nDesc C.size_t) (ret C.int) {
	defer guard("swapagent_region_end", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	var outs, dps, textAt []uint64
	var sv saves
	switch {
	case bad != "":
	case nOut > maxPtrs || nDesc > maxPtrs:
		bad = fmt.Sprintf("n_out = %d, n_desc = %d: above the limit of %d", uint64(nOut), uint64(nDesc), maxPtrs)
	case nDesc > 0 && descs == nil:
		bad = fmt.Sprintf("NULL descs with n_desc = %d", uint64(nDesc))
	default:
		outs, dps, textAt = make([]uint64, int(nOut)), make([]uint64, int(nDesc)), make([]uint64, int(nDesc))
		sv, bad = readSaves(a, ptrs, nbytes, flags, nSave, handles, []cArray{
			u64Array("output_ptrs", unsafe.Pointer(out), outs),
			u64Array("desc_ptrs", unsafe.Pointer(descPtrs), dps),
			u64Array("descs", unsafe.Pointer(descs), textAt)})
	}
	var ds []string
	if bad == "" && nDesc > 0 {
		ds, bad = descStrings(a, textAt)
	}
	if bad != "" {
		return C.int(a.Invalid("region_end", bad))
	}
	return withHandles(a, "region_end", handles, len(sv.ptrs), func(hs []int64) int {
		return a.RegionEnd(g, outs, sv.ptrs, sv.sizes, sv.flags, hs, dps, ds)
	})
}

//export sa_go_region_exit
func sa_go_region_exit(group *C.char, ptrs *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_region_exit", &ret, agent.EDisabled)
	return groupPtrsCall("region_exit", group, ptrs, n, "output_ptrs", (*agent.Agent).RegionExit)
}

//export sa_go_protect
func sa_go_protect(group *C.char, ptrs *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_protect", &ret, agent.EDisabled)
	return groupPtrsCall("protect", group, ptrs, n, "ptrs", (*agent.Agent).Protect)
}

//export sa_go_holders
func sa_go_holders(group *C.char, ptrs *C.uintptr_t, counts *C.int64_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_holders", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	var ps, cs []uint64
	if bad == "" {
		ps, bad = ptrSlice(a, ptrs, n, "ptrs")
	}
	if bad == "" {
		cs, bad = ptrSlice(a, (*C.uintptr_t)(unsafe.Pointer(counts)), n, "counts")
	}
	if bad != "" {
		return C.int(a.Invalid("holders", bad))
	}
	held := make([]int64, len(cs))
	for i, c := range cs {
		held[i] = int64(c)
	}
	return C.int(a.Holders(g, ps, held))
}

//export sa_go_group_streams
func sa_go_group_streams(group *C.char, streams *C.uintptr_t, n C.size_t) (ret C.int) {
	defer guard("swapagent_group_streams", &ret, agent.EDisabled)
	return groupPtrsCall("group_streams", group, streams, n, "streams", (*agent.Agent).GroupStreams)
}

// groupPtrsCall runs a control call that takes a group name and an array of n pointers (named arg in the
// misuse line): both are read safely first, and a bad one is refused as EINVAL.
func groupPtrsCall(call string, group *C.char, ptrs *C.uintptr_t, n C.size_t, arg string,
	do func(*agent.Agent, string, []uint64) int) C.int {
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	var ps []uint64
	if bad == "" {
		ps, bad = ptrSlice(a, ptrs, n, arg)
	}
	if bad != "" {
		return C.int(a.Invalid(call, bad))
	}
	return C.int(do(a, g, ps))
}

// groupCall runs a control call that takes only a group name.
func groupCall(name string, group *C.char, call func(*agent.Agent, string) int) C.int {
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := cGroup(a, group)
	if bad != "" {
		return C.int(a.Invalid(name, bad))
	}
	return C.int(call(a, g))
}

//export sa_go_backward_enter
func sa_go_backward_enter(group *C.char) (ret C.int) {
	defer guard("swapagent_backward_enter", &ret, agent.EDisabled)
	return groupCall("backward_enter", group, (*agent.Agent).BackwardEnter)
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
	return groupCall("backward_exit", group, (*agent.Agent).BackwardExit)
}

//export sa_go_guard
func sa_go_guard(group *C.char) (ret C.int) {
	defer guard("swapagent_guard", &ret, agent.EDisabled)
	return groupCall("guard", group, (*agent.Agent).Guard)
}

// optGroup reads a group that may be NULL (""): the guard's calls let the agent find the group.
func optGroup(a *agent.Agent, group *C.char) (string, string) {
	if group == nil {
		return "", ""
	}
	return cGroup(a, group)
}

//export sa_go_guard_release
func sa_go_guard_release(group *C.char, ptr C.uintptr_t, nbytes C.size_t, others C.int64_t, token *C.int64_t) (ret C.int) {
	defer guard("swapagent_guard_release", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	g, bad := optGroup(a, group)
	if bad != "" {
		return C.int(a.Invalid("guard_release", bad))
	}
	var tok int64
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&tok)), 8)
	if token != nil && !cWrite(a, unsafe.Pointer(token), dst) { // writable before the agent decides anything
		return C.int(a.Invalid("guard_release", "token: not writable memory"))
	}
	answer, tok := a.GuardRelease(g, uint64(ptr), uint64(nbytes), tracker.Holders(others))
	if token != nil && !cWrite(a, unsafe.Pointer(token), dst) {
		return C.int(a.Invalid("guard_release", "token: no longer writable memory"))
	}
	return C.int(answer)
}

//export sa_go_guard_restore
func sa_go_guard_restore(token C.int64_t, newPtr C.uintptr_t, nbytes C.size_t) (ret C.int) {
	defer guard("swapagent_guard_restore", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	return C.int(a.GuardRestore(int64(token), uint64(newPtr), uint64(nbytes)))
}

//export sa_go_note
func sa_go_note(key, value *C.char) (ret C.int) {
	defer guard("swapagent_note", &ret, agent.EDisabled)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	var kb [agent.MaxNoteKey + 1]byte
	var vb [agent.MaxNoteValue + 1]byte
	k, bad := cString(a, key, kb[:], "key")
	var v string
	if bad == "" {
		v, bad = cString(a, value, vb[:], "value")
	}
	if bad != "" {
		return C.int(a.Invalid("note", bad))
	}
	return C.int(a.Note(k, v))
}

//export sa_go_state
func sa_go_state(handle C.int64_t) (ret C.int) {
	defer guard("swapagent_state", &ret, agent.EDisabled)
	return handleCall(handle, (*agent.Agent).State)
}

//export sa_go_keep_reason
func sa_go_keep_reason(handle C.int64_t) (ret C.int) {
	defer guard("swapagent_keep_reason", &ret, agent.EDisabled)
	return handleCall(handle, (*agent.Agent).KeepReason)
}

// handleCall runs a control call that takes only a handle.
func handleCall(handle C.int64_t, call func(*agent.Agent, int64) int) C.int {
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	return C.int(call(a, int64(handle)))
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
		return C.int(a.Invalid("stats_json", "NULL buf with cap > 0"))
	}
	js := a.StatsJSON()
	if buf != nil && uint64(len(js)) < uint64(capacity) {
		if !cWrite(a, unsafe.Pointer(buf), append(js, 0)) {
			return C.int(a.Invalid("stats_json", fmt.Sprintf("buf %#x is not writable memory",
				uint64(uintptr(unsafe.Pointer(buf))))))
		}
	}
	return C.int(len(js))
}

// shutdownBound is how long the exit hook waits for the trace to be finished: a process's exit must not
// hang on the agent (a thread that holds the agent's lock forever, a full disk that blocks writes).
const shutdownBound = 2 * time.Second

//export sa_go_shutdown
func sa_go_shutdown() {
	a := theAgent
	if a == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer guardVoid("swapagent_shutdown")
		a.Shutdown()
	}()
	t := time.NewTimer(shutdownBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		fmt.Fprintf(stderrFD{}, "swapagent: the trace was not finished within %v of exit; what was flushed "+
			"before stays readable\n", shutdownBound)
	}
}

//export sa_go_runtime_final
func sa_go_runtime_final() {
	defer guardVoid("aclFinalize")
	if m := theMover; m != nil {
		m.rt.finish()
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

//export sa_go_deferred
func sa_go_deferred(minBytes *C.uint64_t) (ret C.int) {
	defer guard("swapagent_deferred", &ret, 0)
	a := theAgent
	if a == nil {
		return 0
	}
	mode, min := a.Deferrable()
	*minBytes = C.uint64_t(min)
	return C.int(mode)
}

//export sa_go_run_deferred
func sa_go_run_deferred(d C.uintptr_t) (ret C.int64_t) {
	defer guard("swapagent_deferred", &ret, agent.EDisabled)
	if a := theAgent; a != nil {
		return C.int64_t(a.RunDeferred(native{}.Deferred(uint64(d))))
	}
	native{}.Deferred(uint64(d)) // frees it
	return agent.EDisabled
}

//export sa_go_defer_refused
func sa_go_defer_refused(call, detail *C.char) (ret C.int) {
	defer guard("swapagent_deferred", &ret, agent.EInvalid)
	a := theAgent
	if a == nil {
		return agent.EDisabled
	}
	return C.int(a.Invalid(C.GoString(call), C.GoString(detail)))
}
