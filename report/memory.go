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
}

// figures returns the footprint's memory figures; reserved is the reservation tracking (may be empty).
func figures(f *timeline.Footprint, reserved *Memory, vmm bool) MemFigures {
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
	m.PoolStep = f.MinAlloc
	m.SavingSupported = m.SavedBytes > 0 && m.SavedBytes >= m.PoolStep
	m.SavedAtLeast = min(timeline.SavedAtLeast(f.ReleasedAtPeak, m.PoolStep), m.SavedBytes)
	if m.SavingSupported && m.PoolStep > 0 {
		m.SavedPoolSteps = (m.SavedBytes + m.PoolStep/2) / m.PoolStep
	}
	if reserved != nil {
		m.ReservedPeak = reserved.PeakBytes
	}
	return m
}

// Text is the figures in one line, as run's summary and `report` print them. The no-swap peak and the
// saving are estimates: one trace cannot see how the pool would have grown and fragmented without swap
// (`report --baseline` measures it), so the saving comes with its lower bound, and a saving below one step
// of the pool's growth is not claimed.
func (m MemFigures) Text() string {
	if m.PeakNoSwap == 0 {
		return "no device allocations recorded"
	}
	s := fmt.Sprintf("peak in use %s with swap, about %s without swap (estimate implied by the trace, blind to the "+
		"pool's growth and fragmentation without swap: `report --baseline` measures them); ",
		Bytes(m.PeakInUse), Bytes(m.PeakNoSwap))
	if m.SavedBytes > 0 && !m.SavingSupported {
		return s + fmt.Sprintf("saved: none this trace supports (the estimate, %d bytes, is less than the pool's "+
			"%s step of growth)", m.SavedBytes, Bytes(m.PoolStep))
	}
	s += fmt.Sprintf("saved about %d bytes (%s, %.1f%% of the no-swap estimate)", m.SavedBytes, Bytes(m.SavedBytes),
		m.SavedPercent)
	if m.SavedBytes == 0 {
		return s
	}
	return s + ", " + m.bound() + m.steps()
}

// steps says the saving in whole steps of the pool's growth, where a step is coarse enough to matter: the
// tensor bytes the estimate counts rarely fill whole steps, so a device counter shows the nearest count of
// them (decoder-sim, hidden 40: about 6,766,592 bytes estimated, 3 steps of 2 MiB measured).
func (m MemFigures) steps() string {
	if m.SavedPoolSteps == 0 || m.SavedPoolSteps > maxStepsWorthSaying {
		return ""
	}
	return fmt.Sprintf("; the pool grows in %s steps, so the device saving is a whole number of them: about %d (%s)",
		Bytes(m.PoolStep), m.SavedPoolSteps, Bytes(m.SavedPoolSteps*m.PoolStep))
}

// maxStepsWorthSaying: a saving of more pool steps than this is fine-grained enough that counting them says
// nothing the bytes do not.
const maxStepsWorthSaying = 64

// bound says the saving's lower bound in words.
func (m MemFigures) bound() string {
	if m.SavedAtLeast == 0 {
		return "with no lower bound this trace proves (little was swapped out when the run peaked)"
	}
	return fmt.Sprintf("at least %d bytes (%s: swapped out when the run peaked, less one %s step of the pool's growth)",
		m.SavedAtLeast, Bytes(m.SavedAtLeast), Bytes(m.PoolStep))
}

// Short is Text for a picture's title line: the same figures, fewer words.
func (m MemFigures) Short() string {
	if m.PeakNoSwap == 0 {
		return "no device allocations recorded"
	}
	if m.SavedBytes > 0 && !m.SavingSupported {
		return fmt.Sprintf("peak in use %s with swap vs about %s without (estimate); no saving supported",
			Bytes(m.PeakInUse), Bytes(m.PeakNoSwap))
	}
	return fmt.Sprintf("peak in use %s with swap vs about %s without (estimate); saved about %s (%.1f%%), at least %s",
		Bytes(m.PeakInUse), Bytes(m.PeakNoSwap), Bytes(m.SavedBytes), m.SavedPercent, Bytes(m.SavedAtLeast))
}
