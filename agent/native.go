// native.go owns the agent's view of the C half of libswapagent.so: the raw event layout (identical to
// the shim's sa_event) and the Native interface the cgo glue implements.
package agent

// Raw is one runtime event as the C ring holds it (72 bytes, the layout of sa_event in shim/c/sa_go.h).
type Raw struct {
	TS    int64 // CLOCK_MONOTONIC nanoseconds
	TID   uint32
	Fn    uint16
	Flags uint16
	Ret   int64
	Args  [6]uint64
}

// Native is what the C shim provides. The agent calls Drain from one goroutine at a time.
type Native interface {
	// Drain copies up to len(dst) published events out of the ring, oldest first.
	Drain(dst []Raw) int
	// FnName names a function id ("" when unknown).
	FnName(fn uint16) string
	// TakeLost returns, and resets, the number of events producers had to drop.
	TakeLost() uint64
	// Now is CLOCK_MONOTONIC in nanoseconds; StartMono and StartWall are the clocks at library load.
	Now() int64
	StartMono() int64
	StartWall() int64
	// CrashPending returns the fatal signal a thread is waiting on (0 when none); CrashAck releases it.
	CrashPending() int
	CrashAck()
	// MarkDrainerThread tells the C side that the calling OS thread is the drainer's.
	MarkDrainerThread()
	// SetDead replaces the ranges ([lo, hi) pairs) the launch check treats as released storage.
	SetDead(ranges []uint64)
	// RecentErrMsg is the real aclGetRecentErrMsg ("" when absent).
	RecentErrMsg() string
	// Disable makes the C side inert: pure pass-through, control calls refused.
	Disable()
	// ThreadID is the calling thread's ID for the trace's ABI events (the C side caches it per thread: no
	// system call per event).
	ThreadID() uint32
	// SetResident keeps the C side's table of resident handles (offload.EvResident): base 0 removes the
	// handle. The C side answers an unpack of a resident handle itself and records it in the ring as
	// trace.FnUnpack (the drain traces it as the unpack it is).
	SetResident(handle int64, base uint64)
	// Queued reads the copy of a queued control call whose address a trace.FnQueued event holds, and frees it.
	Queued(addr uint64) *Call
	// QueueClose ends queueing that lasts until the first move (offload.QueueUntilMove), for good, and
	// returns once every call that saw it open is in the ring.
	QueueClose()
}
