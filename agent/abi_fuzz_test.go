// abi_fuzz_test.go holds the fuzz target of the control ABI's dispatch: a fuzz input is a sequence of the
// agent's control calls with good and bad arguments (groups empty, 5000 bytes, with control characters;
// handles live, finished, made up; pointer arrays; saves of real storages with right and wrong sizes,
// views, unmapped addresses, freed memory, VMM address space with nothing mapped), run through a fake
// Native (the runtime events the input asks for: allocations, frees, VMM) and a fake framework whose
// storages hold known bytes and whose storage ops fail or hand back garbage on request. The mover copies
// with memcpy, but only after checking that the range is memory this test made: a copy anywhere else is the
// fault the pointer rule exists to prevent, and fails the run. Checks: no panic, every storage an unpack
// returns holds exactly its bytes, and the stats' "rejected" equal the refusals the calls returned. The
// seed corpus runs in `go test`; `go test -fuzz FuzzABI ./agent/` searches further.
package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"swapagent/offload"
	"swapagent/trace"
)

// Function ids of the fake runtime.
const (
	fnMalloc uint16 = 1 + iota
	fnFree
	fnReserve
	fnReleaseResv
	fnMap
	fnUnmap
)

var fakeFns = [...]string{"", "aclrtMalloc", "aclrtFree", "aclrtReserveMemAddress", "aclrtReleaseMemAddress",
	"aclrtMapMem", "aclrtUnmapMem"}

// fakeNative is the C half, faked: a queue of runtime events.
type fakeNative struct {
	mu sync.Mutex
	q  []Raw
	t0 time.Time
}

func (n *fakeNative) push(fn uint16, args ...uint64) {
	n.mu.Lock()
	r := Raw{TS: n.Now(), Fn: fn}
	copy(r.Args[:], args)
	n.q = append(n.q, r)
	n.mu.Unlock()
}

func (n *fakeNative) Drain(dst []Raw) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := copy(dst, n.q)
	n.q = n.q[k:]
	return k
}

func (n *fakeNative) FnName(fn uint16) string {
	if int(fn) < len(fakeFns) {
		return fakeFns[fn]
	}
	return ""
}
func (n *fakeNative) TakeLost() uint64          { return 0 }
func (n *fakeNative) Now() int64                { return int64(time.Since(n.t0)) }
func (n *fakeNative) StartMono() int64          { return 0 }
func (n *fakeNative) StartWall() int64          { return n.t0.UnixNano() }
func (n *fakeNative) CrashPending() int         { return 0 }
func (n *fakeNative) CrashAck()                 {}
func (n *fakeNative) MarkDrainerThread()        {}
func (n *fakeNative) SetDead(ranges []uint64)   {}
func (n *fakeNative) RecentErrMsg() string      { return "" }
func (n *fakeNative) Disable()                  {}
func (n *fakeNative) ThreadID() uint32          { return 1 }
func (n *fakeNative) SetResident(int64, uint64) {}
func (n *fakeNative) Queued(uint64) *Call       { return &Call{Bad: "no queued calls here"} }
func (n *fakeNative) QueueClose()               {}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// fstore is a framework storage: its bytes never change, its base moves on restore.
type fstore struct {
	buf    []byte
	ptr    uint64 // 0 while released
	seed   byte
	dev    bool // announced as an allocation (else host memory)
	vmm    bool // the two VMM mappings
	refs   int  // live handles saved inside it
	alias  bool // a view of it was saved: the older overlapping storage is held freed by the tracker
	parent *world
}

func (s *fstore) want(i int) byte { return s.seed + byte(i*7) }

type fhandle struct {
	h     int64
	g     int
	s     *fstore // the storage the saved pointer lies in
	bound bool    // saved with its storage's exact base and size: the ops accept it
}

var goodGroups = []string{"g0", "g1", "g2", "g3"}
var badGroups = []string{"", strings.Repeat("x", 5000), "a\x01b", "layer\n0", "\x7f"}

const roText = "read-only host memory, a string constant"

// world is one fuzz run.
type world struct {
	t       *testing.T
	a       *Agent
	n       *fakeNative
	in      []byte
	mem     [][]byte // every buffer made: copies may read only these (and roText)
	st      []*fstore
	resv    []byte // VMM address space: the first half mapped (two mappings), the second never
	mapped  bool
	live    []fhandle
	dead    []int64
	phase   [4]int // 0 idle, 1 forward, 2 exited, 3 backward, as the calls' results say
	refused [8]int
	zeros   int // unpacks that returned 0
	restore int // next restore: 0 behaves, 1 fails, 2 returns garbage
	release int // next release: 0 behaves, 1 fails
	seed    byte
}

