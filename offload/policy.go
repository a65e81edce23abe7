// policy.go owns the offload vocabulary: ABI errors, policies, configuration and the state machine.
package offload

import (
	"errors"
	"fmt"

	"swapagent/trace"
	"swapagent/tracker"
)

// ABI errors; the agent maps each to its SWAPAGENT_E* code (agent.Code). Returned errors wrap them with
// detail: test with errors.Is.
var (
	ErrInvalid  = tracker.ErrInvalid
	ErrGroup    = tracker.ErrGroup
	ErrHandle   = errors.New("unknown handle")
	ErrOrder    = tracker.ErrOrder
	ErrState    = errors.New("illegal state transition")
	ErrNoOps    = errors.New("no storage ops registered")
	ErrRuntime  = errors.New("runtime or storage op failed")
	ErrDisabled = errors.New("agent disabled")
)

// Policy chooses which classified storages may leave the device.
type Policy int

// Policies. The zero value is PolicySafe.
const (
	// PolicySafe swaps only internal storages (the ownership model of architecture.md).
	PolicySafe Policy = iota
	// PolicyOutputsOnly reproduces hyper-parallel before the fix of issue 294: only outputs (and explicit
	// protects, params, small storages and duplicates) are kept; inputs and shared storages are swapped.
	PolicyOutputsOnly
	// PolicyOff records and classifies but never moves or releases anything.
	PolicyOff
)

// ParsePolicy parses a policy's name (one of trace.Policies).
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case trace.PolicySafe:
		return PolicySafe, nil
	case trace.PolicyOutputsOnly:
		return PolicyOutputsOnly, nil
	case trace.PolicyOff:
		return PolicyOff, nil
	}
	return PolicySafe, fmt.Errorf("%w: policy %q (want %s, %s or %s)", ErrInvalid, s, trace.PolicySafe,
		trace.PolicyOutputsOnly, trace.PolicyOff)
}

// String returns the policy's name as ParsePolicy accepts it.
func (p Policy) String() string {
	switch p {
	case PolicySafe:
		return trace.PolicySafe
	case PolicyOutputsOnly:
		return trace.PolicyOutputsOnly
	case PolicyOff:
		return trace.PolicyOff
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// What a policy asks of the rest: the agent, the C side and the framework's side ask these instead of
// comparing the policy's name, so what a policy means is written here alone.

// WantsHolders says whether the framework should count a layer input's other holders and report them
// (SWAPAGENT_CALL_HOLDERS): safe decides on them, off records them for replay and plan to decide on later;
// outputs-only moves layer inputs whatever holds them.
func (p Policy) WantsHolders() bool { return p != PolicyOutputsOnly }

// KeepsInputs says whether the job's own swap should be told to keep a layer's inputs on device
// (hyper-parallel's protect_alias_tensors): safe keeps them; outputs-only reproduces the swap that does not,
// and off releases nothing anyway.
func (p Policy) KeepsInputs() bool { return p == PolicySafe }

// MovesExternal says whether the policy moves storages the ownership model keeps on device (outputs-only: a
// layer's inputs and shared storages), so that a fault on one is the policy's doing, not the job's streams'.
func (p Policy) MovesExternal() bool { return p == PolicyOutputsOnly }

// Asks is what the policy asks of the framework's side, in the stats JSON (trace.Asks).
func (p Policy) Asks() trace.Asks {
	return trace.Asks{Holders: p.WantsHolders(), KeepInputs: p.KeepsInputs()}
}

// Queueing says which queued calls (swapagent.h, "Queued calls") the C side may answer itself and run later.
type Queueing int

// Queueings.
const (
	// QueueNone: every call runs at once (outputs-only: another group may move what one keeps).
	QueueNone Queueing = iota
	// QueueAll: every queueable call is queued (off: nothing ever moves).
	QueueAll
	// QueueUntilMove: calls are queued until the engine first moves a storage, a region exit only when the
	// engine keeps each of its saves on device for its size (safe).
	QueueUntilMove
)

// Queueing is how the policy lets the C side queue calls (Engine.Queueing adds the size it keeps).
func (p Policy) Queueing() Queueing {
	switch p {
	case PolicyOff:
		return QueueAll
	case PolicySafe:
		return QueueUntilMove
	}
	return QueueNone
}

// The defaults of the environment (architecture.md: SWAPAGENT_PREFETCH and SWAPAGENT_MIN_BYTES unset): the
// agent's, and replay's for a trace that did not record its own.
const (
	DefaultPrefetch = 1
	DefaultMinBytes = 65536
	// MaxPrefetch is the deepest prefetch SWAPAGENT_PREFETCH and replay --prefetch take.
	MaxPrefetch = 1024
)

// Config tunes an Engine. The zero value is policy safe, no prefetch, no small threshold.
type Config struct {
	Policy   Policy
	Prefetch int    // groups restored ahead in backward order; negative means 0
	MinBytes uint64 // storages below this many bytes are kept with reason small
	// Unordered drops the event ordering of the mover's copies against the job's streams (After and
	// Before are not called). Tests only: it is the control that shows the hazard checker sees the bug.
	Unordered bool
	// Tracker is the ownership model the engine asks (tracker/): its owner's, who feeds it the runtime's
	// allocations and frees and proves pointers with it. nil: a tracker of the engine's own (tests, replay).
	Tracker *tracker.Tracker
}

// DefaultConfig is the configuration of the environment's defaults: policy safe, DefaultPrefetch,
// DefaultMinBytes.
func DefaultConfig() Config {
	return Config{Policy: PolicySafe, Prefetch: DefaultPrefetch, MinBytes: DefaultMinBytes}
}

// State is where a swappable storage's bytes are; the values are swapagent.h's SWAPAGENT_STATE_*.
type State int

// States.
const (
	Device State = trace.StateDevice // on device (kept storages never leave it)
	D2H    State = trace.StateD2H    // copy to host launched; device memory still held
	Host   State = trace.StateHost   // copy complete; device memory released
	H2D    State = trace.StateH2D    // device memory restored, copy back launched
)

// String names the state (trace.StateNames).
func (s State) String() string {
	if s >= 0 && int(s) < len(trace.StateNames) {
		return trace.StateNames[s]
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Transition checks one step of the cycle device -> d2h -> host -> h2d -> device; anything else,
// staying put included, is ErrState.
func Transition(from, to State) error {
	if from >= Device && from <= H2D && to == (from+1)%4 {
		return nil
	}
	return fmt.Errorf("%w: %v -> %v", ErrState, from, to)
}
