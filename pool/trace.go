package pool

import (
	"sort"
	"strconv"
	"strings"

	"swapagent/trace"
)

// Blocks follows a recording's pool blocks from what its trace says of them, and drives a Model with them.
// The trace records no block call (the pool hands blocks out without the runtime), so blocks are read from
// the tensors (aclCreateTensor: a storage's base is the tensor's data address less its offset, its size the
// storage extent; aclSetTensorAddr: a cached tensor pointed at a new address) and the device side of copies:
// a block starts at the first tensor or copy at an address no live block holds. It ends when the recording
// placed another block over it (the pool had it back by then), or when its mapping was unmapped (VMM: the
// pool's empty cache found it free, and the model empties its cache there too).
//
// The recording's own swap (its KindState releases and restores) is undone: a storage it released stays in
// the model, and its restored base is the same block. So the model is the job without the recording's swap;
// a simulated swap releases and restores blocks itself (Release, Restore). The pool's kind and step come from
// the recording's first allocation (aclrtMapMem: VMM, its size the step; aclrtMalloc: DefaultStep) unless
// its metadata gives them (MetaKind, MetaStep, MetaAlign).
type Blocks struct {
	M *Model // nil until the recording's first device allocation
	// recorded: a first pass (no Schedule yet): the recording's own swap stands (its releases free their
	// blocks, its restores take new ones), so the model is the recording itself, and its peak against the
	// one the trace shows says whether the model follows this pool (Schedule.Fits).
	recorded bool
	// held, heldPeak: the device bytes the trace shows the pool holding (allocations and mappings).
	held, heldPeak uint64
	meta           trace.Meta
	// live: the recorded blocks by base (sorted; a step's storages, a few hundred).
	live []span
	// blocks: every block's size and last use, by id (ids count up from 1: a slice, not a map, so that
	// a long recording's first pass costs a few words a block).
	blocks []blockRec
	next   int64
	// device: the recording's allocations and mappings (base -> size), to tell device pointers of copies.
	device map[uint64]uint64
	// tensors: what each tensor handle was made with, for aclSetTensorAddr, which says only the address;
	// pending: those made since the last op; execs: each executor's written tensor and the addresses set.
	tensors map[uint64]tensorRec
	pending []uint64
	execs   map[uint64]execRec
	// handles: the recorded swap handles' bases (KindSave, KindState); moved: the blocks of the storages the
	// recording holds released, by handle.
	handles map[int64]uint64
	moved   map[int64]int64
	// names: function names and classes by id (KindFunc).
	names map[uint16]funcInfo

	// n: the events followed so far; cur: the event being followed. sched: the frees of a Schedule to
	// follow, by event; freed: how many of them are behind.
	n, cur int
	// scopes: every region, backward and declared scope so far, in the order they opened; open: those open
	// now, innermost last.
	scopes []scopeRec
	open   []int32
	sched  *Schedule
	freed  int
}

// scopeRec is one region, backward or declared scope: the one it opened in (-1: none) and the event that
// closed it (-1: still open).
type scopeRec struct {
	parent int32
	exit   int
}

// blockRec is what a pass knows of one block: its size, the event of its last use, and the innermost scope
// open at that use and at its birth (-1: none).
type blockRec struct {
	size            uint64
	lastUse         int
	useScope, birth int32
}

// Schedule is what a first pass over a recording (in which its own swap stands) found for the second:
// when its blocks end, by the event before which each is freed, and whether the model follows its pool.
// The trace shows where a block was last used, not where the job let it go. The scopes say it: the
// regions, the backwards, and the scopes a job declares without swapping them (SWAPAGENT_CALL_SCOPE_ENTER:
// the layers it does not swap, a function inside a layer, a backward node); they nest. A framework frees a
// scope's temporaries when the scope returns, a value a scope consumed (an input gradient a backward node
// took) when that scope returns, and a layer's saved tensors when its backward returns (decoder-sim: before
// region_exit or scope_exit, after backward_exit). So a block last used in a scope ends where that scope
// closes when it holds the block's making too; else where the scope open at its last use just inside the
// innermost one that holds both closes (the backward node that took a gradient; for a tensor a layer's
// forward saved, the layer's backward), the outermost open at the use when none does (ending). A scope
// around everything (a job's whole step, one never exited) so changes nothing. Without nested scopes that
// is the first region or backward boundary after its last use. A block made in a scope and last used with none open (a gradient the optimizer reads, the
// last layer's output the loss reads) is the step's own, which a framework frees when its last reference
// dies: it ends right after the last kernel or copy that used it. A block made and last used with no scope
// open may be a layer's the job does not declare, held past its last use (its saved tensors until its
// backward ends, a function's temporaries until it returns), which the trace does not show: it ends only
// where the recording places another over it. A block used up to the end (or last used in a scope that
// never closed) is never freed.
type Schedule struct {
	frees []scheduledFree // by event
	// Fits: the model of the recording as it ran, following this schedule (NewCheck), peaked within one
	// step of the peak the trace shows. Where it does not (another pool's rules), readers keep their estimate.
	Fits bool
}

