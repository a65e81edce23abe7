// tracker.go owns the Tracker: device allocations learnt from runtime events, the storages saved by
// groups (base pointer plus generation), and the release/free history used for fault attribution.
package tracker

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"swapagent/trace"
)

// Tracker is safe for concurrent use. Lookups take a read lock only.
type Tracker struct {
	mu   sync.RWMutex
	seq  uint64
	now  func() int64
	hist history

	allocs    spans // live device allocations and VMM mappings; span.id = the Alloc's sequence number
	liveBytes uint64
	resv      spans     // VMM reservations (address space, not memory)
	host      *HostMaps // set by CheckPointers: storages must pass the pointer rule (place.go)

	storages map[uint64]*storage // held storages by ID
	mapped   spans               // storages with a current base; span.id = storage ID
	gens     map[uint64]uint32   // last generation handed out per base
	nextID   uint64

	groups map[string]*group
}

type storage struct {
	id       uint64
	base     uint64 // current base; 0 while released
	addr     uint64 // base at registration
	gen      uint32
	size     uint64
	mapped   bool
	freed    bool // its memory was freed or reused under it: never copy from or release it
	released bool
	relBy    string
	relSeq   uint64
	holds    holders // live groups that saved it, with their save counts
	inputs   []InputUse
	inputIx  map[string]int
	tensor   trace.Tensor // dtype and shape, when the companion described it
}

// InputUse says that a group received the storage as a region input, as the argument Arg when the
// companion named it ("rotary_cos_sin[0]").
type InputUse struct {
	Group   string `json:"group"`
	Keyword bool   `json:"keyword"`
	Arg     string `json:"arg,omitempty"`
}

// StorageInfo is a snapshot of one storage.
type StorageInfo struct {
	ID         uint64     `json:"id"`
	Base       uint64     `json:"base"` // current base, 0 while released
	Addr       uint64     `json:"addr"` // base when first saved
	Gen        uint32     `json:"gen"`
	Size       uint64     `json:"size"`
	Released   bool       `json:"released"`
	ReleasedBy string     `json:"released_by,omitempty"`
	Freed      bool       `json:"freed"`
	Holders    []string   `json:"holders,omitempty"` // live groups that saved it
	Inputs     []InputUse `json:"inputs,omitempty"`
	// Tensor is the dtype and shape the companion gave (zero when it did not).
	Tensor trace.Tensor `json:"-"`
}

// Name is the storage's identity as "0xADDR#GEN".
func (s StorageInfo) Name() string { return fmt.Sprintf("%#x#%d", s.Addr, s.Gen) }

// Owner describes who owns the storage outside the groups that saved it, for fault reports, e.g.
// "keyword input rotary_cos_sin[0] of layer.0..layer.10" ("keyword input of ..." when the companion did
// not name the argument); empty when it was nobody's input. Keyword uses come first, then positional,
// each argument name in the order first seen.
func (s StorageInfo) Owner() string {
	if len(s.Inputs) == 0 {
		return ""
	}
	type use struct {
		keyword bool
		arg     string
	}
	var order []use
	groups := map[use][]string{}
	seen := map[InputUse]bool{}
	for _, in := range s.Inputs {
		if seen[in] {
			continue
		}
		seen[in] = true
		u := use{in.Keyword, in.Arg}
		if groups[u] == nil {
			order = append(order, u)
		}
		groups[u] = append(groups[u], in.Group)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].keyword && !order[j].keyword })
	parts := make([]string, len(order))
	for i, u := range order {
		kind := "positional input "
		if u.keyword {
			kind = "keyword input "
		}
		if u.arg != "" {
			kind += u.arg + " "
		}
		parts[i] = kind + "of " + GroupList(groups[u])
	}
	return strings.Join(parts, ", ")
}

// Describe is the storage's tensor as people read it, "float32 [32, 1, 1, 16]" when the companion told,
// else a guess from its size marked as one ("1024 x 1 bf16/fp16, guessed from the size"; guess is the
// caller's, since sizes are explained outside the tracker), else "".
func (s StorageInfo) Describe(guess func(size uint64) string) string {
	if d := s.Tensor.String(); d != "" {
		return d
	}
	if guess == nil {
		return ""
	}
	if g := guess(s.Size); g != "" {
		return g + ", guessed from the size"
	}
	return ""
}

