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

// Holders is a framework's evidence, at the moment the job's swap releases a storage, of who else holds
// it: the references to the storage outside the saved tensors of the releasing group (the job's
// variables, views, another layer's saved tensor, an autograd node). Negative: the framework cannot tell.
type Holders int64

// HoldersUnknown is the evidence of a framework that gives none.
const HoldersUnknown Holders = -1

// Known reports whether the framework gave a count.
func (h Holders) Known() bool { return h >= 0 }

// Own is the part of a framework's count of holders that is the releasing layer's own machinery: references
// that exist only to serve that layer's backward or recompute (the base of a view its backward hooks made,
// the value its swap's pack hook handed autograd), of the kinds Kinds (trace.Own* bits).
type Own struct {
	N     int64
	Kinds uint64
}

// Outside is the evidence Releasable decides by: the holders the framework counted less the layer's own
// machinery among them, which holds a storage only for the layer itself. An own count the total cannot
// contain (negative, or above it) is no evidence at all: unknown, so the role keeps the storage.
func Outside(h Holders, own Own) Holders {
	switch {
	case !h.Known():
		return HoldersUnknown
	case own.N == 0:
		return h
	case own.N < 0 || own.N > int64(h):
		return HoldersUnknown
	}
	return h - Holders(own.N)
}

// Releasable says whether a storage a group saved, classified with match m and reason r, may leave the
// device when the releasing group's swap asks, given the holders' evidence. A storage the rules keep only
// for its role in the region (an input, an output) may go once nothing but the group's own saved tensors
// holds it: the role was true when the layer was entered, the holders are what is true now. An explicit
// protect, a parameter and another live group's save keep it whatever the count, and missing evidence
// keeps what the role keeps.
func Releasable(m Mask, r Reason, h Holders) bool {
	if !r.Owned() {
		return true
	}
	if m.Has(Protected) || m.Has(Param) || m.Has(Shared) {
		return false
	}
	return h == 0
}

// WithoutRole is the reason the rules give a storage of match m once its role in the region (an input, an
// output) no longer keeps it, as Releasable found: the next rule that matched (small), else internal.
func (m Mask) WithoutRole() Reason { return First(m &^ (bit(Input) | bit(Output))) }

// ByHolders reports whether Releasable allows the storage only because of the evidence: its role would
// have kept it.
func ByHolders(r Reason, h Holders) bool { return r.Owned() && h == 0 }
