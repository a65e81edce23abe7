package timeline

import (
	"swapagent/pool"
	"swapagent/trace"
)

// MemPoint is the live byte count of one memory right after the event at TS.
type MemPoint struct {
	TS    int64  // nanoseconds since the trace start
	Bytes uint64 // live bytes after the change
}

// Memory sums allocations and frees of one memory kind (device, host pinned, reserved address space),
// matched by pointer.
type Memory struct {
	Allocs         uint64 `json:"allocs"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	Frees          uint64 `json:"frees"`
	LiveBytes      uint64 `json:"live_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	PeakAtNS       int64  `json:"peak_at_ns"`

	live     map[uint64]uint64
	noSeries bool
	Series   []MemPoint `json:"-"` // LiveBytes after each change (empty with Options.NoSeries)
}

// Alloc records an allocation of size bytes at ptr.
func (m *Memory) Alloc(ts int64, ptr, size uint64) {
	if m.live == nil {
		m.live = make(map[uint64]uint64)
	}
	// A pointer handed out again without a free we saw (a lost event): the old block is gone.
	if old, ok := m.live[ptr]; ok {
		m.LiveBytes -= old
	}
	m.live[ptr] = size
	m.Allocs++
	m.AllocatedBytes += size
	m.LiveBytes += size
	if m.LiveBytes > m.PeakBytes {
		m.PeakBytes, m.PeakAtNS = m.LiveBytes, ts
	}
	if !m.noSeries {
		m.Series = append(m.Series, MemPoint{ts, m.LiveBytes})
	}
}

// Free forgets the block at ptr and returns its size; false when it was freed before the trace began,
// or never ours.
func (m *Memory) Free(ts int64, ptr uint64) (uint64, bool) {
	size, ok := m.live[ptr]
	if !ok {
		return 0, false
	}
	delete(m.live, ptr)
	m.Frees++
	m.LiveBytes -= size
	if !m.noSeries {
		m.Series = append(m.Series, MemPoint{ts, m.LiveBytes})
	}
	return size, true
}

// Size is the size of the live block at ptr; false when there is none.
func (m *Memory) Size(ptr uint64) (uint64, bool) {
	size, ok := m.live[ptr]
	return size, ok
}

// Footprint follows one process's device memory through its events, in file order.
//
// Held is what the device provided to the job: live runtime allocations (aclrtMalloc*, minus aclrtFree),
// or mapped bytes under VMM (aclrtMapMem minus aclrtUnmapMem; trace.ClassOf reads both alike).
// Released is what the agent swapped out and has not yet restored (its state events). A framework's
// caching pool takes released memory back and reuses it, and grows (a runtime allocation) only when it
// is full, so at an allocation every held byte is in use. Between allocations it serves new tensors from
// released memory (Touch): in use grows without the pool growing. The job without swap would have needed
// in use + Released at every moment, so the no-swap peak is taken at every change, not only at
// allocations (those miss most of a step's second half; docs/cli.md, "Reading the memory figures").
type Footprint struct {
	Held     Memory // runtime allocations or mappings, with their series
	Released uint64 // bytes swapped out and not yet restored

	// poolFree: released bytes the pool has not handed out again. In use is Held minus these. The pool
	// hands released memory out again when a tensor is made there (Touch), and an allocation means it
	// was full, so that resets them all. free holds the ranges still free, by base.
	poolFree uint64
	free     []span

	PeakNoSwap     uint64 // the most in use + Released at any change
	PeakNoSwapAtNS int64
	PeakReleased   uint64 // the most bytes swapped out at once
	MinAlloc       uint64 // the smallest runtime allocation or mapping: the pool's step of growth
	ReleasedAtPeak uint64 // Released when Held reached its peak (SavedAtLeast)

	// Pool is the framework's pool as the recording's blocks drive it, its swap undone (pool.Blocks): where
	// it can follow them (Active), its peak is the no-swap peak (NoSwapPeak), not the estimate above.
	Pool       *pool.Blocks
	check      *pool.Blocks
	poolPeak   uint64
	poolPeakAt int64

	NoSeries bool       // figures only, no curves (replay)
	InUse    []MemPoint // Held minus poolFree, after each change
	NoSwap   []MemPoint // in use plus Released, after each change
}

// span is a released storage's former device range.
type span struct{ base, size uint64 }

// Alloc records a runtime allocation (or mapping) of size bytes at ptr.
func (f *Footprint) Alloc(ts int64, ptr, size uint64) {
	f.Held.noSeries = f.NoSeries
	f.Held.Alloc(ts, ptr, size)
	if f.Held.PeakAtNS == ts && f.Held.PeakBytes == f.Held.LiveBytes {
		f.ReleasedAtPeak = f.Released
	}
	if size > 0 && (f.MinAlloc == 0 || size < f.MinAlloc) {
		f.MinAlloc = size
	}
	f.poolFree, f.free = 0, f.free[:0]
	if n := f.Held.LiveBytes + f.Released; n > f.PeakNoSwap {
		f.PeakNoSwap, f.PeakNoSwapAtNS = n, ts
	}
	f.point(ts)
}

