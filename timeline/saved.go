package timeline

import "swapagent/trace"

// Saved follows the storages the groups saved for backward, each counted once by its base: from its first
// save until the successful backward exit of the last group that saved it (or that group's next region
// enter, where the agent ends a forward that never exited). It is what a job without swap holds for its
// layers' backward, whatever the device: replay and plan use it as the footprint where the trace records
// no device allocation (a framework computing on the host).
type Saved struct {
	Memory
	refs    map[uint64]int             // base -> groups holding a save of it
	byGroup map[uint32]map[uint64]bool // group -> the bases it saved since its last backward exit
}

// save counts a KindSave's storage, once per group and base; a refused save (no handle) saved nothing.
func (s *Saved) save(ev *trace.Event) {
	base, size := ev.Args[0], ev.Args[1]
	if ev.Handle == 0 || base == 0 || size == 0 {
		return
	}
	if s.byGroup == nil {
		s.refs, s.byGroup = map[uint64]int{}, map[uint32]map[uint64]bool{}
	}
	bases := s.byGroup[ev.Group]
	if bases == nil {
		bases = map[uint64]bool{}
		s.byGroup[ev.Group] = bases
	}
	if bases[base] {
		return
	}
	bases[base] = true
	if s.refs[base]++; s.refs[base] == 1 {
		s.Alloc(ev.TS, base, size)
	}
}

// end drops the saves of ev's group: its backward exit succeeded, or it enters a new forward.
func (s *Saved) end(ev *trace.Event) {
	for base := range s.byGroup[ev.Group] {
		if s.refs[base]--; s.refs[base] == 0 {
			delete(s.refs, base)
			s.Free(ev.TS, base)
		}
	}
	delete(s.byGroup, ev.Group)
}