// GroupList writes group names sorted, with runs of three or more consecutive "prefix.N" (or "prefix_N",
// hyper-parallel's swap_group_N) as "prefix.A..prefix.B", comma-separated: "layer.0..layer.10",
// "layer.0,layer.1", "swap_group_0..swap_group_4".
func GroupList(names []string) string {
	type gi struct {
		prefix string
		n      int
		ok     bool
		name   string
	}
	items := make([]gi, len(names))
	for i, name := range names {
		items[i].name = name
		if dot := strings.LastIndexAny(name, "._"); dot >= 0 {
			if _, err := fmt.Sscanf(name[dot+1:], "%d", &items[i].n); err == nil &&
				fmt.Sprint(items[i].n) == name[dot+1:] {
				items[i].prefix, items[i].ok = name[:dot], true
			}
		}
	}
	sort.SliceStable(items, func(a, b int) bool {
		x, y := items[a], items[b]
		if x.ok && y.ok && x.prefix == y.prefix {
			return x.n < y.n
		}
		if x.ok != y.ok {
			return x.ok
		}
		return x.name < y.name
	})
	var out []string
	for i := 0; i < len(items); {
		j := i
		for items[i].ok && j+1 < len(items) && items[j+1].ok && items[j+1].prefix == items[i].prefix &&
			items[j+1].n == items[j].n+1 {
			j++
		}
		switch {
		case j-i >= 2:
			out = append(out, items[i].name+".."+items[j].name)
		default:
			for k := i; k <= j; k++ {
				out = append(out, items[k].name)
			}
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// Allocation is one live device allocation.
type Allocation struct {
	Base uint64
	Size uint64
	Seq  uint64 // sequence number of the Alloc that created it
}

// New returns an empty Tracker.
func New() *Tracker {
	return &Tracker{
		now:      func() int64 { return time.Now().UnixNano() },
		hist:     newHistory(HistoryCap),
		storages: map[uint64]*storage{},
		gens:     map[uint64]uint32{},
		groups:   map[string]*group{},
	}
}

func (t *Tracker) tick() uint64 { t.seq++; return t.seq }

// Alloc records a device allocation. An allocation overlapping older ones means their frees were missed:
// they are dropped, and storages inside the new range are marked freed (their address was reused).
func (t *Tracker) Alloc(ptr, size uint64) {
	if ptr == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.tick()
	end := spanEnd(ptr, size)
	for _, old := range t.allocs.insert(span{base: ptr, end: end, id: seq}) {
		t.liveBytes -= old.end - old.base
		t.hist.add(Record{Kind: RecFreed, Seq: seq, Time: t.now(), Base: old.base, Size: old.end - old.base})
	}
	t.liveBytes += end - ptr
	t.staleRange(ptr, end, seq)
}

// Free records the free of the allocation based at ptr; false when ptr is not a known allocation base.
// Storages inside it are marked freed, so a later save at the same address is a new generation.
func (t *Tracker) Free(ptr uint64) (Allocation, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.allocs.find(ptr)
	if !ok || t.allocs.s[i].base != ptr {
		return Allocation{}, false
	}
	sp := t.allocs.remove(i)
	seq := t.tick()
	a := Allocation{Base: sp.base, Size: sp.end - sp.base, Seq: sp.id}
	t.liveBytes -= a.Size
	t.hist.add(Record{Kind: RecFreed, Seq: seq, Time: t.now(), Base: a.Base, Size: a.Size})
	t.staleRange(sp.base, sp.end, seq)
	if t.host != nil { // a save checks host ranges against the index, which may still list that memory
		t.host.Invalidate()
	}
	return a, true
}

// staleRange unmaps storages intersecting [lo, hi): their memory is gone.
func (t *Tracker) staleRange(lo, hi, seq uint64) {
	for _, sp := range t.mapped.removeRange(lo, hi) {
		t.markStale(sp.id, seq)
	}
}

func (t *Tracker) markStale(id, seq uint64) {
	s := t.storages[id]
	if s == nil {
		return
	}
	s.mapped, s.freed = false, true
	t.hist.add(Record{Kind: RecStale, Seq: seq, Time: t.now(), Storage: s.id, Base: s.base, Gen: s.gen, Size: s.size})
}

// Lookup returns the live allocation containing addr.
func (t *Tracker) Lookup(addr uint64) (Allocation, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i, ok := t.allocs.find(addr)
	if !ok {
		return Allocation{}, false
	}
	sp := t.allocs.s[i]
	return Allocation{Base: sp.base, Size: sp.end - sp.base, Seq: sp.id}, true
}

// Allocations returns the number and total size of live allocations.
func (t *Tracker) Allocations() (int, uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.allocs.s), t.liveBytes
}

// LookupStorage returns the held storage whose current range contains addr.
func (t *Tracker) LookupStorage(addr uint64) (StorageInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i, ok := t.mapped.find(addr)
	if !ok {
		return StorageInfo{}, false
	}
	return t.info(t.storages[t.mapped.s[i].id]), true
}

// Storage returns a snapshot of a held storage.
func (t *Tracker) Storage(id uint64) (StorageInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.storages[id]
	if s == nil {
		return StorageInfo{}, false
	}
	return t.info(s), true
}

// Base returns a held storage's current base (0 while released) and whether its memory may be used:
// known, not released and not freed under it.
func (t *Tracker) Base(id uint64) (uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := t.storages[id]
	if s == nil {
		return 0, false
	}
	return s.base, s.mapped && !s.freed
}

func (t *Tracker) info(s *storage) StorageInfo {
	in := StorageInfo{ID: s.id, Base: s.base, Addr: s.addr, Gen: s.gen, Size: s.size,
		Released: s.released, ReleasedBy: s.relBy, Freed: s.freed,
		Inputs: append([]InputUse(nil), s.inputs...), Tensor: s.tensor}
	in.Holders = s.holds.names()
	sortStrings(in.Holders)
	return in
}

// Released records that group released storage id's device memory (the framework's resize_(0)).
func (t *Tracker) Released(id uint64, group string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.storages[id]
	if s == nil || !s.mapped {
		return fmt.Errorf("%w: storage %d is not on device", ErrInvalid, id)
	}
	if i, ok := t.mapped.find(s.base); ok && t.mapped.s[i].id == id {
		t.mapped.remove(i)
	}
	seq := t.tick()
	t.hist.add(Record{Kind: RecReleased, Seq: seq, Time: t.now(), Storage: id, Base: s.base, Gen: s.gen, Size: s.size, Group: group})
	s.mapped, s.base, s.relBy, s.relSeq, s.released = false, 0, group, seq, true
	return nil
}

// Restored records that a released storage has device memory again at base (which must pass the pointer
// rule, writable, once CheckPointers was called).
func (t *Tracker) Restored(id, base uint64) error { return t.restored(id, base, true) }

// RestoredByFramework is Restored for a storage whose framework restored it and copies its bytes back
// itself (the guard): the agent writes nothing there, so the pointer rule is not asked.
func (t *Tracker) RestoredByFramework(id, base uint64) error { return t.restored(id, base, false) }

func (t *Tracker) restored(id, base uint64, prove bool) error {
	if base == 0 {
		return fmt.Errorf("%w: restore to address 0", ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.storages[id]
	if s == nil || !s.released {
		return fmt.Errorf("%w: storage %d is not released", ErrInvalid, id)
	}
	if prove && t.host != nil { // the agent copies the storage's bytes into it next
		if _, err := t.placeLocked(base, s.size, true); err != nil {
			return err
		}
	}
	seq := t.tick()
	for _, sp := range t.mapped.insert(span{base: base, end: spanEnd(base, s.size), id: id}) {
		t.markStale(sp.id, seq)
	}
	s.base, s.mapped, s.freed, s.released = base, true, false, false
	return nil
}

// FindRecent returns the most recent history record (release, free, stale storage) whose range held addr.
func (t *Tracker) FindRecent(addr uint64) (Record, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.hist.find(func(r *Record) bool { return addr >= r.Base && addr < spanEnd(r.Base, r.Size) })
}

// FindSize returns up to max recent history records of exactly size bytes, newest first.
func (t *Tracker) FindSize(size uint64, max int) []Record {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.hist.all(func(r *Record) bool { return r.Size == size }, max)
}

// History returns up to max recent records, newest first (max <= 0: all kept).
func (t *Tracker) History(max int) []Record {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.hist.all(func(*Record) bool { return true }, max)
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
