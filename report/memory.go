// memory.go owns the memory figures: the device memory a job held with swap, what the trace implies it
// would have needed without swap, and the difference. It is the one computation behind run's summary,
// every report format and replay's device-memory model (docs/cli.md, "Reading the memory figures").
package report

import "fmt"

// Footprint follows one process's device memory through its events, in file order.
//
// Held is what the device provided to the job: live runtime allocations (aclrtMalloc*, minus aclrtFree),
// or mapped bytes under VMM (aclrtMapMem minus aclrtUnmapMem; trace.ClassOf reads both alike).
// Released is what the agent swapped out and has not yet restored (its state events). A framework's
// caching pool takes released memory back and reuses it, and grows (a runtime allocation) only when it
// is full, so at an allocation every held byte is in use and the job without swap would have needed
// Held + Released: the no-swap figure is evaluated there, as replay does (docs/replay.md).
type Footprint struct {
	Held     Memory // runtime allocations or mappings, with their series
	Released uint64 // bytes swapped out and not yet restored

	// poolFree: released bytes the pool has not handed out again. In use is Held minus these. The pool
	// hands released memory out again when a tensor is made there (Touch), and an allocation means it
	// was full, so that resets them all. free holds the ranges still free, by base.
	poolFree uint64
	free     []span

	PeakNoSwap     uint64 // the most Held + Released at an allocation
	PeakNoSwapAtNS int64
	PeakReleased   uint64 // the most bytes swapped out at once

	NoSeries bool       // replay: figures only, no curves
	InUse    []MemPoint // Held minus poolFree, after each change
	NoSwap   []MemPoint // in use plus Released, after each change
}

// span is a released storage's former device range.
type span struct{ base, size uint64 }

// Alloc records a runtime allocation (or mapping) of size bytes at ptr.
func (f *Footprint) Alloc(ts int64, ptr, size uint64) {
	f.Held.noSeries = f.NoSeries
	f.Held.alloc(ts, ptr, size)
	f.poolFree, f.free = 0, f.free[:0]
	if n := f.Held.LiveBytes + f.Released; n > f.PeakNoSwap {
		f.PeakNoSwap, f.PeakNoSwapAtNS = n, ts
	}
	f.point(ts)
}

// Free records a runtime free (or unmap) of ptr and returns the bytes it held (false: not ours).
func (f *Footprint) Free(ts int64, ptr uint64) (uint64, bool) {
	f.Held.noSeries = f.NoSeries
	size, ok := f.Held.free(ts, ptr)
	if ok {
		f.poolFree = min(f.poolFree, f.Held.LiveBytes)
		f.point(ts)
	}
	return size, ok
}

// State records an agent state change of a storage of nbytes that was at base (0: unknown) (KindState:
// from, to).
func (f *Footprint) State(ts int64, from, to, base, nbytes uint64) {
	switch {
	case to == stateHost && from != stateHost: // copied out and released
		f.Released += nbytes
		f.PeakReleased = max(f.PeakReleased, f.Released)
		if base != 0 && !f.NoSeries {
			f.poolFree = min(f.poolFree+nbytes, f.Held.LiveBytes)
			f.free = append(f.free, span{base, nbytes})
		}
	case from == stateHost && to == stateH2D: // restore begins: the storage takes device memory again
		f.Released -= min(nbytes, f.Released)
		f.poolFree -= min(nbytes, f.poolFree)
	default:
		return
	}
	f.point(ts)
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

// InUseBytes is Held minus the released bytes the pool still holds free.
func (f *Footprint) InUseBytes() uint64 { return f.Held.LiveBytes - min(f.poolFree, f.Held.LiveBytes) }

func (f *Footprint) point(ts int64) {
	if f.NoSeries {
		return
	}
	f.InUse = append(f.InUse, MemPoint{ts, f.InUseBytes()})
	f.NoSwap = append(f.NoSwap, MemPoint{ts, f.InUseBytes() + f.Released})
}

// Offload states of swapagent.h (KindState Args[0] and Args[1]); States names them.
const (
	stateHost = 2
	stateH2D  = 3
)

// MemFigures are the memory figures of one process, the same in every format.
type MemFigures struct {
	// Source says what Held counts: "runtime allocations" or "VMM mappings".
	Source string `json:"source"`
	// PeakInUse is the peak device memory the job held with swap: at that moment every held byte was in use.
	PeakInUse     uint64 `json:"peak_in_use_bytes"`
	PeakInUseAtNS int64  `json:"peak_in_use_at_ns"`
	// PeakNoSwap is the peak the trace implies without swap: held plus swapped-out bytes, at allocations.
	PeakNoSwap     uint64 `json:"peak_no_swap_bytes"`
	PeakNoSwapAtNS int64  `json:"peak_no_swap_at_ns"`
	// SavedBytes is PeakNoSwap - PeakInUse; SavedPercent the same as a percentage of PeakNoSwap.
	SavedBytes   uint64  `json:"saved_bytes"`
	SavedPercent float64 `json:"saved_percent"`
	// SwappedOutPeak is the most bytes the agent held swapped out at once.
	SwappedOutPeak uint64 `json:"swapped_out_peak_bytes"`
	InUseAtEnd     uint64 `json:"in_use_at_end_bytes"`
	// ReservedPeak is the most VMM address space reserved at once (aclrtReserveMemAddress): address space,
	// not memory, so it is in none of the figures above.
	ReservedPeak uint64 `json:"reserved_address_space_peak_bytes"`
}

// Figures returns the footprint's memory figures; reserved is the reservation tracking (may be empty).
func (f *Footprint) Figures(reserved *Memory, vmm bool) MemFigures {
	m := MemFigures{Source: "runtime allocations", PeakInUse: f.Held.PeakBytes, PeakInUseAtNS: f.Held.PeakAtNS,
		PeakNoSwap: max(f.PeakNoSwap, f.Held.PeakBytes), PeakNoSwapAtNS: f.PeakNoSwapAtNS,
		SwappedOutPeak: f.PeakReleased, InUseAtEnd: f.InUseBytes()}
	if vmm {
		m.Source = "VMM mappings"
	}
	if m.PeakNoSwap == m.PeakInUse {
		m.PeakNoSwapAtNS = m.PeakInUseAtNS
	}
	m.SavedBytes = m.PeakNoSwap - m.PeakInUse
	if m.PeakNoSwap > 0 {
		m.SavedPercent = float64(m.SavedBytes) / float64(m.PeakNoSwap) * 100
	}
	if reserved != nil {
		m.ReservedPeak = reserved.PeakBytes
	}
	return m
}

// Text is the figures in one line, as run's summary and `report` print them.
func (m MemFigures) Text() string {
	if m.PeakNoSwap == 0 {
		return "no device allocations recorded"
	}
	return fmt.Sprintf("peak in use %s with swap, %s without swap (implied by the trace); saved %d bytes (%s, %.1f%% of the no-swap peak)",
		Bytes(m.PeakInUse), Bytes(m.PeakNoSwap), m.SavedBytes, Bytes(m.SavedBytes), m.SavedPercent)
}

// Short is Text for a picture's title line: the same figures, fewer words.
func (m MemFigures) Short() string {
	if m.PeakNoSwap == 0 {
		return "no device allocations recorded"
	}
	return fmt.Sprintf("peak in use %s with swap vs %s without; saved %s (%.1f%%)",
		Bytes(m.PeakInUse), Bytes(m.PeakNoSwap), Bytes(m.SavedBytes), m.SavedPercent)
}