// Free records a runtime free (or unmap) of ptr and returns the bytes it held (false: not ours).
func (f *Footprint) Free(ts int64, ptr uint64) (uint64, bool) {
	f.Held.noSeries = f.NoSeries
	size, ok := f.Held.Free(ts, ptr)
	if ok {
		f.poolFree = min(f.poolFree, f.Held.LiveBytes)
		f.point(ts)
	}
	return size, ok
}

// State records the agent's state change (tr.From to tr.To) of a storage of tr.Nbytes that was at base
// (0: unknown).
func (f *Footprint) State(tr Transition, base uint64) {
	switch {
	case tr.Release(): // copied out and released
		f.Released += tr.Nbytes
		f.PeakReleased = max(f.PeakReleased, f.Released)
		if base != 0 {
			f.poolFree = min(f.poolFree+tr.Nbytes, f.Held.LiveBytes)
			f.free = append(f.free, span{base, tr.Nbytes})
		}
	case tr.RestoreBegins(): // the storage takes device memory again
		f.Released -= min(tr.Nbytes, f.Released)
		f.poolFree -= min(tr.Nbytes, f.poolFree)
	default:
		return
	}
	f.point(tr.TS)
}

// Touch records a tensor made at device address addr: memory released by swap there is in use again.
func (f *Footprint) Touch(ts int64, addr uint64) {
	for i := len(f.free) - 1; i >= 0; i-- { // few at once: the storages of the groups swapped out
		sp := f.free[i]
		if addr >= sp.base && addr-sp.base < sp.size {
			f.poolFree -= min(sp.size, f.poolFree)
			f.free = append(f.free[:i], f.free[i+1:]...)
			f.point(ts)
			return
		}
	}
}

// RefoldPool starts the pool model again, to follow the same events a second time with the Schedule the
// first pass found (Pool.Schedule): the model then frees each block where the job let it go (FollowPool),
// and a check of the schedule follows them too (EndPool).
func (f *Footprint) RefoldPool(sched *pool.Schedule) {
	f.Pool, f.poolPeak, f.poolPeakAt = pool.NewBlocks(nil, sched), 0, 0
	f.check = pool.NewCheck(nil, sched)
}

// FollowPool follows the recording's next event in the pool model only (a second pass: RefoldPool).
func (f *Footprint) FollowPool(ev *trace.Event) {
	f.addPool(ev)
	f.check.Add(ev)
}

// EndPool ends the second pass: the schedule's check says whether the model's figures stand.
func (f *Footprint) EndPool() {
	f.Pool.Check(f.check)
	f.check = nil
}

// addPool follows the recording's next event in the pool model.
func (f *Footprint) addPool(ev *trace.Event) {
	f.Pool.Add(ev)
	if m := f.Pool.M; m != nil && m.HeldPeak() > f.poolPeak {
		f.poolPeak, f.poolPeakAt = m.HeldPeak(), ev.TS
	}
}

// NoSwapPeak is the peak device memory the job would have held without swap, and when: the pool model's
// (Pool) where it followed the recording's blocks, else the estimate PeakNoSwap (in use plus released).
func (f *Footprint) NoSwapPeak() (uint64, int64) {
	if f.Pool != nil && f.Pool.Active() {
		return f.poolPeak, f.poolPeakAt
	}
	return f.PeakNoSwap, f.PeakNoSwapAtNS
}

// InUseBytes is Held minus the released bytes the pool still holds free.
func (f *Footprint) InUseBytes() uint64 { return f.Held.LiveBytes - min(f.poolFree, f.Held.LiveBytes) }

func (f *Footprint) point(ts int64) {
	if n := f.InUseBytes() + f.Released; n > f.PeakNoSwap {
		f.PeakNoSwap, f.PeakNoSwapAtNS = n, ts
	}
	if f.NoSeries {
		return
	}
	f.InUse = append(f.InUse, MemPoint{ts, f.InUseBytes()})
	f.NoSwap = append(f.NoSwap, MemPoint{ts, f.InUseBytes() + f.Released})
}

// SavedAtLeast is the least a run with swap saved, from the bytes it held swapped out when its device
// memory peaked: the pool grew then because it was full, so without swap it would have needed those bytes
// as well, less the free room a full pool can still hold, taken as one step of its growth. The estimate
// (no-swap peak minus peak) is closer on average but can be high: it cannot see how the pool would have
// grown and fragmented without swap. Checked against measured runs under --policy off: docs/cli.md,
// "Reading the memory figures".
func SavedAtLeast(releasedAtPeak, poolStep uint64) uint64 {
	return releasedAtPeak - min(poolStep, releasedAtPeak)
}
