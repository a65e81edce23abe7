// reason.go owns the keep reasons (numbered as swapagent.h's SWAPAGENT_KEEP_*) and the tracker's errors.
package tracker

import (
	"errors"

	"swapagent/trace"
)

// Reason says why a saved storage stays on device; Internal means it may be swapped.
// The values are the ABI's SWAPAGENT_KEEP_* codes (trace.Keep*) and never change.
type Reason uint8

// Keep reasons in rule order: for a non-duplicate save the lowest matching rule wins.
const (
	Internal  Reason = trace.KeepInternal
	Input     Reason = trace.KeepInput
	Output    Reason = trace.KeepOutput
	Protected Reason = trace.KeepProtected
	Param     Reason = trace.KeepParam
	Shared    Reason = trace.KeepShared
	Small     Reason = trace.KeepSmall
	Duplicate Reason = trace.KeepDuplicate
)

// NumReasons is the number of Reason values.
const NumReasons = trace.NumKeepReasons

// String returns the reason's name as the stats JSON spells it (trace.KeepReasonNames).
func (r Reason) String() string {
	if int(r) < len(trace.KeepReasonNames) {
		return trace.KeepReasonNames[r]
	}
	return "unknown"
}

// Owned says whether the storage belongs to someone outside the group that saved it (an input, an output,
// an explicit protect, a parameter, another live group): what no swap may release. Small storages and
// duplicates are kept by the engine for its own economy, not for their owners.
func (r Reason) Owned() bool {
	switch r {
	case Input, Output, Protected, Param, Shared:
		return true
	}
	return false
}

// Mask is a set of reasons: every rule that matched a save, not only the winner.
type Mask uint16

// Has reports whether r is in the set.
func (m Mask) Has(r Reason) bool { return m&(1<<r) != 0 }

func bit(r Reason) Mask { return 1 << r }

// With is m with rule r matched too, and the reason the ownership rule now gives: the first matching rule
// (First). A reclassification after region exit (protected, shared) goes through it.
func (m Mask) With(r Reason) (Mask, Reason) {
	m |= bit(r)
	return m, First(m)
}

// Errors returned by the tracker; package offload re-exports them as its ABI errors.
var (
	ErrInvalid = errors.New("invalid argument")
	ErrGroup   = errors.New("unknown group")
	ErrOrder   = errors.New("call out of order")
)