func (w *world) byte() byte {
	if len(w.in) == 0 {
		return 0
	}
	b := w.in[0]
	w.in = w.in[1:]
	return b
}

func (w *world) buffer(n int) []byte {
	b := make([]byte, n)
	w.mem = append(w.mem, b)
	return b
}

func (w *world) newStore(dev bool) *fstore {
	w.seed += 29
	s := &fstore{dev: dev, seed: w.seed, parent: w}
	s.buf = w.buffer(1024 * (1 + int(w.seed)%8))
	for i := range s.buf {
		s.buf[i] = s.want(i)
	}
	s.ptr = addr(s.buf)
	if dev {
		w.n.push(fnMalloc, s.ptr, uint64(len(s.buf)))
	}
	return s
}

func (w *world) vmmStore() *fstore {
	w.resv = w.buffer(4 * 4096)
	w.n.push(fnReserve, addr(w.resv), uint64(len(w.resv)))
	s := &fstore{dev: true, vmm: true, seed: 99, buf: w.resv[:8192], parent: w}
	w.mapVMM()
	for i := range s.buf {
		s.buf[i] = s.want(i)
	}
	s.ptr = addr(s.buf)
	return s
}

func (w *world) mapVMM() {
	w.n.push(fnMap, addr(w.resv), 4096)
	w.n.push(fnMap, addr(w.resv)+4096, 4096)
	w.mapped = true
}

// owns says whether a copy may touch [p, p+n): never VMM space with nothing mapped; a copy into memory
// only into a buffer this test made (a restore hands out nothing else); a copy out of memory wherever the
// kernel can read it (a host storage saved too long runs into heap memory, which is readable).
func (w *world) owns(p, n uint64, write bool) bool {
	if r := addr(w.resv); p+n > r && p < r+uint64(len(w.resv)) {
		return w.mapped && p >= r && p+n <= r+8192
	}
	for _, b := range w.mem {
		if p >= addr(b) && p+n <= addr(b)+uint64(len(b)) {
			return true
		}
	}
	if write {
		return false
	}
	buf := make([]byte, n)
	iov := []unix.Iovec{{Base: &buf[0]}}
	iov[0].SetLen(int(n))
	got, err := unix.ProcessVMReadv(os.Getpid(), iov, []unix.RemoteIovec{{Base: uintptr(p), Len: int(n)}}, 0)
	return err == nil && uint64(got) == n
}

// checkedMover is memcpy with the oracle: a copy outside the test's memory is a test failure.
type checkedMover struct {
	*offload.MemcpyMover
	w *world
}

func (m checkedMover) CopyOut(dst, src, n uint64) (offload.Copy, error) {
	if !m.w.owns(src, n, false) {
		m.w.t.Errorf("copy out of %#x (%d bytes): not memory the test made", src, n)
		return 0, fmt.Errorf("%w: refused by the test", offload.ErrRuntime)
	}
	return m.MemcpyMover.CopyOut(dst, src, n)
}

func (m checkedMover) CopyIn(dst, src, n uint64) (offload.Copy, error) {
	if !m.w.owns(dst, n, true) {
		m.w.t.Errorf("copy into %#x (%d bytes): not memory the test made", dst, n)
		return 0, fmt.Errorf("%w: refused by the test", offload.ErrRuntime)
	}
	return m.MemcpyMover.CopyIn(dst, src, n)
}

func (w *world) bound(h int64) *fstore {
	for _, l := range w.live {
		if l.h == h && l.bound {
			return l.s
		}
	}
	return nil
}

// The framework's storage ops.
func (w *world) Release(h int64, ptr, n uint64) error {
	s := w.bound(h)
	if s == nil || s.ptr != ptr || uint64(len(s.buf)) != n {
		return fmt.Errorf("not a storage of this framework")
	}
	if w.release == 1 {
		w.release = 0
		return fmt.Errorf("release failed")
	}
	for i := range s.buf {
		s.buf[i] = 0x5a
	}
	switch {
	case s.vmm:
		w.n.push(fnUnmap, addr(w.resv))
		w.n.push(fnUnmap, addr(w.resv)+4096)
		w.mapped = false
	case s.dev:
		w.n.push(fnFree, s.ptr)
	}
	s.ptr = 0
	return nil
}

