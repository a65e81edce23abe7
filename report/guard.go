// guard.go owns the guard's part of the report: the groups the job's own swap moved, the releases it
// asked for and what the agent answered, and the storages kept on device by argument path.
package report

import (
	"slices"
	"sort"

	"swapagent/timeline"
	"swapagent/tracker"
)

// GuardReport is what the guard did in one process.
type GuardReport struct {
	Groups          []string    `json:"groups"` // moved by their framework, the agent answering its releases
	ReleasesAllowed uint64      `json:"releases_allowed"`
	AllowedBytes    uint64      `json:"allowed_bytes"`
	ReleasesKept    uint64      `json:"releases_kept"` // refused: the storage stayed on device
	KeptBytes       uint64      `json:"kept_bytes"`
	Restores        uint64      `json:"restores"` // allowed releases given memory back
	Kept            []GuardKept `json:"kept"`     // the storages kept on device, by argument
	// Released: the inputs and outputs the job's swap released because nothing but their group's saved
	// tensors held them any more (the holders' evidence), by argument.
	Released []GuardKept `json:"released_unheld"`
}

// GuardKept is one argument (or kind of storage) kept on device, or released on the holders' evidence, in
// its groups.
type GuardKept struct {
	Arg    string `json:"arg"`    // the argument path ("rotary_cos_sin[0]"); "" for a storage that is no argument
	Reason string `json:"reason"` // its keep reason (for a released one: the role that would have kept it)
	Groups string `json:"groups"` // the groups that kept it ("swap_group_0..swap_group_4")
	Saves  uint64 `json:"saves"`
	Bytes  uint64 `json:"bytes"`
	// Held: the most references outside its group's saved tensors the framework counted when it was
	// kept (0: none counted, or none asked).
	Held int64 `json:"held_by,omitempty"`
}

// HolderReport is what the holders' evidence decided for the groups the agent's own engine moves (the
// companions): the layer inputs it swapped because nothing but their group's saved tensors held them,
// and those it kept because something else did, by argument.
type HolderReport struct {
	Released []GuardKept `json:"released_unheld"`
	Kept     []GuardKept `json:"kept_held"`
}

// guardOf folds the guard's work; nil when the trace shows none.
func guardOf(t *timeline.Timeline) *GuardReport {
	g := &t.Guard
	if len(g.Groups) == 0 && g.Allowed+g.Kept == 0 {
		return nil
	}
	r := &GuardReport{Groups: g.Groups, ReleasesAllowed: g.Allowed, AllowedBytes: g.AllowedBytes,
		ReleasesKept: g.Kept, KeptBytes: g.KeptBytes, Restores: g.Restores}
	r.Kept, r.Released = byArgument(t, func(h *timeline.Handle) bool {
		return g.Guarded(h.Group) && tracker.Reason(h.Reason).Owned()
	})
	return r
}

// holdersOf folds the holders' evidence on the engine's groups; nil when the trace has none.
func holdersOf(t *timeline.Timeline) *HolderReport {
	r := &HolderReport{}
	r.Kept, r.Released = byArgument(t, func(h *timeline.Handle) bool {
		return !t.Guard.Guarded(h.Group) && (h.Unheld || h.Held > 0)
	})
	if len(r.Kept)+len(r.Released) == 0 {
		return nil
	}
	return r
}

// byArgument folds the classified handles that pass in by argument path and reason: those their holders'
// evidence released (Handle.Unheld) and the rest.
func byArgument(t *timeline.Timeline, in func(*timeline.Handle) bool) (kept, released []GuardKept) {
	type key struct {
		arg    string
		reason uint64
		unheld bool
	}
	groups := map[key][]string{}
	byKey := map[key]*GuardKept{}
	for _, h := range t.Handles {
		if !h.Classified || !in(h) {
			continue
		}
		k := key{h.Tensor.Path, h.Reason, h.Unheld}
		e := byKey[k]
		if e == nil {
			e = &GuardKept{Arg: k.arg, Reason: nameOf(KeepReasons[:], h.Reason)}
			byKey[k] = e
		}
		e.Saves++
		e.Bytes += h.Nbytes
		e.Held = max(e.Held, h.Held)
		if name := t.GroupName(h.Group); !slices.Contains(groups[k], name) {
			groups[k] = append(groups[k], name)
		}
	}
	kept, released = []GuardKept{}, []GuardKept{}
	for k, e := range byKey {
		e.Groups = tracker.GroupList(groups[k])
		if k.unheld {
			released = append(released, *e)
		} else {
			kept = append(kept, *e)
		}
	}
	for _, rows := range [][]GuardKept{kept, released} {
		sort.Slice(rows, func(i, j int) bool {
			a, b := rows[i], rows[j]
			if (a.Arg == "") != (b.Arg == "") {
				return a.Arg != ""
			}
			if a.Arg != b.Arg {
				return a.Arg < b.Arg
			}
			return a.Reason < b.Reason
		})
	}
	return kept, released
}