type scheduledFree struct {
	at int // the event before which the block is freed
	id int64
}

type span struct {
	base, size uint64
	id         int64
}

type funcInfo struct {
	name  string
	class trace.Class
}

type tensorRec struct{ addr, extent, offsetBytes uint64 }

type execRec struct {
	out   int
	bases [3]uint64
}

// Metadata keys a job may record (SWAPAGENT_CALL_NOTE) to say its pool's parameters.
const (
	MetaKind  = "pool_kind"  // malloc or vmm
	MetaStep  = "pool_step"  // bytes of a chunk or mapping
	MetaAlign = "pool_align" // block rounding in bytes
)

// NewBlocks follows a recording whose metadata so far is meta (may be nil): with sched nil, a first pass
// (Schedule); else the job without the recording's swap, its blocks freed by sched, the Schedule of a first
// pass over the same events.
func NewBlocks(meta trace.Meta, sched *Schedule) *Blocks {
	return &Blocks{meta: meta, recorded: sched == nil, blocks: []blockRec{{}}, device: map[uint64]uint64{},
		tensors: map[uint64]tensorRec{}, execs: map[uint64]execRec{}, handles: map[int64]uint64{}, moved: map[int64]int64{},
		names: map[uint16]funcInfo{}, sched: sched}
}

// Schedule is what a first pass found in the events followed so far, for a second pass over them.
func (b *Blocks) Schedule() *Schedule {
	s := &Schedule{}
	for id := 1; id < len(b.blocks); id++ {
		r := b.blocks[id]
		switch {
		case r.useScope >= 0:
			if at := b.scopes[b.ending(r.birth, r.useScope)].exit; at >= 0 {
				s.frees = append(s.frees, scheduledFree{at, int64(id)})
			}
		case r.birth >= 0 && r.lastUse+1 < b.n:
			s.frees = append(s.frees, scheduledFree{r.lastUse + 1, int64(id)})
		}
	}
	sort.SliceStable(s.frees, func(i, j int) bool { return s.frees[i].at < s.frees[j].at })
	return s
}

// ending is the scope whose close ends a block made in scope birth (-1: none) and last used in scope use
// (>= 0): use itself when it holds the birth too (a temporary of use); else the scope open at the use just
// inside the innermost one that also holds the birth (the scope that took the block in: a backward, for a
// tensor a layer's forward saved), or the outermost open at the use when none holds both. A scope around
// them all (a job's whole step, or one never exited) so changes nothing.
func (b *Blocks) ending(birth, use int32) int32 {
	if b.holds(use, birth) {
		return use
	}
	c := use
	for p := b.scopes[c].parent; p >= 0 && !b.holds(p, birth); p = b.scopes[c].parent {
		c = p
	}
	return c
}

// holds says whether scope s is scope t or one it opened in.
func (b *Blocks) holds(s, t int32) bool {
	for ; t >= 0; t = b.scopes[t].parent {
		if t == s {
			return true
		}
	}
	return false
}

// scope is the innermost scope open now (-1: none).
func (b *Blocks) scope() int32 {
	if len(b.open) == 0 {
		return -1
	}
	return b.open[len(b.open)-1]
}

// NewCheck follows the recording as it ran (its own swap stands) by sched, to tell whether the model
// follows its pool (Schedule.Check).
func NewCheck(meta trace.Meta, sched *Schedule) *Blocks {
	b := NewBlocks(meta, sched)
	b.recorded = true
	return b
}

// Check sets Fits from c, a NewCheck that followed the whole recording: its model peaked within one step of
// the peak the trace shows.
func (s *Schedule) Check(c *Blocks) {
	s.Fits = c.M != nil && c.next > 0 && c.M.HeldPeak() <= c.heldPeak+c.M.cfg.Step &&
		c.heldPeak <= c.M.HeldPeak()+c.M.cfg.Step
}