func (w *world) Restore(h int64, n uint64) (uint64, error) {
	s := w.bound(h)
	if s == nil || uint64(len(s.buf)) != n {
		return 0, fmt.Errorf("not a storage of this framework")
	}
	switch w.restore {
	case 1:
		w.restore = 0
		return 0, fmt.Errorf("restore failed")
	case 2:
		w.restore = 0
		return 0x12345678, nil
	}
	if s.ptr == 0 {
		if s.vmm {
			w.mapVMM()
		} else {
			s.buf = w.buffer(len(s.buf))
		}
		for i := range s.buf {
			s.buf[i] = 0xa5
		}
		s.ptr = addr(s.buf)
		if s.dev && !s.vmm {
			w.n.push(fnMalloc, s.ptr, uint64(len(s.buf)))
		}
	}
	return s.ptr, nil
}

func (w *world) count(rc int64) {
	if rc < 0 && rc >= -8 {
		w.refused[-rc-1]++
	}
	if rc < -8 {
		w.t.Errorf("return code %d is not a SWAPAGENT_E* code", rc)
	}
}

// group picks a group: a good one (its index) or a bad name (-1).
func (w *world) group() (string, int) {
	b := w.byte()
	if b%8 == 7 {
		return badGroups[int(b/8)%len(badGroups)], -1
	}
	g := int(b) % len(goodGroups)
	return goodGroups[g], g
}

func (w *world) ptrs() []uint64 {
	k := int(w.byte() % 5)
	out := make([]uint64, k)
	for i := range out {
		if b := w.byte(); b < 200 {
			out[i] = w.st[int(b)%len(w.st)].ptr
		} else {
			out[i] = garbage(b)
		}
	}
	return out
}

// garbage is an address nothing maps: issue 15's, the first page, or the kernel's half.
func garbage(b byte) uint64 {
	switch b % 3 {
	case 0:
		return 0x12345678 + uint64(b)
	case 1:
		return 1 + uint64(b)
	}
	return 0xffff_8000_0000_0000 + uint64(b)<<20
}

func (w *world) forget(g int) {
	k := 0
	for _, l := range w.live {
		if l.g != g {
			w.live[k] = l
			k++
			continue
		}
		if l.s != nil {
			l.s.refs--
		}
		w.dead = append(w.dead, l.h)
	}
	w.live = w.live[:k]
}

func (w *world) storeAt(p uint64) *fstore {
	for _, s := range w.st {
		if s.ptr != 0 && p >= s.ptr && p < s.ptr+uint64(len(s.buf)) {
			return s
		}
	}
	return nil
}

func (w *world) save() {
	name, g := w.group()
	s := w.st[int(w.byte())%len(w.st)]
	p, n := s.ptr, uint64(len(s.buf))
	kind, x := w.byte(), w.byte()
	bad := false // the pointer rule must refuse it (in a good group inside its region)
	switch kind % 12 {
	case 0, 1, 2, 3, 4:
		bad = p == 0
	case 5:
		p, n = p+64, n-64
		bad = s.ptr == 0
	case 6:
		n /= 2
		bad = s.ptr == 0
	case 7:
		n += 1 + uint64(x)
		bad = s.dev || s.ptr == 0
	case 8:
		p, n, bad = garbage(x), 4096, true
	case 9:
		p, n, bad = addr(w.resv)+8192+uint64(x)*16, 64, true // reserved, nothing mapped
	case 10:
		p, n, bad = addr(w.resv)+4096, 8192, true // from a mapping into the unmapped part
	default:
		p, n = uint64(uintptr(unsafe.Pointer(unsafe.StringData(roText)))), uint64(len(roText))
	}
	if !w.mapped && s.vmm {
		bad = true
	}
	var h int64
	if f := uint32(w.byte() % 2); (kind/12)%3 == 0 { // the batch call, with this save as its one entry
		out := []int64{0}
		rc := w.a.SaveN(name, []uint64{p}, []uint64{n}, []uint32{f}, out)
		if h = out[0]; h == 0 { // refused as a whole (a bad group): nothing saved
			h = int64(rc)
		}
	} else {
		h = w.a.Save(name, p, n, f)
	}
	if h <= 0 {
		w.count(h)
	}
	if g >= 0 && w.phase[g] == 1 {
		if bad && h != trace.CodeEINVAL {
			w.t.Errorf("save of %#x (%d bytes) returned %d, want EINVAL", p, n, h)
		}
		if !bad && h <= 0 && p == s.ptr && n <= uint64(len(s.buf)) {
			w.t.Errorf("save of a storage (%#x, %d bytes) returned %d, want a handle", p, n, h)
		}
	}
	if h > 0 && g >= 0 {
		at := w.storeAt(p)
		exact := at == s && p == s.ptr && n == uint64(len(s.buf))
		w.live = append(w.live, fhandle{h: h, g: g, s: at, bound: exact})
		if at != nil {
			at.refs++
		}
		for _, o := range w.st { // every storage the range overlaps: a view, or a size past its buffer
			if !exact && o.ptr != 0 && p < o.ptr+uint64(len(o.buf)) && o.ptr < p+n {
				o.alias = true
			}
		}
	}
}

