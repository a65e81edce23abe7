// region.go owns groups and regions: the input/output pointer sets of an open region, the saves made in
// it, and their classification by the ownership rules (first match wins) at region exit.
package tracker

import (
	"fmt"

	"swapagent/trace"
)

type group struct {
	name     string
	live     bool // from EnterRegion until Forget
	inRegion bool
	inputs   map[uint64]bool         // base pointer -> keyword; only while the region is open
	names    map[uint64]trace.Tensor // base pointer -> what the companion said of it; only while open
	saves    []save
	first    map[uint64]int // storage ID -> index of the group's first save of it
	open     int            // index of the open region's first save
	protect  map[uint64]struct{}
}

type save struct {
	sid   uint64
	size  uint64
	flags uint32
	dup   bool
}

// FlagParam marks a save as a parameter or buffer of the wrapped module (SWAPAGENT_SAVE_PARAM).
const FlagParam uint32 = 1

// Saved is the result of Save.
type Saved struct {
	Index     int    // position among the group's saves since it became live
	Storage   uint64 // storage ID
	Gen       uint32
	Duplicate bool // the group already saved this storage: it shares the first save's fate
}

// Class is the classification of one save at region exit.
type Class struct {
	Index   int
	Storage uint64
	Size    uint64
	Reason  Reason // the first matching rule; Duplicate for a repeated save
	Match   Mask   // every rule that matched (policies other than safe pick from it)
	Keyword bool   // when Match has Input: it came from a keyword argument
}

func (t *Tracker) getGroup(name string, create bool) *group {
	g := t.groups[name]
	if g == nil && create {
		g = &group{name: name}
		t.groups[name] = g
	}
	return g
}

// EnterRegion opens a region of group with the storage base pointers of its inputs; the first
// nPositional came from positional arguments, the rest from keyword arguments. Zero pointers are ignored.
// A group that is still live (not forgotten) keeps its earlier saves.
func (t *Tracker) EnterRegion(name string, inputs []uint64, nPositional int) error {
	if name == "" || nPositional < 0 || nPositional > len(inputs) {
		return fmt.Errorf("%w: region_enter(%q, %d inputs, %d positional)", ErrInvalid, name, len(inputs), nPositional)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, true)
	if g.inRegion {
		return fmt.Errorf("%w: group %q is already in its region", ErrOrder, name)
	}
	t.tick()
	g.live, g.inRegion, g.open = true, true, len(g.saves)
	g.inputs, g.names = make(map[uint64]bool, len(inputs)), nil
	for i, p := range inputs {
		if _, seen := g.inputs[p]; p != 0 && !seen {
			g.inputs[p] = i >= nPositional
		}
	}
	return nil
}

