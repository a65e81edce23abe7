package pool

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMallocPool: best fit, split, coalescing, and growth by chunks (a large request its own), as
// sim/decoder/src/pool.c does.
func TestMallocPool(t *testing.T) {
	m := New(Config{Kind: Malloc})
	m.Alloc(1, 1<<20)   // chunk 1: [1 MiB used | 1 MiB free]
	m.Alloc(2, 600<<10) // best fit: the free 1 MiB
	if m.Held() != 2<<20 {
		t.Fatalf("held %d, want one chunk", m.Held())
	}
	m.Alloc(3, 3<<20) // its own chunk
	if m.Held() != 5<<20 {
		t.Fatalf("held %d after a large request, want 2 MiB + 3 MiB", m.Held())
	}
	m.Free(1)
	m.Free(2) // coalesced with block 1's range and the rest: the whole chunk is free again
	m.Alloc(4, 2<<20)
	if m.Held() != 5<<20 || m.InUse() != 5<<20 {
		t.Errorf("held %d in use %d: a whole free chunk should hold 2 MiB", m.Held(), m.InUse())
	}
	m.Alloc(5, 1) // rounded to 512 bytes: no room left anywhere, a new chunk
	if m.Held() != 7<<20 || m.Size(5) != 512 {
		t.Errorf("held %d, size %d", m.Held(), m.Size(5))
	}
}

// TestVMMPool: one segment grown at its end (the free tail extended), blocks across mappings, and the empty
// cache unmapping the free tail but the mapping a used block shares.
func TestVMMPool(t *testing.T) {
	m := New(Config{Kind: VMM})
	m.Alloc(1, 3<<20) // two mappings
	m.Alloc(2, 512)   // in the free tail of the second
	if m.Held() != 4<<20 {
		t.Fatalf("held %d, want 4 MiB mapped", m.Held())
	}
	m.Alloc(3, 2<<20) // tail free: 1 MiB - 512; one more mapping
	if m.Held() != 6<<20 || m.HeldPeak() != 6<<20 {
		t.Fatalf("held %d", m.Held())
	}
	m.Free(3)
	m.EmptyCache() // the free tail starts in the second mapping, which block 2 shares: two mappings stay
	if m.Held() != 4<<20 || m.HeldPeak() != 6<<20 {
		t.Errorf("after empty cache: held %d peak %d, want 4 MiB, 6 MiB", m.Held(), m.HeldPeak())
	}
	m.Free(1)
	m.Free(2)
	m.EmptyCache()
	if m.Held() != 0 {
		t.Errorf("an empty pool holds %d after empty cache", m.Held())
	}
}

// TestBestFitIndex: after every operation of a long random run, on both pools, the index best fit searches
// holds exactly the free blocks, by size then address, and each block went where a scan of every block in
// chunk order would have put it (the smallest that holds it, the first of those).
func TestBestFitIndex(t *testing.T) {
	for _, kind := range []Kind{Malloc, VMM} {
		m := New(Config{Kind: kind})
		rng := rand.New(rand.NewPCG(7, uint64(kind)))
		var live []int64
		for op := int64(1); op <= 5000; op++ {
			switch r := rng.IntN(10); {
			case r < 5 || len(live) == 0:
				n := uint64(rng.IntN(3<<20)) + 1
				if rng.IntN(4) > 0 {
					n %= 64 << 10 // mostly small: many blocks, many ties
				}
				want := scanBestFit(m, m.Round(max(n, 1)))
				m.Alloc(op, n)
				if got := m.live[op]; want != nil && got.addr != want.addr {
					t.Fatalf("%v op %d: Alloc(%d) took the block at %#x, a scan takes %#x", kind, op, n, got.addr, want.addr)
				}
				live = append(live, op)
			case r < 9:
				i := rng.IntN(len(live))
				m.Free(live[i])
				live = slices.Delete(live, i, i+1)
			default:
				m.EmptyCache()
			}
			var free []*block
			for _, c := range m.chunks {
				for b := c.first; b != nil; b = b.next {
					if b.free {
						free = append(free, b)
					}
				}
			}
			slices.SortFunc(free, func(a, b *block) int {
				if a.size != b.size {
					return cmp.Compare(a.size, b.size)
				}
				return cmp.Compare(a.addr, b.addr)
			})
			if !slices.Equal(free, m.free) {
				t.Fatalf("%v op %d: the index holds %d blocks, the chunks %d free ones (or another order)", kind, op,
					len(m.free), len(free))
			}
		}
	}
}

// scanBestFit is best fit as a scan of every block in chunk order: the smallest free block that holds n, the
// first of those; nil when none does.
func scanBestFit(m *Model, n uint64) *block {
	var best *block
	for _, c := range m.chunks {
		for b := c.first; b != nil; b = b.next {
			if b.free && b.size >= n && (best == nil || b.size < best.size) {
				best = b
			}
		}
	}
	return best
}