func (w *world) unpack() {
	var h int64
	var l *fhandle
	switch b := w.byte(); {
	case b < 170 && len(w.live) > 0:
		l = &w.live[int(b)%len(w.live)]
		h = l.h
	case b < 230 && len(w.dead) > 0:
		h = w.dead[int(b)%len(w.dead)]
	default:
		h = int64(b)*0x1234567 - 1<<30 // made up, negative ones too
	}
	base := w.a.Unpack(h)
	if base == 0 {
		w.zeros++
		return
	}
	if l == nil || !l.bound {
		return
	}
	s := l.s
	if base != s.ptr {
		if !s.alias {
			w.t.Errorf("unpack of handle %d gave %#x, its storage is at %#x", h, base, s.ptr)
		}
		return
	}
	for i, c := range s.buf {
		if c != s.want(i) {
			w.t.Errorf("after unpack of handle %d: byte %d is %#x, want %#x", h, i, c, s.want(i))
			return
		}
	}
}

func (w *world) step() {
	switch op := w.byte() % 14; op {
	case 0:
		name, g := w.group()
		in := w.ptrs()
		npos := int(w.byte()) % (len(in) + 2)
		if rc := w.a.RegionEnter(name, in, npos); rc < 0 {
			w.count(int64(rc))
		} else if g >= 0 {
			if w.phase[g] == 3 {
				w.forget(g)
			}
			w.phase[g] = 1
		}
	case 1, 2, 3:
		w.save()
	case 4:
		name, g := w.group()
		if rc := w.a.RegionExit(name, w.ptrs()); rc < 0 {
			w.count(int64(rc))
		} else if g >= 0 {
			w.phase[g] = 2
		}
	case 5:
		name, _ := w.group()
		w.count(int64(w.a.Protect(name, w.ptrs())))
	case 6:
		name, _ := w.group()
		w.count(int64(w.a.GroupStreams(name, w.ptrs())))
	case 7:
		name, g := w.group()
		if rc := w.a.BackwardEnter(name); rc < 0 {
			w.count(int64(rc))
		} else if g >= 0 && w.phase[g] == 2 {
			w.phase[g] = 3
		}
	case 8, 9:
		w.unpack()
	case 10:
		name, g := w.group()
		if rc := w.a.BackwardExit(name); rc < 0 {
			w.count(int64(rc))
		} else if g >= 0 {
			w.forget(g)
			w.phase[g] = 0
		}
	case 11:
		b := w.byte()
		h := int64(b) - 128
		if len(w.live) > 0 && b < 192 {
			h = w.live[int(b)%len(w.live)].h
		}
		if rc := w.a.State(h); rc < 0 {
			w.count(int64(rc))
		}
		if rc := w.a.KeepReason(h); rc < 0 {
			w.count(int64(rc))
		}
	case 12:
		switch b := w.byte(); b % 5 {
		case 0:
			w.restore = 1
		case 1:
			w.restore = 2
		case 2:
			w.release = 1
		case 3:
			w.count(int64(w.a.SetStorageOps(nil)))
		default:
			w.count(int64(w.a.SetStorageOps(w)))
		}
	default:
		// Renew a storage no live handle uses: its memory is freed (its address turns to garbage).
		s := w.st[int(w.byte())%len(w.st)]
		if s.refs != 0 || s.vmm {
			return
		}
		if s.ptr != 0 && s.dev {
			w.n.push(fnFree, s.ptr)
		}
		*s = *w.newStore(s.dev)
	}
}

func (w *world) stats() trace.Stats {
	var st trace.Stats
	if err := json.Unmarshal(w.a.StatsJSON(), &st); err != nil {
		w.t.Fatalf("stats JSON: %v", err)
	}
	return st
}

