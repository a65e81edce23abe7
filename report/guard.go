// guard.go owns the guard's part of the report: the groups the job's own swap moved, the releases it
// asked for and what the agent answered, and the storages kept on device by argument path.
package report

import (
	"slices"
	"sort"

	"swapagent/timeline"
	"swapagent/trace"
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
	// Own: for a released one, the kinds of the layer's own holders the framework counted, which keep nothing
	// ("view base", "checkpoint", "swap record"; trace.OwnNames).
	Own []string `json:"own_holders,omitempty"`
}

// HolderReport is what the holders' evidence decided for the groups the agent's own engine moves (the
// companions): the layer inputs it swapped because nothing but their group's saved tensors held them,
// and those it kept because something else did, by argument.
type HolderReport struct {
	Released []GuardKept `json:"released_unheld"`
	Kept     []GuardKept `json:"kept_held"`
}

// handleFigures folds the handles into the report's per-storage figures, each handle once: as the fold
// retires it (timeline.Options.Retire) or, for those it still holds, at the end.
type handleFigures struct {
	guard, holders   argumentTable
	releasedExternal uint64 // releases of storages the ownership model would have kept
}

func (f *handleFigures) add(t *timeline.Timeline, h *timeline.Handle) {
	if h.External() {
		f.releasedExternal += uint64(h.Releases)
	}
	if !h.Classified {
		return
	}
	if t.Guard.Guarded(h.Group) {
		if tracker.Reason(h.Reason).Owned() {
			f.guard.add(t, h)
		}
	} else if h.Unheld || h.Held > 0 {
		f.holders.add(t, h)
	}
}

// guardOf folds the guard's work; nil when the trace shows none.
func guardOf(t *timeline.Timeline, f *handleFigures) *GuardReport {
	g := &t.Guard
	if len(g.Groups) == 0 && g.Allowed+g.Kept == 0 {
		return nil
	}
	r := &GuardReport{Groups: g.Groups, ReleasesAllowed: g.Allowed, AllowedBytes: g.AllowedBytes,
		ReleasesKept: g.Kept, KeptBytes: g.KeptBytes, Restores: g.Restores}
	r.Kept, r.Released = f.guard.split()
	return r
}

// holdersOf folds the holders' evidence on the engine's groups; nil when the trace has none.
func holdersOf(f *handleFigures) *HolderReport {
	r := &HolderReport{}
	r.Kept, r.Released = f.holders.split()
	if len(r.Kept)+len(r.Released) == 0 {
		return nil
	}
	return r
}

// argumentTable folds classified handles by argument path and reason: those their holders' evidence
// released (Handle.Unheld) and the rest.
type argumentTable struct {
	rows   map[argumentKey]*GuardKept
	groups map[argumentKey][]string
}

type argumentKey struct {
	arg    string
	reason uint64
	unheld bool
}

func (a *argumentTable) add(t *timeline.Timeline, h *timeline.Handle) {
	if a.rows == nil {
		a.rows, a.groups = map[argumentKey]*GuardKept{}, map[argumentKey][]string{}
	}
	k := argumentKey{h.Tensor.Path, h.Reason, h.Unheld}
	e := a.rows[k]
	if e == nil {
		e = &GuardKept{Arg: k.arg, Reason: nameOf(KeepReasons[:], h.Reason)}
		a.rows[k] = e
	}
	e.Saves++
	e.Bytes += h.Nbytes
	e.Held = max(e.Held, h.Held)
	for _, n := range trace.OwnKindNames(h.Own) {
		if !slices.Contains(e.Own, n) {
			e.Own = append(e.Own, n)
		}
	}
	if name := t.GroupName(h.Group); !slices.Contains(a.groups[k], name) {
		a.groups[k] = append(a.groups[k], name)
	}
}

// split returns the table's kept and released rows, named arguments first, each sorted.
func (a *argumentTable) split() (kept, released []GuardKept) {
	kept, released = []GuardKept{}, []GuardKept{}
	for k, e := range a.rows {
		e.Groups = tracker.GroupList(a.groups[k])
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
