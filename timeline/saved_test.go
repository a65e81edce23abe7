package timeline

import (
	"reflect"
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/trace"
)

// Saved counts a storage once however many groups saved it, until the last of them exits its backward; a
// refused save counts nothing, and a group's next forward ends what it saved before.
func TestSavedCountsEachStorageOnceUntilItsLastGroupExits(t *testing.T) {
	const cos, a0, a1 = 0x2000, 0x3000, 0x4000
	b := tracetest.New()
	b.Enter("layer.0", 1, []uint64{0x1000, cos})
	b.Save("layer.0", a0, 256, 0)
	b.Save("layer.0", cos, 64, 0)
	b.Save("layer.0", cos, 64, 0) // the same storage again: one count
	b.ABI(trace.KindSave, "layer.0", 0, nil, 0x9000, 512, 0).Ret = trace.CodeEINVAL
	b.Exit("layer.0", 0x5000)
	b.Enter("layer.1", 1, []uint64{0x5000, cos})
	b.Save("layer.1", a1, 128, 0)
	b.Save("layer.1", cos, 64, 0)
	b.Exit("layer.1", 0x6000)
	b.ABI(trace.KindBackwardEnter, "layer.1", 0, nil)
	b.ABI(trace.KindBackwardExit, "layer.1", 0, nil)
	failed := b.ABI(trace.KindBackwardExit, "layer.0", 0, nil)
	failed.Ret = trace.CodeEORDER // a refused exit gives nothing up
	b.Enter("layer.0", 1, []uint64{0x1000, cos})
	tl := fold(b)
	s := tl.Saved
	if s.PeakBytes != 256+64+128 || s.LiveBytes != 0 || s.Allocs != 3 || s.Frees != 3 {
		t.Errorf("saved: peak %d live %d allocs %d frees %d, want peak 448 and all given up", s.PeakBytes,
			s.LiveBytes, s.Allocs, s.Frees)
	}
	// layer.1's exit gives up its activation only (cos is layer.0's too); layer.0's next forward the rest.
	var got []uint64
	for _, p := range s.Series {
		got = append(got, p.Bytes)
	}
	// (layer.0's two storages go in either order: 64 or 256 before the 0)
	if len(got) != 6 || !reflect.DeepEqual(got[:4], []uint64{256, 320, 448, 320}) || got[5] != 0 ||
		(got[4] != 64 && got[4] != 256) {
		t.Errorf("saved bytes after each change %v, want 256 320 448 320, then 64 or 256, then 0", got)
	}
}
