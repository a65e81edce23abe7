// holders.go owns the count of a storage's saves by live group. Nearly every storage is saved by one group
// only, so that group is held inline and a map is made only for a second one: a save of a new storage,
// once per saved tensor and step, makes no map.
package tracker

type holders struct {
	one  string         // the first group, when n > 0
	n    int            // its saves
	more map[string]int // the other groups' saves
}

func (h *holders) add(g string) {
	switch {
	case h.n > 0 && h.one == g:
		h.n++
	case h.n == 0 && h.more[g] == 0:
		h.one, h.n = g, 1
	default:
		if h.more == nil {
			h.more = map[string]int{}
		}
		h.more[g]++
	}
}

// drop takes one save of g off.
func (h *holders) drop(g string) {
	if h.n > 0 && h.one == g {
		h.n--
		return
	}
	if n := h.more[g]; n > 1 {
		h.more[g] = n - 1
	} else if n == 1 {
		delete(h.more, g)
	}
}

// empty reports whether no live group holds the storage.
func (h *holders) empty() bool { return h.n == 0 && len(h.more) == 0 }

// other reports whether a group other than g holds the storage.
func (h *holders) other(g string) bool {
	if h.n > 0 && h.one != g {
		return true
	}
	for o := range h.more {
		if o != g {
			return true
		}
	}
	return false
}

// names returns the holding groups (unordered).
func (h *holders) names() []string {
	var out []string
	if h.n > 0 {
		out = append(out, h.one)
	}
	for g := range h.more {
		out = append(out, g)
	}
	return out
}
