package timeline

import "swapagent/trace"

// Guard is what the guard recorded: the groups whose framework moved their storages itself
// (KindGuarded), and the releases that framework asked for (KindGuard) and gave back (KindGuardRestore).
type Guard struct {
	Groups       []string // in the order they were declared
	Allowed      uint64   // releases the agent allowed
	AllowedBytes uint64
	Kept         uint64 // releases it refused: the storage stayed on device
	KeptBytes    uint64
	Restores     uint64 // allowed releases the framework gave memory back to
	Asks         []GuardAsk
	groups       map[uint32]bool
}

// GuardAsk is one KindGuard: a release the framework asked for.
type GuardAsk struct {
	TS      int64
	Group   uint32 // the deciding group (0: no live group saved the storage)
	Handle  int64
	Ptr     uint64
	Nbytes  uint64
	Allowed bool
	Reason  int    // keep reason (trace.Keep*), -1 when no live group saved it
	What    string // "keyword input rotary_cos_sin[0] of swap_group_0..swap_group_4"
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
		a := GuardAsk{TS: ev.TS, Group: ev.Group, Handle: ev.Handle, Ptr: ev.Args[0], Nbytes: ev.Args[1],
			Allowed: ev.Args[2] == trace.ReleaseAllow, Reason: int(ev.Args[3]) - 1, What: ev.Text}
		if a.Allowed {
			g.Allowed++
			g.AllowedBytes += a.Nbytes
		} else {
			g.Kept++
			g.KeptBytes += a.Nbytes
		}
		g.Asks = append(g.Asks, a)
	case trace.KindGuardRestore:
		if ev.Ret == 0 {
			g.Restores++
		}
	}
}