// ScheduleOf is the Schedule of events, checked: a first pass, then a NewCheck pass.
func ScheduleOf(meta trace.Meta, events []trace.Event) *Schedule {
	b := NewBlocks(meta, nil)
	for i := range events {
		b.Add(&events[i])
	}
	s := b.Schedule()
	c := NewCheck(meta, s)
	for i := range events {
		c.Add(&events[i])
	}
	s.Check(c)
	return s
}

// Followed says whether the model followed blocks (a first pass as well).
func (b *Blocks) Followed() bool { return b != nil && b.M != nil && b.next > 0 }

// Active says whether the model's figures stand: a second pass (NewBlocks with a Schedule) of a recording
// whose pool the model follows (Schedule.Fits), which allocated device memory and showed tensors in it (a
// trace at level memory shows none: its readers keep their estimate).
func (b *Blocks) Active() bool {
	return b != nil && !b.recorded && b.sched.Fits && b.M != nil && b.next > 0
}

// config is the pool's configuration from the metadata, else from the first allocation (a call of fn).
func (b *Blocks) config(fn string, size uint64) Config {
	c := Config{Kind: Malloc}
	if fn == "aclrtMapMem" {
		c.Kind, c.Step = VMM, size
	}
	if b.meta != nil {
		switch b.meta[MetaKind] {
		case "vmm":
			c.Kind = VMM
		case "malloc":
			c.Kind = Malloc
		}
		if v, ok := metaUint(b.meta, MetaStep); ok && v > 0 {
			c.Step = v
		}
		if v, ok := metaUint(b.meta, MetaAlign); ok && v > 0 {
			c.Align = v
		}
	}
	return c
}

func metaUint(m trace.Meta, key string) (uint64, bool) {
	v, err := strconv.ParseUint(m[key], 10, 64)
	return v, err == nil
}

// dtypeSize is the bytes of an aclDataType's element (a tensor's offset counts elements); 0 unknown.
func dtypeSize(dt uint64) uint64 {
	switch dt {
	case 0, 3, 8: // float, int32, uint32
		return 4
	case 1, 6, 7, 27: // float16, int16, uint16, bfloat16
		return 2
	case 2, 4, 12: // int8, uint8, bool
		return 1
	case 9, 10, 11: // int64, uint64, double
		return 8
	}
	return 0
}

// find is the index of the live block holding addr, or -1.
func (b *Blocks) find(addr uint64) int {
	i := sort.Search(len(b.live), func(i int) bool { return b.live[i].base > addr }) - 1
	if i >= 0 && addr-b.live[i].base < b.live[i].size {
		return i
	}
	return -1
}

// At is the id of the recorded block holding addr (0: none).
func (b *Blocks) At(addr uint64) int64 {
	if i := b.find(addr); i >= 0 {
		return b.live[i].id
	}
	return 0
}

// index puts block id at [base, base+size) of the recording, ending the blocks it overlaps.
func (b *Blocks) index(base, size uint64, id int64) {
	b.unindex(base, size, true)
	i := sort.Search(len(b.live), func(i int) bool { return b.live[i].base > base })
	b.live = append(b.live, span{})
	copy(b.live[i+1:], b.live[i:])
	b.live[i] = span{base, size, id}
}

// unindex takes every block overlapping [base, base+size) out of the recording's map, freeing them in the
// model when free is set.
func (b *Blocks) unindex(base, size uint64, free bool) {
	i := sort.Search(len(b.live), func(i int) bool { return b.live[i].base+b.live[i].size > base })
	j := i
	for j < len(b.live) && b.live[j].base < base+size {
		if free {
			b.M.Free(b.live[j].id)
		}
		j++
	}
	b.live = append(b.live[:i], b.live[j:]...)
}

// use says that the recording used [base, base+size) as a block: a new one unless a live block holds base.
func (b *Blocks) use(base, size uint64) {
	if base == 0 || size == 0 || b.M == nil {
		return
	}
	if i := b.find(base); i >= 0 {
		r := &b.blocks[b.live[i].id]
		r.lastUse, r.useScope = b.cur, b.scope()
		return
	}
	size = b.M.Round(size)
	b.next++
	b.blocks = append(b.blocks, blockRec{size: size, lastUse: b.cur, useScope: b.scope(), birth: b.scope()})
	b.index(base, size, b.next)
	b.M.Alloc(b.next, size)
}

// Release gives block id back to the pool (a simulated release).
func (b *Blocks) Release(id int64) {
	if b.M != nil {
		b.M.Free(id)
	}
}

// Restore gives block id memory again (a simulated restore; a live block stays as it is).
func (b *Blocks) Restore(id int64) {
	if b.M != nil && id != 0 && !b.M.Live(id) {
		b.M.Alloc(id, b.blocks[id].size)
	}
}

