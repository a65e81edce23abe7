// stats.go owns the accounting the engine exposes as the stats JSON of architecture.md, the Fault record
// the agent fills, and the Observer that sees every decision.
package offload

import (
	"encoding/json"
	"strconv"

	"swapagent/tracker"
)

// Kept counts kept handles by reason. Its JSON is an object keyed by the reasons' names
// (tracker.Reason.String, the generated trace.KeepReasonNames), in the reasons' order, internal aside.
type Kept struct {
	Input     uint64
	Output    uint64
	Protected uint64
	Param     uint64
	Shared    uint64
	Small     uint64
	Duplicate uint64
}

// counter is the count of reason r; nil for Internal and values out of range.
func (k *Kept) counter(r tracker.Reason) *uint64 {
	switch r {
	case tracker.Input:
		return &k.Input
	case tracker.Output:
		return &k.Output
	case tracker.Protected:
		return &k.Protected
	case tracker.Param:
		return &k.Param
	case tracker.Shared:
		return &k.Shared
	case tracker.Small:
		return &k.Small
	case tracker.Duplicate:
		return &k.Duplicate
	}
	return nil
}

func (k *Kept) add(r tracker.Reason, d int64) {
	if p := k.counter(r); p != nil {
		*p = uint64(int64(*p) + d)
	}
}

// MarshalJSON writes one member per reason from input to duplicate: its name, then its count.
func (k Kept) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for r := tracker.Input; r < tracker.NumReasons; r++ {
		if r > tracker.Input {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, r.String())
		b = append(b, ':')
		b = strconv.AppendUint(b, *k.counter(r), 10)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes; a reason missing counts 0 and unknown keys are ignored.
func (k *Kept) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*k = Kept{}
	for r := tracker.Input; r < tracker.NumReasons; r++ {
		*k.counter(r) = m[r.String()]
	}
	return nil
}

// GroupStats counts one group's handles over all steps.
type GroupStats struct {
	Saves          uint64 `json:"saves"`
	Internal       uint64 `json:"internal"`
	Kept           uint64 `json:"kept"`
	Offloaded      uint64 `json:"offloaded"` // storages this group released
	OffloadedBytes uint64 `json:"offloaded_bytes"`
	Restored       uint64 `json:"restored"` // storages restored for this group
}

// Fault is one diagnosed bad access; the agent fills these (package offload only carries them). The same
// JSON is the Text of a trace's KindFault event, which doctor reads (docs/doctor.md).
type Fault struct {
	Kernel        string `json:"kernel"`       // the launch (aclnnMul) or the call that failed
	TensorIndex   int    `json:"tensor_index"` // the tensor of the launch, -1 when unknown
	Addr          uint64 `json:"addr"`
	Size          uint64 `json:"size"`
	Arg           string `json:"arg,omitempty"`            // the argument accessed, when the companion named it
	Tensor        string `json:"tensor,omitempty"`         // its dtype and shape, "float32 [32, 1, 1, 16]"
	Storage       string `json:"storage"`                  // "0xADDR#GEN", empty when unknown
	Generation    uint32 `json:"generation,omitempty"`     // of Storage
	Nbytes        uint64 `json:"nbytes,omitempty"`         // Storage's size
	StorageTensor string `json:"storage_tensor,omitempty"` // Storage's dtype and shape, when described
	ReleasedBy    string `json:"released_by"`              // the group whose offload released it
	Owner         string `json:"owner"`                    // e.g. "keyword input of layer.0..layer.10"
	Detected      string `json:"detected"`                 // launch, sync or region_enter
	Code          int    `json:"code,omitempty"`           // the runtime's error code, for detected=sync
	Repeats       uint64 `json:"repeats,omitempty"`        // later accesses to the same storage, not reported again
	Detail        string `json:"detail,omitempty"`         // one line in words
}

// Stats is the engine's accounting; it marshals to the stats JSON.
type Stats struct {
	Policy            string `json:"policy"`
	Prefetch          int    `json:"prefetch"`
	Saves             uint64 `json:"saves"`
	Internal          uint64 `json:"internal"` // handles classified internal (swap candidates)
	OffloadedStorages uint64 `json:"offloaded_storages"`
	OffloadedBytes    uint64 `json:"offloaded_bytes"`
	RestoredStorages  uint64 `json:"restored_storages"`
	RestoredBytes     uint64 `json:"restored_bytes"`
	Kept              Kept   `json:"kept"`
	ReleasedExternal  uint64 `json:"released_external"` // releases of storages owned outside (never under safe)
	PeakDeviceBytes   uint64 `json:"peak_device_bytes"` // set by the agent from runtime events
	SavedBytes        uint64 `json:"saved_bytes"`       // device bytes released now
	SavedBytesPeak    uint64 `json:"saved_bytes_peak"`
	OffloadWaitNS     uint64 `json:"offload_wait_ns"` // compute side waiting for copies out
	RestoreWaitNS     uint64 `json:"restore_wait_ns"` // compute side waiting for copies back
	WaitNS            uint64 `json:"wait_ns"`
	// The device timeline (a runtime mover measures it with events): how long the agent's copies took,
	// and how long the job's streams stalled waiting for copies back.
	DeviceCopyNS  uint64                `json:"device_copy_ns"`
	DeviceStallNS uint64                `json:"device_stall_ns"`
	HostAllocs    uint64                `json:"host_allocs"` // pinned buffers obtained from the mover
	HostReuses    uint64                `json:"host_reuses"` // requests served by the pool
	HostBytes     uint64                `json:"host_bytes"`  // pinned bytes held by the pool
	KeptNoOps     uint64                `json:"kept_no_ops"` // internal storages kept because no storage ops were registered
	Errors        uint64                `json:"errors"`      // mover or storage op failures (the storage was kept)
	Groups        map[string]GroupStats `json:"groups"`
	Faults        []Fault               `json:"faults"`
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	EvClassify   EventKind = iota + 1 // a handle classified at region exit
	EvReclassify                      // a handle's reason changed (shared found later, protect after exit)
	EvState                           // a storage changed state
	EvRelease                         // a storage's device memory released
	EvRestore                         // a storage's device memory restored (Base is the new base)
	EvShare                           // a handle rides on a storage another group already offloads
	EvKeep                            // an internal storage kept on device (no ops, no mover, freed under us)
	EvForget                          // a handle forgotten at backward_exit
	EvError                           // a mover or storage op failed
	// EvResident: the handle's storage stays on device at Base until the handle is forgotten, so an unpack
	// of it needs nothing of the engine; Base 0 withdraws that (the handle is forgotten).
	EvResident
)

var kindNames = [...]string{"", "classify", "reclassify", "state", "release", "restore", "share", "keep", "forget", "error",
	"resident"}

// String names the kind.
func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one decision of the engine.
type Event struct {
	Seq     uint64 // engine order: events of concurrent calls can reach the observer interleaved
	Kind    EventKind
	Group   string
	Handle  int64
	Storage uint64 // tracker storage ID
	Base    uint64
	Size    uint64
	Reason  tracker.Reason
	From    State
	To      State
	Detail  string
	// External is set on EvRelease when the ownership model would have kept the storage (a policy
	// violation, possible only under outputs-only): the agent watches such ranges at every launch.
	External bool
}

// Observer receives every decision. It is called after the engine released its lock, so it may call
// the engine's query methods.
type Observer interface {
	Observe(ev Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(ev Event) { f(ev) }
