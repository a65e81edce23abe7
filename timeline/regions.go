package timeline

import (
	"slices"
	"sort"

	"swapagent/trace"
	"swapagent/tracker"
)

// RegionUse is one group receiving a pointer as a region input.
type RegionUse struct {
	Group   uint32
	Keyword bool   // a keyword argument (after the positional ones)
	Arg     string // the argument's path, when the companion named it ("rotary_cos_sin[0]")
}

// regionEnter records a region's inputs, their descriptions, and the start of a step.
func (t *Timeline) regionEnter(ev *trace.Event) {
	if !t.first.seen {
		t.first.group, t.first.seen = ev.Group, true
	}
	if ev.Group == t.first.group {
		t.Steps = append(t.Steps, ev.TS)
	}
	ds := trace.SplitTensors(ev.Text, len(ev.Ptrs))
	for i, p := range ev.Ptrs {
		if t.retire == nil {
			t.Inputs[p] = append(t.Inputs[p], RegionUse{Group: ev.Group, Keyword: uint64(i) >= ev.Args[0], Arg: ds[i].Path})
		}
		t.tensor.describe(ev.Group, p, ds[i])
	}
	t.owners.built = false
}

// regionExit records a region's outputs and closes its open region.
func (t *Timeline) regionExit(ev *trace.Event) {
	if t.retire == nil {
		for _, p := range ev.Ptrs {
			t.Outputs[p] = append(t.Outputs[p], ev.Group)
		}
	}
	t.tensor.exit(ev.Group)
	t.owners.built = false
}

// ownerIndex holds the pointers of Inputs and Outputs sorted, for range lookups; built by the first
// Owner after the fold added pointers.
type ownerIndex struct {
	built   bool
	inputs  []uint64
	outputs []uint64
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// inRange returns the pointers of sorted that lie in [base, end).
func inRange(sorted []uint64, base, end uint64) []uint64 {
	lo := sort.Search(len(sorted), func(i int) bool { return sorted[i] >= base })
	hi := lo
	for hi < len(sorted) && sorted[hi] < end {
		hi++
	}
	return sorted[lo:hi]
}

// Owner says who held the storage [base, base+nbytes) besides the group that saved it, in the agent's
// words: its region-input uses by the tracker's rule (tracker.StorageInfo.Owner: "keyword input
// rotary_cos_sin[0] of layer.0..layer.10"), then "output of <groups>" for the groups that gave a pointer
// in it as a region output. Uses are taken by pointer, then in file order, then ordered by group name,
// as the tracker would have seen them. Empty when nobody else held it, or base is 0.
func (t *Timeline) Owner(base, nbytes uint64) string {
	if base == 0 {
		return ""
	}
	if !t.owners.built {
		t.owners = ownerIndex{built: true, inputs: sortedKeys(t.Inputs), outputs: sortedKeys(t.Outputs)}
	}
	end := base + max(nbytes, 1)
	var uses []tracker.InputUse
	for _, p := range inRange(t.owners.inputs, base, end) {
		for _, u := range t.Inputs[p] {
			uses = append(uses, tracker.InputUse{Group: t.GroupName(u.Group), Keyword: u.Keyword, Arg: u.Arg})
		}
	}
	sort.SliceStable(uses, func(i, j int) bool { return uses[i].Group < uses[j].Group })
	owner := tracker.StorageInfo{Inputs: uses}.Owner()
	var outs []string
	seen := map[uint32]bool{}
	for _, p := range inRange(t.owners.outputs, base, end) {
		for _, g := range t.Outputs[p] {
			if !seen[g] {
				seen[g] = true
				outs = append(outs, t.GroupName(g))
			}
		}
	}
	if len(outs) > 0 {
		if owner != "" {
			owner += "; "
		}
		owner += "output of " + tracker.GroupList(outs)
	}
	return owner
}