// Add follows the recording's next event.
func (b *Blocks) Add(ev *trace.Event) {
	b.cur = b.n
	b.n++
	if b.M != nil && b.sched != nil {
		for f := b.sched.frees; b.freed < len(f) && f[b.freed].at <= b.cur; b.freed++ {
			if f[b.freed].at == b.cur {
				b.M.Free(f[b.freed].id)
			}
		}
	}
	switch ev.Kind {
	case trace.KindRegionEnter, trace.KindBackwardEnter, trace.KindScopeEnter:
		b.scopes = append(b.scopes, scopeRec{parent: b.scope(), exit: -1})
		b.open = append(b.open, int32(len(b.scopes)-1))
	case trace.KindRegionExit, trace.KindBackwardExit, trace.KindScopeExit:
		if k := len(b.open) - 1; k >= 0 {
			b.scopes[b.open[k]].exit = b.cur
			b.open = b.open[:k]
		}
	case trace.KindEmptyCache: // the job's pool emptied its cache, with or without something to unmap
		if b.M != nil {
			b.M.EmptyCache()
		}
	case trace.KindFunc:
		b.names[ev.Fn] = funcInfo{ev.Text, trace.ClassOf(ev.Text)}
	case trace.KindMeta:
		if b.meta == nil {
			b.meta = trace.Meta{}
		}
		b.meta.Parse(ev.Text)
	case trace.KindCall:
		b.call(ev)
	case trace.KindSave:
		b.handles[ev.Handle] = ev.Args[0]
		if id := b.At(ev.Args[0]); id != 0 { // saved for backward: in use until then
			b.blocks[id].lastUse, b.blocks[id].useScope = b.cur, b.scope()
		}
	case trace.KindState:
		b.state(ev)
	case trace.KindGuard:
		if ev.Handle != 0 && ev.Args[2] == trace.ReleaseAllow {
			b.handles[ev.Handle] = ev.Args[0]
		}
	}
}

// state undoes the recording's swap: a released storage's block stays in the model, out of the recording's
// map (the recording's pool reuses its range); restored, its new base is the same block.
func (b *Blocks) state(ev *trace.Event) {
	from, to, base := ev.Args[0], ev.Args[1], ev.Args[2]
	switch {
	case to == trace.StateHost && from != trace.StateHost:
		if i := b.find(b.handles[ev.Handle]); i >= 0 {
			b.moved[ev.Handle] = b.live[i].id
			if b.recorded {
				b.M.Free(b.live[i].id)
			}
			b.live = append(b.live[:i], b.live[i+1:]...)
		}
	case from == trace.StateHost && base != 0:
		b.handles[ev.Handle] = base
		if id, ok := b.moved[ev.Handle]; ok {
			delete(b.moved, ev.Handle)
			b.index(base, b.blocks[id].size, id)
			if b.recorded {
				b.M.Alloc(id, b.blocks[id].size)
			}
		}
	}
}

func (b *Blocks) call(ev *trace.Event) {
	fi := b.names[ev.Fn]
	name, c := fi.name, fi.class
	if ev.Ret != 0 && c != trace.ClassTensor {
		return
	}
	switch c {
	case trace.ClassDeviceAlloc:
		if ev.Args[0] == 0 {
			return
		}
		if b.M == nil {
			b.M = New(b.config(name, ev.Args[1]))
		}
		b.device[ev.Args[0]] = ev.Args[1]
		b.held += ev.Args[1]
		b.heldPeak = max(b.heldPeak, b.held)
	case trace.ClassDeviceFree:
		size, ok := b.device[ev.Args[0]]
		if !ok {
			return
		}
		delete(b.device, ev.Args[0])
		b.held -= min(size, b.held)
		if b.M.cfg.Kind == VMM { // the pool's empty cache: what lay there was free
			b.unindex(ev.Args[0], size, true)
			b.M.EmptyCache()
		}
	case trace.ClassTensor:
		if ev.Args[0] != 0 {
			b.tensors[ev.Args[0]] = tensorRec{addr: ev.Args[1], extent: ev.Args[2],
				offsetBytes: ev.Args[4] * max(dtypeSize(ev.Args[3]), 1)}
		}
		b.pending = append(b.pending, ev.Args[0])
	case trace.ClassLaunch:
		b.flush()
	case trace.ClassCopyAsync:
		b.copyUse(ev.Args[1], ev.Args[2], false)
		b.copyUse(ev.Args[0], ev.Args[2], true)
	default:
		switch {
		case strings.HasSuffix(name, "GetWorkspaceSize"):
			b.workspace(name, ev)
		case name == "aclSetTensorAddr":
			b.setAddr(ev)
		case name == "aclDestroyTensor":
			delete(b.tensors, ev.Args[0])
		case name == "aclrtMemcpy":
			b.copyUse(ev.Args[1], ev.Args[2], false)
			b.copyUse(ev.Args[0], ev.Args[2], true)
		}
	}
}

