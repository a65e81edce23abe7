// spans.go owns the containment index: a sorted slice of disjoint half-open address intervals searched
// with a hand-written binary search, cheap enough for every kernel launch.
package tracker

import "math"

type span struct {
	base, end uint64 // [base, end)
	id        uint64 // payload: allocation sequence or storage ID
}

// spans keeps intervals sorted by base and disjoint, so ends are sorted too.
type spans struct {
	s []span
}

func spanEnd(base, size uint64) uint64 {
	if size == 0 {
		size = 1
	}
	if base > math.MaxUint64-size {
		return math.MaxUint64
	}
	return base + size
}

// upper returns the index of the first span whose base is greater than addr.
func (x *spans) upper(addr uint64) int {
	lo, hi := 0, len(x.s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.s[m].base <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find returns the index of the span containing addr.
func (x *spans) find(addr uint64) (int, bool) {
	i := x.upper(addr) - 1
	if i >= 0 && addr < x.s[i].end {
		return i, true
	}
	return -1, false
}

// overlapping returns the index range [i, j) of spans that intersect [lo, hi).
func (x *spans) overlapping(lo, hi uint64) (int, int) {
	i := x.upper(lo) - 1
	if i < 0 || x.s[i].end <= lo {
		i++
	}
	j := i
	for j < len(x.s) && x.s[j].base < hi {
		j++
	}
	return i, j
}

// insert adds sp after removing every span it overlaps; the removed spans are returned (they were stale).
func (x *spans) insert(sp span) []span {
	i, j := x.overlapping(sp.base, sp.end)
	var gone []span
	if j > i {
		gone = append(gone, x.s[i:j]...)
		x.s = append(x.s[:i], x.s[j:]...)
	}
	x.s = append(x.s, span{})
	copy(x.s[i+1:], x.s[i:])
	x.s[i] = sp
	return gone
}

// remove deletes the span at index i.
func (x *spans) remove(i int) span {
	sp := x.s[i]
	x.s = append(x.s[:i], x.s[i+1:]...)
	return sp
}

// removeRange deletes the spans intersecting [lo, hi) and returns them.
func (x *spans) removeRange(lo, hi uint64) []span {
	i, j := x.overlapping(lo, hi)
	if j <= i {
		return nil
	}
	gone := append([]span(nil), x.s[i:j]...)
	x.s = append(x.s[:i], x.s[j:]...)
	return gone
}
