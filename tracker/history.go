// history.go owns the bounded ring of releases and frees that fault attribution searches.
package tracker

// HistoryCap is how many records the tracker keeps; older ones are overwritten.
const HistoryCap = 4096

// RecordKind says what a history record saw.
type RecordKind uint8

// Record kinds.
const (
	RecReleased RecordKind = iota + 1 // a storage released by a group's offload
	RecFreed                          // a device allocation freed (or dropped as overlapped by a new one)
	RecStale                          // a held storage whose memory was freed or reused under it
)

// String names the kind.
func (k RecordKind) String() string {
	switch k {
	case RecReleased:
		return "released"
	case RecFreed:
		return "freed"
	case RecStale:
		return "stale"
	}
	return "unknown"
}

// Record is one history entry.
type Record struct {
	Kind    RecordKind
	Seq     uint64 // tracker sequence number: orders records against each other
	Time    int64  // unix nanoseconds
	Storage uint64 // storage ID, 0 for an allocation
	Base    uint64
	Gen     uint32
	Size    uint64
	Group   string // the releasing group
}

type history struct {
	r    []Record
	next int
	full bool
}

func newHistory(n int) history { return history{r: make([]Record, n)} }

func (h *history) add(r Record) {
	h.r[h.next] = r
	h.next++
	if h.next == len(h.r) {
		h.next, h.full = 0, true
	}
}

// each visits records newest first until f returns false.
func (h *history) each(f func(*Record) bool) {
	n := h.next
	if h.full {
		n = len(h.r)
	}
	for k := 0; k < n; k++ {
		i := (h.next - 1 - k + len(h.r)) % len(h.r)
		if !f(&h.r[i]) {
			return
		}
	}
}

func (h *history) find(match func(*Record) bool) (Record, bool) {
	var out Record
	found := false
	h.each(func(r *Record) bool {
		if match(r) {
			out, found = *r, true
			return false
		}
		return true
	})
	return out, found
}

func (h *history) all(match func(*Record) bool, max int) []Record {
	var out []Record
	h.each(func(r *Record) bool {
		if match(r) {
			out = append(out, *r)
		}
		return max <= 0 || len(out) < max
	})
	return out
}