// outIndex is the position of the tensor an aclnn op writes among its GetWorkspaceSize tensors (self,
// other/mat2/src, out): InplaceCopy writes its selfRef, the others their out.
func outIndex(op string) int {
	if strings.HasPrefix(op, "aclnnInplace") {
		return 0
	}
	return 2
}

// workspace is an op's GetWorkspaceSize: its tensors are Args[0..2]. The one it writes, when no other of
// them lies in the same block, is a new storage (a framework writes an op's result into a tensor it has just
// made): whatever block the recording had there is gone. The others are uses.
func (b *Blocks) workspace(name string, ev *trace.Event) {
	out := outIndex(name)
	if ev.Args[4] != 0 {
		b.execs[ev.Args[4]] = execRec{out: out}
	}
	var bases [3]uint64
	for i := 0; i < 3; i++ {
		if t, ok := b.tensors[ev.Args[i]]; ok && ev.Args[i] != 0 && t.addr != 0 {
			bases[i] = t.addr - min(t.offsetBytes, t.addr)
		}
	}
	for i := 0; i < 3; i++ {
		if i != out {
			b.tensorUse(ev.Args[i])
		}
	}
	inPlace := false
	for i := 0; i < 3; i++ {
		inPlace = inPlace || i != out && bases[i] != 0 && bases[i] == bases[out]
	}
	if t, ok := b.tensors[ev.Args[out]]; ok && !inPlace && bases[out] != 0 {
		b.birth(bases[out], t.extent)
	}
	b.tensorUse(ev.Args[out])
	b.flush()
}

// setAddr is aclSetTensorAddr: a cached executor's tensor index Args[1] (handle Args[2]) now at Args[3],
// set in index order before the executor's launch; its written tensor is a new storage as in workspace.
func (b *Blocks) setAddr(ev *trace.Event) {
	t, ok := b.tensors[ev.Args[2]]
	if !ok || ev.Args[3] == 0 {
		return
	}
	t.addr = ev.Args[3]
	b.tensors[ev.Args[2]] = t
	base := t.addr - min(t.offsetBytes, t.addr)
	x := b.execs[ev.Args[0]]
	idx := int(ev.Args[1])
	if idx < len(x.bases) {
		x.bases[idx] = base
	}
	if idx == x.out {
		inPlace := false
		for i, o := range x.bases {
			inPlace = inPlace || i != idx && o == base
		}
		if !inPlace {
			b.birth(base, t.extent)
		}
	}
	if idx >= x.out { // a launch's addresses are set in index order: the written one's ends the round
		x.bases = [3]uint64{}
	}
	b.execs[ev.Args[0]] = x
	b.use(base, t.extent)
}

// flush takes the tensors made since the last op as uses (a tensor no op named).
func (b *Blocks) flush() {
	for _, h := range b.pending {
		b.tensorUse(h)
	}
	b.pending = b.pending[:0]
}

// tensorUse is a use of tensor handle h's storage.
func (b *Blocks) tensorUse(h uint64) {
	if t, ok := b.tensors[h]; ok && h != 0 && t.addr != 0 && t.extent != 0 {
		b.use(t.addr-min(t.offsetBytes, t.addr), t.extent)
	}
}

// birth ends the recorded block at base: a new storage is made there.
func (b *Blocks) birth(base, size uint64) {
	if b.M != nil && b.find(base) >= 0 {
		b.unindex(base, max(size, 1), true)
	}
}

// copyUse is a copy's device side at p of n bytes: a block when p is device memory no block holds; the
// destination of a copy from the host is a new storage (birth).
func (b *Blocks) copyUse(p, n uint64, dst bool) {
	if p == 0 || b.M == nil || !b.isDevice(p) {
		return
	}
	if dst && b.find(p) >= 0 && b.live[b.find(p)].base == p {
		b.birth(p, n)
	}
	b.use(p, n)
}

func (b *Blocks) isDevice(p uint64) bool {
	for base, size := range b.device {
		if p >= base && p-base < size {
			return true
		}
	}
	return false
}

// Check is Schedule.Check of the schedule b follows.
func (b *Blocks) Check(c *Blocks) {
	if b.sched != nil {
		b.sched.Check(c)
	}
}
