// Package offload is swapagent's offload engine: it turns the tracker's ownership decisions into a swap
// schedule, moves bytes through a Mover, and releases and restores device memory through the storage ops
// the framework registered. It is the Go side of the control ABI (swapagent.h); the agent maps each
// call and each Err* value onto it.
//
// # Schedule
//
// Forward, group g: RegionEnter(g, inputs), Save for each saved storage, RegionExit(g, outputs). At exit
// the engine classifies g's saves, completes the offload launched at the previous exit (wait for the
// copies, then release the device memory: state host), and launches the copies out of g's internal
// storages into pooled host buffers (state d2h). Completing first matters: a mover waits on its whole
// stream, so completing after the launch would wait for g's copies too. Overlapping g's copies with the
// next group's compute is the point; releasing one group late is the price.
//
// Backward: when g's data is first needed (BackwardEnter, or the first Unpack of one of its handles) any
// pending offload is completed, g is restored synchronously (Restore storage, copy back, wait: state
// device) and the restore of the next Prefetch swapped groups in backward order (the reverse of forward
// exit order) is launched (state h2d). BackwardExit forgets g's handles; groups are reused next step.
//
// # States
//
// device -> d2h -> host -> h2d -> device, nothing else (Transition returns ErrState). An offload that
// must be undone before the release (a storage found shared later, a protect after exit, a failed copy
// or release) walks the rest of the cycle without copying, so every observer sees legal steps.
//
// # Policies
//
// safe releases only internal storages; a storage that turns out to be saved by another live group
// later is reclassified shared in both groups and its offload undone before anything is released, so
// released_external stays 0. outputs-only is hyper-parallel before the issue 294 fix: only outputs (and
// explicit protects, params, small storages; duplicates still move once) are kept, inputs and shared
// storages are swapped, and each release of a storage the ownership model calls external counts in
// released_external. off classifies and records but never moves or releases: every handle stays device.
//
// # One storage, one swap
//
// Swap state lives per storage (a unit), not per handle: duplicates in a group and, under outputs-only,
// other groups that saved the same storage share it. The first group that offloads a storage owns the
// unit and is the only one that releases it; a later group that saved the same storage "rides" on it
// (an EvShare event) and restores it if it needs it first. So a storage is never released twice and
// never copied from address 0, and the RoPE reproduction behaves like hyper-parallel did: released by
// layer.0's offload completion at layer.1's exit, after which the framework's storage is empty.
//
// # Degrading
//
// The host process must never break. Without storage ops (never registered) internal storages stay on
// device and are counted in kept_no_ops; RegionExit still returns nil. A failed copy out or release keeps
// the storage (counted in errors). ErrNoOps and ErrRuntime are returned only where data cannot come back:
// BackwardEnter and Unpack of a released storage whose restore is impossible.
//
// # Concurrency
//
// Every method is safe from any thread: one mutex guards the engine. Mover and StorageOps are called with
// it held and must not call back; Observer events are queued and delivered after the lock is released,
// so an observer may query the engine (Event.Seq orders events across calls).
package offload