func runABI(t *testing.T, in []byte) {
	w := &world{t: t, n: &fakeNative{t0: time.Now()}}
	policy, _ := offload.ParsePolicy(Policies[int(w.byteFrom(&in))%len(Policies)])
	cfg := Config{Policy: policy, Out: t.TempDir(), Prefetch: int(w.byteFrom(&in) % 3), MinBytes: 64,
		Level: zapcore.ErrorLevel, Rank: -1}
	w.in = in
	w.a = New(cfg, w.n, io.Discard, nil)
	w.a.StartEngine(checkedMover{MemcpyMover: offload.NewMemcpyMover(), w: w})
	defer w.a.Shutdown()
	for i := 0; i < 6; i++ {
		w.st = append(w.st, w.newStore(i < 4))
	}
	w.st = append(w.st, w.vmmStore())
	w.count(int64(w.a.SetStorageOps(w)))
	for steps := 0; len(w.in) > 0 && steps < 4096; steps++ {
		w.step()
	}
	rej := w.stats().Rejected
	if rej == nil {
		t.Fatal("stats JSON has no \"rejected\" object")
	}
	extra := 0
	for i, name := range codeNames {
		got := int(rej[name])
		if got < w.refused[i] {
			t.Errorf("rejected.%s = %d, the calls returned it %d times", name, got, w.refused[i])
		}
		extra += got - w.refused[i]
	}
	// An unpack returns 0, not its code, so its refusals may sit under any code.
	if unp := int(rej["unpack"]); extra != w.zeros || unp != w.zeros {
		t.Errorf("rejected beyond the codes seen: %d, rejected.unpack %d; unpacks that returned 0: %d", extra, unp,
			w.zeros)
	}
}

func (w *world) byteFrom(in *[]byte) byte {
	if len(*in) == 0 {
		return 0
	}
	b := (*in)[0]
	*in = (*in)[1:]
	return b
}

// scripted builds a seed: a policy, a prefetch depth, then ops as step() reads them.
func scripted(policy, prefetch byte, ops ...[]byte) []byte {
	out := []byte{policy, prefetch}
	for _, o := range ops {
		out = append(out, o...)
	}
	return out
}

func FuzzABI(f *testing.F) {
	enter := func(g byte) []byte { return []byte{0, g, 0, 0} } // no inputs
	save := func(g, s, kind byte) []byte { return []byte{1, g, s, kind, 3, 0} }
	exit := func(g byte) []byte { return []byte{4, g, 0} }
	bwd := func(g byte) []byte { return []byte{7, g} }
	unpack := func(i byte) []byte { return []byte{8, i} }
	bexit := func(g byte) []byte { return []byte{10, g} }
	// A clean step of two groups, every storage kind exact, then backward with every handle unpacked.
	clean := [][]byte{enter(0), save(0, 0, 0), save(0, 1, 0), save(0, 4, 0), save(0, 6, 0), exit(0),
		enter(1), save(1, 2, 0), save(1, 5, 0), exit(1), enter(2), exit(2),
		bwd(1), unpack(4), unpack(5), bexit(1), bwd(0), unpack(0), unpack(1), unpack(2), unpack(3), bexit(0)}
	f.Add(scripted(0, 1, clean...))
	f.Add(scripted(1, 0, clean...))
	f.Add(scripted(2, 2, clean...))
	// The crash of issue 15: garbage, a reservation with nothing mapped, a range into it, then the exit
	// that used to memcpy them.
	f.Add(scripted(0, 1, enter(0), save(0, 0, 8), save(0, 1, 9), save(0, 6, 10), save(0, 2, 7), save(0, 3, 5),
		save(0, 3, 6), save(0, 0, 11), exit(0), enter(1), exit(1), bwd(0), unpack(0), unpack(1), unpack(2), bexit(0)))
	// Bad groups and handles, storage ops that fail or hand back garbage, ops removed, storages renewed.
	f.Add(scripted(0, 1, enter(7), enter(15), save(23, 0, 0), exit(31), bwd(39), bexit(7),
		enter(0), save(0, 0, 0), save(0, 1, 0), exit(0), []byte{12, 1}, []byte{12, 2}, enter(1), exit(1),
		bwd(0), unpack(0), unpack(1), unpack(0), unpack(1), []byte{12, 3}, unpack(200), unpack(250),
		[]byte{11, 0}, []byte{11, 255}, bexit(0), unpack(0), []byte{12, 4}, []byte{13, 2}, []byte{13, 3}))
	// Nested regions: a storage saved by an open region while another group's copy of it runs.
	f.Add(scripted(0, 0, enter(0), save(0, 0, 0), exit(0), enter(1), save(1, 0, 0), enter(2), exit(2),
		unpack(1), exit(1), bwd(1), bwd(0), unpack(0), unpack(1), bexit(1), bexit(0)))
	f.Add([]byte("\x00\x01 a mix of everything the fuzzer may start from: \x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Fuzz(func(t *testing.T, in []byte) { runABI(t, in) })
}
