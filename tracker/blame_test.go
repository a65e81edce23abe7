package tracker

import (
	"sort"
	"testing"
)

func TestMoreLikelyOrder(t *testing.T) {
	want := []Suspect{
		{Released: true, External: true, Order: 1},
		{Released: true, External: true, Order: 4},
		{Released: true, External: false, Order: 0},
		{Released: false, External: true, Order: 2},
		{Released: false, External: false, Order: 3},
	}
	got := []Suspect{want[4], want[2], want[1], want[3], want[0]}
	sort.SliceStable(got, func(i, j int) bool { return MoreLikely(got[i], got[j]) })
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("place %d: got %+v, want %+v (all: %+v)", i, got[i], want[i], got)
		}
	}
	if MoreLikely(want[0], want[0]) {
		t.Fatal("a suspect is more likely than itself")
	}
}
