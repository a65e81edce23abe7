// engine.go owns the agent's link to the offload engine: building it from the configuration with the
// mover the library provides, wrapping the framework's storage ops so the runtime events their callbacks
// cause are in the tracker before the engine goes on, and the mapping of engine errors to the stable
// SWAPAGENT_E* codes of swapagent.h.
package agent

import (
	"errors"

	"swapagent/offload"
	"swapagent/trace"
)

// codes pairs each engine error with its SWAPAGENT_E* code (genabi's trace.Code*).
var codes = []struct {
	err  error
	code int
}{
	{offload.ErrInvalid, trace.CodeEINVAL}, {offload.ErrGroup, trace.CodeEGROUP}, {offload.ErrHandle, trace.CodeEHANDLE},
	{offload.ErrOrder, trace.CodeEORDER}, {offload.ErrState, trace.CodeESTATE}, {offload.ErrNoOps, trace.CodeENOOPS},
	{offload.ErrRuntime, trace.CodeERUNTIME}, {offload.ErrDisabled, trace.CodeEDISABLED},
}

// Code maps an engine error to its SWAPAGENT_E* code; an error the engine does not name is ERUNTIME.
func Code(err error) int {
	if err == nil {
		return trace.CodeOK
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return trace.CodeERUNTIME
}

// StartEngine builds the offload engine the control ABI delegates to. The policy, prefetch depth and
// small threshold come from the configuration; mover copies the bytes. The agent owns the tracker and
// hands it to the engine: it feeds it the runtime's allocations and frees, and the tracker applies the
// pointer rule (tracker/place.go) to every saved and restored storage.
func (a *Agent) StartEngine(mover offload.Mover) {
	tr := a.tracker
	tr.CheckPointers(a.hostMem)
	e := offload.NewEngine(offload.Config{Policy: a.cfg.Policy, Prefetch: a.cfg.Prefetch, MinBytes: a.cfg.MinBytes,
		Unordered: a.cfg.TestUnordered, Tracker: tr}, mover, nil, a)
	a.mu.Lock()
	a.engine, a.streams = e, e.Streams()
	ops := a.ops
	a.mu.Unlock()
	if ops != nil {
		e.SetStorageOps(ops)
	}
}

// drainingOps calls the framework's storage ops and drains the ring after a restore: it may have grown the
// framework's pool with aclrtMalloc, and the engine registers (and copies into) the new base right after
// it returns, so the tracker must already know that allocation. Not after a release: a release that
// aclrtFrees would reach the tracker as a free under a held storage before the engine marks it released.
type drainingOps struct {
	ops offload.StorageOps
	a   *Agent
}

func (d drainingOps) Release(handle int64, ptr, nbytes uint64) error {
	return d.ops.Release(handle, ptr, nbytes)
}

func (d drainingOps) Restore(handle int64, nbytes uint64) (uint64, error) {
	base, err := d.ops.Restore(handle, nbytes)
	d.a.drainUpToQueued() // the engine's lock is held: a queued call waits for the next drain
	return base, err
}
