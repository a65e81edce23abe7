// memory.go owns the memory figures: the device memory a job held with swap, what the trace implies it
// would have needed without swap, and the difference, from the footprint package timeline follows (the
// same model replay's recorded side reads). They are the figures of run's summary and every report
// format (docs/cli.md, "Reading the memory figures").
package report

import (
	"fmt"

	"swapagent/timeline"
)

// MemFigures are the memory figures of one process, the same in every format.
type MemFigures struct {
	// Source says what Held counts: "runtime allocations" or "VMM mappings".
	Source string `json:"source"`
	// PeakInUse is the peak device memory the job held with swap: at that moment every held byte was in use.
	PeakInUse     uint64 `json:"peak_in_use_bytes"`
	PeakInUseAtNS int64  `json:"peak_in_use_at_ns"`
	// PeakNoSwap is the peak the trace implies without swap: in use plus swapped-out bytes, at any change.
	PeakNoSwap     uint64 `json:"peak_no_swap_bytes"`
	PeakNoSwapAtNS int64  `json:"peak_no_swap_at_ns"`
	// SavedBytes is PeakNoSwap - PeakInUse; SavedPercent the same as a percentage of PeakNoSwap.
	SavedBytes   uint64  `json:"saved_bytes"`
	SavedPercent float64 `json:"saved_percent"`
	// PoolStep is the smallest device allocation (or mapping) of the run: the pool grows by at least that.
	// A saving below it is within what the pool's granularity alone can make or hide.
	PoolStep uint64 `json:"pool_step_bytes"`
	// SavingSupported says whether the estimate of SavedBytes is at least one PoolStep: below that, the
	// trace cannot support the claim that anything was saved.
	SavingSupported bool `json:"saving_supported"`
	// SavedAtLeast is the lower bound of the saving (timeline.SavedAtLeast): what was swapped out when the
	// run peaked, less one PoolStep; 0 when the trace proves no saving.
	SavedAtLeast uint64 `json:"saved_at_least_bytes"`
	// SavedPoolSteps is SavedBytes in the pool's steps of growth, rounded: the device memory a pool gives back
	// or never takes moves in whole steps, so this is the saving a device counter can show (0 when PoolStep is
	// 0 or the saving is not supported).
	SavedPoolSteps uint64 `json:"saved_pool_steps"`
	// SwappedOutPeak is the most bytes the agent held swapped out at once.
	SwappedOutPeak uint64 `json:"swapped_out_peak_bytes"`
	InUseAtEnd     uint64 `json:"in_use_at_end_bytes"`
	// ReservedPeak is the most VMM address space reserved at once (aclrtReserveMemAddress): address space,
	// not memory, so it is in none of the figures above.
	ReservedPeak uint64 `json:"reserved_address_space_peak_bytes"`
	// Partial says why no saving is claimed: the trace ends at a fault before a whole step, or its kept window
	// holds none ("" otherwise; the saving fields are then 0).
	Partial string `json:"partial,omitempty"`
}

// figures returns the footprint's memory figures; reserved is the reservation tracking (may be empty).
func figures(f *timeline.Footprint, reserved *Memory, vmm bool) MemFigures {
	noSwap, noSwapAt := f.NoSwapPeak()
	m := Figures(f.Held.PeakBytes, noSwap, f.PeakReleased, f.MinAlloc, f.ReleasedAtPeak)
	m.PeakInUseAtNS, m.PeakNoSwapAtNS, m.InUseAtEnd = f.Held.PeakAtNS, noSwapAt, f.InUseBytes()
	if vmm {
		m.Source = "VMM mappings"
	}
	if m.PeakNoSwap == m.PeakInUse {
		m.PeakNoSwapAtNS = m.PeakInUseAtNS
	}
	if reserved != nil {
		m.ReservedPeak = reserved.PeakBytes
	}
	return m
}

// Figures derives the saving of a peak in use with swap against the no-swap peak the same trace implies,
// the bytes swapped out at once at most, the pool's step and the bytes released when the run peaked: the
// figures report shows for a recording and replay for a simulated policy, in the same words (Text).
func Figures(peakInUse, peakNoSwap, swappedOutPeak, poolStep, releasedAtPeak uint64) MemFigures {
	m := MemFigures{Source: "runtime allocations", PeakInUse: peakInUse, PeakNoSwap: max(peakNoSwap, peakInUse),
		SwappedOutPeak: swappedOutPeak, PoolStep: poolStep}
	m.SavedBytes = m.PeakNoSwap - m.PeakInUse
	if m.PeakNoSwap > 0 {
		m.SavedPercent = float64(m.SavedBytes) / float64(m.PeakNoSwap) * 100
	}
	m.SavingSupported = m.SavedBytes > 0 && m.SavedBytes >= m.PoolStep
	m.SavedAtLeast = min(timeline.SavedAtLeast(releasedAtPeak, m.PoolStep), m.SavedBytes)
	if m.SavingSupported && m.PoolStep > 0 {
		m.SavedPoolSteps = (m.SavedBytes + m.PoolStep/2) / m.PoolStep
	}
	return m
}

