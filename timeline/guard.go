package timeline

import (
	"swapagent/trace"
	"swapagent/tracker"
)

// Guard is what the guard recorded: the groups whose framework moved their storages itself
// (KindGuarded), and the releases that framework asked for (KindGuard) and gave back (KindGuardRestore).
type Guard struct {
	Groups       []string // in the order they were declared
	Allowed      uint64   // releases the agent allowed
	AllowedBytes uint64
	Kept         uint64 // releases it refused: the storage stayed on device
	KeptBytes    uint64
	Restores     uint64 // allowed releases the framework gave memory back to
	groups       map[uint32]bool
}

// Guarded says whether group g was declared moved by its framework.
func (g *Guard) Guarded(group uint32) bool { return g.groups[group] }

func (t *Timeline) guard(ev *trace.Event) {
	g := &t.Guard
	switch ev.Kind {
	case trace.KindGuarded:
		if ev.Ret != 0 || g.groups[ev.Group] {
			return
		}
		if g.groups == nil {
			g.groups = map[uint32]bool{}
		}
		g.groups[ev.Group] = true
		g.Groups = append(g.Groups, t.GroupName(ev.Group))
	case trace.KindGuard:
		if ev.Ret < 0 {
			return
		}
		counted, own := GuardHolders(ev)
		held := int64(tracker.Outside(counted, own))
		role := ev.Args[3] == trace.KeepInput+1 || ev.Args[3] == trace.KeepOutput+1
		h := t.Handles[ev.Handle]
		if ev.Args[2] == trace.ReleaseAllow {
			g.Allowed++
			g.AllowedBytes += ev.Args[1]
			if h != nil && role && held == 0 {
				h.Unheld = true
				h.Own |= own.Kinds
			}
		} else {
			g.Kept++
			g.KeptBytes += ev.Args[1]
			if h != nil && held > h.Held {
				h.Held = held
			}
		}
	case trace.KindGuardRestore:
		if ev.Ret == 0 {
			g.Restores++
		}
	}
}

// GuardHolders is the evidence a KindGuard event records: the references to the storage the framework counted
// outside the releasing group's saved tensors, and how many of them were the layer's own machinery, of which
// kinds. tracker.Outside says what the rule decides by.
func GuardHolders(ev *trace.Event) (tracker.Holders, tracker.Own) {
	n, kinds := trace.OwnHolders(ev.Args[5])
	return tracker.Holders(max(trace.Holders(ev.Args[4]), -1)), tracker.Own{N: n, Kinds: kinds}
}