// Save registers a storage saved inside group's open region; once CheckPointers was called its range must
// pass the pointer rule (place.go). A pointer that is the base of a held storage of the same size is that
// storage; otherwise it is a new storage, whose generation counts the storages seen at that base (a reused
// address is never confused with its previous owner).
func (t *Tracker) Save(name string, ptr, nbytes uint64, flags uint32) (Saved, error) {
	if ptr == 0 || nbytes == 0 {
		return Saved{}, fmt.Errorf("%w: save of an empty storage (ptr %#x, %d bytes)", ErrInvalid, ptr, nbytes)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	if g == nil || !g.inRegion {
		return Saved{}, fmt.Errorf("%w: save in group %q outside its region", ErrOrder, name)
	}
	if t.host != nil {
		if _, err := t.placeWith(ptr, nbytes, false, hostIndex); err != nil {
			return Saved{}, err
		}
	}
	return t.saveLocked(g, name, ptr, nbytes, flags), nil
}

// SaveN is Save of each entry (ptrs[i], sizes[i], flags[i]; flags nil: all 0) in order under one lock:
// out[i] and errs[i] are what Save would have returned for entry i.
func (t *Tracker) SaveN(name string, ptrs, sizes []uint64, flags []uint32, out []Saved, errs []error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	for i, ptr := range ptrs {
		out[i], errs[i] = Saved{}, nil
		switch {
		case ptr == 0 || sizes[i] == 0:
			errs[i] = fmt.Errorf("%w: save of an empty storage (ptr %#x, %d bytes)", ErrInvalid, ptr, sizes[i])
			continue
		case g == nil || !g.inRegion:
			errs[i] = fmt.Errorf("%w: save in group %q outside its region", ErrOrder, name)
			continue
		case t.host != nil:
			if _, errs[i] = t.placeWith(ptr, sizes[i], false, hostIndex); errs[i] != nil {
				continue
			}
		}
		var f uint32
		if flags != nil {
			f = flags[i]
		}
		out[i] = t.saveLocked(g, name, ptr, sizes[i], f)
	}
}

// saveLocked registers a save whose range passed the pointer rule.
func (t *Tracker) saveLocked(g *group, name string, ptr, nbytes uint64, flags uint32) Saved {
	seq := t.tick()
	var s *storage
	if i, ok := t.mapped.find(ptr); ok {
		if c := t.storages[t.mapped.s[i].id]; c.base == ptr && c.size == nbytes {
			s = c
		}
	}
	if s == nil {
		t.nextID++
		t.gens[ptr]++
		s = &storage{id: t.nextID, base: ptr, addr: ptr, gen: t.gens[ptr], size: nbytes, mapped: true}
		t.storages[s.id] = s
		for _, sp := range t.mapped.insert(span{base: ptr, end: spanEnd(ptr, nbytes), id: s.id}) {
			t.markStale(sp.id, seq)
		}
	}
	s.holds.add(name)
	if g.first == nil {
		g.first = map[uint64]int{}
	}
	_, dup := g.first[s.id]
	if !dup {
		g.first[s.id] = len(g.saves)
	}
	g.saves = append(g.saves, save{sid: s.id, size: nbytes, flags: flags, dup: dup})
	return Saved{Index: len(g.saves) - 1, Storage: s.id, Gen: s.gen, Duplicate: dup}
}

// ExitRegion closes group's region and classifies the saves made in it. Rules, first match wins:
// input, output, protected, param, shared (another live group saved it), small (< minBytes), else internal;
// a repeated save of one storage in the group is Duplicate. The input and output sets are dropped here:
// only integers were ever held, and nothing outlives the region.
func (t *Tracker) ExitRegion(name string, outputs []uint64, minBytes uint64) ([]Class, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	if g == nil || !g.inRegion {
		return nil, fmt.Errorf("%w: region_exit of group %q without region_enter", ErrOrder, name)
	}
	t.tick()
	outs := make(map[uint64]struct{}, len(outputs))
	for _, p := range outputs {
		if p != 0 {
			outs[p] = struct{}{}
		}
	}
	// Remember every input that is a held storage, saved here or not: fault reports name the owner.
	for p, kw := range g.inputs {
		if i, ok := t.mapped.find(p); ok {
			if s := t.storages[t.mapped.s[i].id]; s.base == p {
				s.addInput(name, kw, g.names[p].Path)
			}
		}
	}
	cls := make([]Class, 0, len(g.saves)-g.open)
	for i := g.open; i < len(g.saves); i++ {
		sv := g.saves[i]
		s := t.storages[sv.sid]
		c := Class{Index: i, Storage: sv.sid, Size: sv.size}
		p := s.base
		if p == 0 { // released during the region by another group: compare what the framework saved
			p = s.addr
		}
		if kw, ok := g.inputs[p]; ok {
			c.Match |= bit(Input)
			c.Keyword = kw
		}
		if _, ok := outs[p]; ok {
			c.Match |= bit(Output)
		}
		if _, ok := g.protect[p]; ok {
			c.Match |= bit(Protected)
		}
		if tn := g.names[p]; tn.Known() {
			s.tensor = tn
		}
		if sv.flags&FlagParam != 0 {
			c.Match |= bit(Param)
		}
		if s.holds.other(name) {
			c.Match |= bit(Shared)
		}
		if sv.size < minBytes {
			c.Match |= bit(Small)
		}
		c.Reason = First(c.Match)
		if sv.dup {
			c.Match |= bit(Duplicate)
			c.Reason = Duplicate
		}
		cls = append(cls, c)
	}
	g.inRegion, g.inputs, g.names = false, nil, nil
	return cls, nil
}

// First returns the first rule in m in rule order, Internal when none.
func First(m Mask) Reason {
	for r := Input; r <= Small; r++ {
		if m.Has(r) {
			return r
		}
	}
	return Internal
}

func (s *storage) addInput(group string, kw bool, arg string) {
	if s.inputIx == nil {
		s.inputIx = map[string]int{}
	}
	if i, ok := s.inputIx[group]; ok {
		s.inputs[i].Keyword = kw
		if arg != "" {
			s.inputs[i].Arg = arg
		}
		return
	}
	s.inputIx[group] = len(s.inputs)
	s.inputs = append(s.inputs, InputUse{Group: group, Keyword: kw, Arg: arg})
}

// Describe records what the companion said of the tensors on ptrs in group's open region (tensors[i] of
// ptrs[i]; zero pointers are skipped): at region exit a saved storage takes its dtype and shape, and an
// input use its argument path, so fault reports and owners name the argument instead of an index.
func (t *Tracker) Describe(name string, ptrs []uint64, tensors []trace.Tensor) error {
	if len(ptrs) != len(tensors) {
		return fmt.Errorf("%w: describe with %d pointers and %d tensors", ErrInvalid, len(ptrs), len(tensors))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	if g == nil || !g.inRegion {
		return fmt.Errorf("%w: describe in group %q outside its region", ErrOrder, name)
	}
	if g.names == nil {
		g.names = make(map[uint64]trace.Tensor, len(ptrs))
	}
	for i, p := range ptrs {
		tn := tensors[i]
		if p == 0 || (tn.Path == "" && !tn.Known()) {
			continue
		}
		if old := g.names[p]; tn.Path == "" {
			tn.Path = old.Path // a saved input keeps the name it had as an argument
		}
		g.names[p] = tn
	}
	return nil
}

// Protect marks pointers as explicitly protected for group until it is forgotten. It returns the IDs of
// storages the group already saved and classified (before the open region, if any) that match, so the
// caller can reclassify them; matching is by registration base or current base.
func (t *Tracker) Protect(name string, ptrs []uint64) ([]uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	if g == nil {
		return nil, fmt.Errorf("%w: protect in group %q", ErrGroup, name)
	}
	if g.protect == nil {
		g.protect = map[uint64]struct{}{}
	}
	for _, p := range ptrs {
		if p != 0 {
			g.protect[p] = struct{}{}
		}
	}
	end := len(g.saves)
	if g.inRegion {
		end = g.open
	}
	var ids []uint64
	seen := map[uint64]bool{}
	for _, sv := range g.saves[:end] {
		s := t.storages[sv.sid]
		if seen[s.id] {
			continue
		}
		_, a := g.protect[s.addr]
		_, b := g.protect[s.base]
		if a || (b && s.base != 0) {
			seen[s.id] = true
			ids = append(ids, s.id)
		}
	}
	return ids, nil
}

// Forget ends group's life (backward_exit): its saves are dropped, storages no live group holds any more
// are forgotten (a later save at their address is a new generation), and its protect set is cleared.
func (t *Tracker) Forget(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.getGroup(name, false)
	if g == nil {
		return fmt.Errorf("%w: %q", ErrGroup, name)
	}
	t.tick()
	for _, sv := range g.saves {
		s := t.storages[sv.sid]
		if s == nil {
			continue
		}
		s.holds.drop(name)
		if s.holds.empty() {
			if s.mapped {
				if i, ok := t.mapped.find(s.base); ok && t.mapped.s[i].id == s.id {
					t.mapped.remove(i)
				}
			}
			delete(t.storages, s.id)
		}
	}
	// The save list and first-save map keep their memory for the group's next step.
	saves, first := g.saves[:0], g.first
	clear(first)
	*g = group{name: name, saves: saves, first: first}
	return nil
}

// SavedByOthers reports whether a live group other than group holds storage id: the shared rule, asked
// again when an offload is about to release it (another region may have saved it since the copy began).
func (t *Tracker) SavedByOthers(id uint64, group string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if s := t.storages[id]; s != nil {
		return s.holds.other(group)
	}
	return false
}

// Known reports whether group ever entered a region.
func (t *Tracker) Known(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.groups[name] != nil
}

// Live reports whether group is live: from its EnterRegion until Forget.
func (t *Tracker) Live(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	g := t.groups[name]
	return g != nil && g.live
}

// NoteInput records that group received storage id as an input while the storage had no device memory
// (its address was 0): the framework still passed it, so fault reports name every group that needed it.
func (t *Tracker) NoteInput(id uint64, group string, keyword bool, arg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.storages[id]; s != nil {
		s.addInput(group, keyword, arg)
	}
}