// Text is the figures in one short line, the same words in run's summary, report, the SVG and Perfetto:
// the measured peak, the no-swap peak labelled as the estimate it is, and one saving (the estimate). A
// trace cut short by a fault before a whole step claims none; a run that swapped nothing out says so.
// What qualifies the estimate (its lower bound, the pool's steps, how to measure) is Detail's.
func (m MemFigures) Text() string {
	if m.PeakNoSwap == 0 {
		return "no device allocations recorded"
	}
	s := "peak " + Bytes(m.PeakInUse) + " in use"
	switch {
	case m.Partial != "":
		return s + "; no saving claimed: " + m.Partial
	case m.SwappedOutPeak == 0 && m.SavedBytes == 0:
		return s + ", nothing swapped out"
	}
	s += "; about " + Bytes(m.PeakNoSwap) + " without swap (estimate)"
	if !m.SavingSupported {
		return s + ": no saving this trace supports"
	}
	return s + fmt.Sprintf(": saved about %s (%.0f%%)", Bytes(m.SavedBytes), m.SavedPercent)
}

// Detail is what qualifies Text's saving, for report's text (run's summary leaves it out), or "": the
// estimate cannot see how the pool would have grown and fragmented without swap, so it comes with its
// lower bound where the trace proves one, the saving in the pool's steps of growth where they are coarse
// enough to matter, and the way to measure it.
func (m MemFigures) Detail() string {
	switch {
	case m.Partial != "" || m.PeakNoSwap == 0 || m.SavedBytes == 0:
		return ""
	case !m.SavingSupported:
		return fmt.Sprintf("the estimate, %d bytes, is less than one %s step of the pool's growth", m.SavedBytes,
			Bytes(m.PoolStep))
	}
	s := fmt.Sprintf("about %d bytes, %s", m.SavedBytes, m.bound())
	if m.SavedPoolSteps > 0 && m.SavedPoolSteps <= maxStepsWorthSaying {
		// The tensor bytes the estimate counts rarely fill whole steps, so a device counter shows the nearest
		// count of them (decoder-sim, hidden 40: about 6,766,592 bytes estimated, 3 steps of 2 MiB measured).
		s += fmt.Sprintf("; in the pool's %s steps of growth, about %d (%s)", Bytes(m.PoolStep), m.SavedPoolSteps,
			Bytes(m.SavedPoolSteps*m.PoolStep))
	}
	return s + "; the estimate cannot see the pool's growth and fragmentation without swap: `report --baseline` measures them"
}

// maxStepsWorthSaying: a saving of more pool steps than this is fine-grained enough that counting them says
// nothing the bytes do not.
const maxStepsWorthSaying = 64

// bound says the saving's lower bound in words.
func (m MemFigures) bound() string {
	if m.SavedAtLeast == 0 {
		return "with no lower bound this trace proves (little was swapped out when the run peaked)"
	}
	return fmt.Sprintf("at least %d bytes (swapped out when the run peaked, less one %s step of the pool's growth)",
		m.SavedAtLeast, Bytes(m.PoolStep))
}

// PartialRun is Withhold's reason for a trace that faulted before a whole step; PartialWindow for a trace whose
// oldest segments were dropped (SWAPAGENT_TRACE_LIMIT) and whose kept window holds no whole step.
const (
	PartialRun    = "the run faulted before a whole step"
	PartialWindow = "the trace's kept window (SWAPAGENT_TRACE_LIMIT) holds no whole step"
)

// Withhold takes back the saving of a trace that faulted before a whole step (timeline.Coverage): its peak
// is that of a run cut short, and the no-swap estimate that of the same partial run.
func (m *MemFigures) Withhold(why string) {
	m.Partial = why
	m.SavedBytes, m.SavedPercent, m.SavingSupported, m.SavedAtLeast, m.SavedPoolSteps = 0, 0, false, 0, 0
}
