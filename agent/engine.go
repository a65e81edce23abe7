// engine.go owns the agent's boundary to the offload engine: the Engine interface (exactly the method
// set of *offload.Engine, so the lead wires that in with SetEngine) and the mapping of its errors to the
// stable SWAPAGENT_E* codes of swapagent.h.
package agent

import (
	"errors"

	"swapagent/offload"
)

// Engine is what the agent delegates decisions to; *offload.Engine implements it.
type Engine interface {
	RegionEnter(group string, inputs []uint64, nPositional int) error
	Save(group string, ptr, nbytes uint64, flags uint32) (int64, error)
	RegionExit(group string, outputs []uint64) error
	Protect(group string, ptrs []uint64) error
	BackwardEnter(group string) error
	Unpack(handle int64) (uint64, error)
	BackwardExit(group string) error
	State(handle int64) (int, error)
	KeepReason(handle int64) (int, error)
	SetStorageOps(ops offload.StorageOps)
	Stats() offload.Stats
}

var _ Engine = (*offload.Engine)(nil)

// ABI codes of swapagent.h.
const (
	OK        = 0
	EInvalid  = -1
	EGroup    = -2
	EHandle   = -3
	EOrder    = -4
	EState    = -5
	ENoOps    = -6
	ERuntime  = -7
	EDisabled = -8
)

// Code maps an engine error to its SWAPAGENT_E* code; an error the engine does not name is ERUNTIME.
func Code(err error) int {
	if err == nil {
		return OK
	}
	for i, e := range []error{offload.ErrInvalid, offload.ErrGroup, offload.ErrHandle, offload.ErrOrder,
		offload.ErrState, offload.ErrNoOps, offload.ErrRuntime, offload.ErrDisabled} {
		if errors.Is(err, e) {
			return -1 - i
		}
	}
	return ERuntime
}
