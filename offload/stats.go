// stats.go owns the Observer that sees every decision of the engine. The accounting it exposes is
// trace.Stats, the stats JSON of architecture.md (trace/records.go), which the engine fills.
package offload

import "swapagent/tracker"

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
	// EvGuardKeep: a storage the framework's own swap would free stays on device: classified owned at its
	// guarded group's region exit, or a release GuardRelease refused. Reason and Detail say why.
	EvGuardKeep
)

var kindNames = [...]string{"", "classify", "reclassify", "state", "release", "restore", "share", "keep", "forget", "error",
	"resident", "guard_keep"}

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
	// ByFramework is set on the EvState of a storage the framework's own swap moves (the guard): no copy
	// of the engine's is in flight, so no kernel can race one.
	ByFramework bool
	// HeldArg is the framework's count of the storage's holders outside its group's saved tensors, as
	// trace.HoldersArg encodes it (0: none given), on the EvReclassify of Engine.Holders.
	HeldArg uint64
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
