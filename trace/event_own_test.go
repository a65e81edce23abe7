package trace

import (
	"slices"
	"testing"
)

func TestOwnArgRoundTrip(t *testing.T) {
	for _, c := range []struct {
		n     int64
		kinds uint64
	}{{1, OwnViewBase}, {3, OwnViewBase | OwnPacked}, {2, OwnPacked}} {
		n, k := OwnHolders(OwnArg(c.n, c.kinds))
		if n != c.n || k != c.kinds {
			t.Errorf("OwnHolders(OwnArg(%d, %b)) = %d, %b", c.n, c.kinds, n, k)
		}
	}
	if n, k := OwnHolders(OwnArg(0, OwnPacked)); n != 0 || k != 0 {
		t.Errorf("no own holders reads back as %d of %b", n, k)
	}
	if n, k := OwnHolders(0); n != 0 || k != 0 { // a trace from before Args[5] was recorded
		t.Errorf("Args[5] = 0 reads as %d own holders of kinds %b", n, k)
	}
	if got := OwnKindNames(OwnViewBase | OwnPacked); !slices.Equal(got, []string{"view base", "packed"}) {
		t.Errorf("OwnKindNames = %q", got)
	}
}
