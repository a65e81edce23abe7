// reason.go owns the keep reasons (numbered as swapagent.h's SWAPAGENT_KEEP_*) and the tracker's errors.
package tracker

import "errors"

// Reason says why a saved storage stays on device; Internal means it may be swapped.
// The values are the ABI's SWAPAGENT_KEEP_* codes and never change.
type Reason uint8

// Keep reasons in rule order: for a non-duplicate save the lowest matching rule wins.
const (
	Internal  Reason = 0
	Input     Reason = 1
	Output    Reason = 2
	Protected Reason = 3
	Param     Reason = 4
	Shared    Reason = 5
	Small     Reason = 6
	Duplicate Reason = 7
)

// NumReasons is the number of Reason values.
const NumReasons = 8

var reasonNames = [NumReasons]string{"internal", "input", "output", "protected", "param", "shared", "small", "duplicate"}

// String returns the name used in stats JSON ("input", "shared", ...).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Mask is a set of reasons: every rule that matched a save, not only the winner.
type Mask uint16

// Has reports whether r is in the set.
func (m Mask) Has(r Reason) bool { return m&(1<<r) != 0 }

func bit(r Reason) Mask { return 1 << r }

// Errors returned by the tracker; package offload re-exports them as its ABI errors.
var (
	ErrInvalid = errors.New("invalid argument")
	ErrGroup   = errors.New("unknown group")
	ErrOrder   = errors.New("call out of order")
)
