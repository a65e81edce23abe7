// records.go owns the three records a trace carries as Text: the fault record (KindFault, and the stats'
// "faults"), the stats JSON (KindStats, swapagent_stats_json) and the metadata (KindMeta). The agent writes
// these types and every reader decodes them, so a field is declared once; docs/doctor.md, docs/trace-format.md
// and architecture.md ("Stats JSON") describe the same keys for people.
package trace

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Uint is an unsigned number of a record. It is written as a JSON number; a reader also takes a decimal or
// "0x" string, and "0xADDR#GEN" (a storage's name) as its address, as older and hand-written records have it.
type Uint uint64

// UnmarshalJSON reads a number, a decimal or "0x" string, or null (zero).
func (u *Uint) UnmarshalJSON(b []byte) error {
	s, _, _ := strings.Cut(strings.Trim(string(b), `"`), "#")
	if s == "null" || s == "" {
		return nil
	}
	v, ok := ParseUint(s)
	if !ok {
		return fmt.Errorf("not an unsigned integer: %.40s", s)
	}
	*u = Uint(v)
	return nil
}

// ParseUint reads a decimal or 0x-prefixed hexadecimal number: how records, and the runtime's log lines
// (acllog), write addresses and sizes.
func ParseUint(s string) (uint64, bool) {
	var v uint64
	var err error
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") {
		v, err = strconv.ParseUint(s[2:], 16, 64)
	} else {
		v, err = strconv.ParseUint(s, 10, 64)
	}
	return v, err == nil
}

// StorageName names a storage as the agent writes it, "0xADDR#GEN", empty when unknown. A reader also
// takes a JSON number or a decimal string (an address alone).
type StorageName string

// UnmarshalJSON reads a string whose address part is a number, a number, or null (empty).
func (s *StorageName) UnmarshalJSON(b []byte) error {
	v := string(b)
	if v == "null" {
		*s = ""
		return nil
	}
	if strings.HasPrefix(v, `"`) {
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
	}
	if a, _, _ := strings.Cut(v, "#"); a != "" {
		if _, ok := ParseUint(a); !ok {
			return fmt.Errorf("not a storage name: %.40s", v)
		}
	}
	*s = StorageName(v)
	return nil
}

// Addr is the storage's address, what readers match on; 0 when unknown.
func (s StorageName) Addr() uint64 {
	a, _, _ := strings.Cut(string(s), "#")
	v, _ := ParseUint(a)
	return v
}

// Fault is one diagnosed bad access: the Text of a KindFault event and an entry of the stats' "faults".
// The agent fills it (agent/fault.go); doctor, report and timeline read it (docs/doctor.md). The field order
// is the order of the written keys.
type Fault struct {
	Kernel        string      `json:"kernel"`       // the launch (aclnnMul) or the call that failed
	TensorIndex   int         `json:"tensor_index"` // the tensor of the launch, -1 when unknown (also when absent)
	Addr          Uint        `json:"addr"`
	Size          Uint        `json:"size"`
	Arg           string      `json:"arg,omitempty"`            // the argument accessed, when the companion named it
	Tensor        string      `json:"tensor,omitempty"`         // its dtype and shape, "float32 [32, 1, 1, 16]"
	Storage       StorageName `json:"storage"`                  // "0xADDR#GEN", empty when unknown
	Generation    Uint        `json:"generation,omitempty"`     // of Storage
	Handle        int64       `json:"handle,omitempty"`         // the swap handle; the agent leaves it to the trace
	Nbytes        Uint        `json:"nbytes,omitempty"`         // Storage's size
	StorageTensor string      `json:"storage_tensor,omitempty"` // Storage's dtype and shape, when described
	ReleasedBy    string      `json:"released_by"`              // the group whose offload released it
	Owner         string      `json:"owner"`                    // e.g. "keyword input of layer.0..layer.10"
	KeepReason    string      `json:"keep_reason,omitempty"`    // how that group classified it (readers fill it)
	Detected      string      `json:"detected"`                 // launch, race, sync or region_enter
	Code          int         `json:"code,omitempty"`           // the runtime's error code, for detected=sync
	Repeats       uint64      `json:"repeats,omitempty"`        // later accesses to the same storage, not reported again
	Detail        string      `json:"detail,omitempty"`         // one line in words
}

// UnmarshalJSON decodes the record with TensorIndex -1 unless the record gives one: a missing or null
// tensor_index (older and hand-written records) means unknown, not tensor 0.
func (f *Fault) UnmarshalJSON(b []byte) error {
	type plain Fault // the default decoding, without this method
	p := plain{TensorIndex: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*f = Fault(p)
	return nil
}

// Kept counts kept storages by keep reason. Its JSON is an object keyed by the reasons' names
// (KeepReasonNames), in the reasons' order, internal aside: internal storages are the ones swapped.
type Kept struct {
	Input     uint64
	Output    uint64
	Protected uint64
	Param     uint64
	Shared    uint64
	Small     uint64
	Duplicate uint64
}

// counter is the count of reason r; nil for KeepInternal and values out of range.
func (k *Kept) counter(r int) *uint64 {
	switch r {
	case KeepInput:
		return &k.Input
	case KeepOutput:
		return &k.Output
	case KeepProtected:
		return &k.Protected
	case KeepParam:
		return &k.Param
	case KeepShared:
		return &k.Shared
	case KeepSmall:
		return &k.Small
	case KeepDuplicate:
		return &k.Duplicate
	}
	return nil
}

// Add adds d to the count of reason r (a swapagent_keep_reason value); internal and unknown reasons are
// not counted.
func (k *Kept) Add(r int, d int64) {
	if p := k.counter(r); p != nil {
		*p = uint64(int64(*p) + d)
	}
}

// Count is the count of reason r, 0 for internal and unknown reasons.
func (k Kept) Count(r int) uint64 {
	if p := k.counter(r); p != nil {
		return *p
	}
	return 0
}

// MarshalJSON writes one member per reason from input to duplicate: its name, then its count.
func (k Kept) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for r := KeepInput; r < NumKeepReasons; r++ {
		if r > KeepInput {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, KeepReasonNames[r])
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
	for r := KeepInput; r < NumKeepReasons; r++ {
		*k.counter(r) = m[KeepReasonNames[r]]
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

// Stats is the stats JSON (architecture.md, "Stats JSON"): the engine's accounting, which package offload
// fills, and what the agent adds (its peak device bytes, fault records, refused calls and runtime
// counters). It is the Text of a KindStats event and what swapagent_stats_json answers.
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
	PeakDeviceBytes   uint64 `json:"peak_device_bytes"` // the agent's, from runtime events
	SavedBytes        uint64 `json:"saved_bytes"`       // device bytes released now
	SavedBytesPeak    uint64 `json:"saved_bytes_peak"`
	OffloadWaitNS     uint64 `json:"offload_wait_ns"` // compute side waiting for copies out
	RestoreWaitNS     uint64 `json:"restore_wait_ns"` // compute side waiting for copies back
	WaitNS            uint64 `json:"wait_ns"`
	// The device timeline (a runtime mover measures it with events): how long the agent's copies held
	// the link (a copy queued behind another from that one's end), the bytes of those copies (copies still
	// in flight are in neither), and how long the job's streams stalled waiting for copies back.
	DeviceCopyNS    uint64 `json:"device_copy_ns"`
	DeviceCopyBytes uint64 `json:"device_copy_bytes"`
	DeviceStallNS   uint64 `json:"device_stall_ns"`
	HostAllocs      uint64 `json:"host_allocs"` // pinned buffers obtained from the mover
	HostReuses      uint64 `json:"host_reuses"` // requests served by the pool
	HostBytes       uint64 `json:"host_bytes"`  // pinned bytes held by the pool
	KeptNoOps       uint64 `json:"kept_no_ops"` // internal storages kept because no storage ops were registered
	Errors          uint64 `json:"errors"`      // mover or storage op failures (the storage was kept)
	// The guard (the job's own swap asks before each release): releases it allowed (also counted in
	// offloaded_*) and releases it refused, keeping the storage on device.
	GuardReleased      uint64                `json:"guard_released"`
	GuardReleasedBytes uint64                `json:"guard_released_bytes"`
	GuardKept          uint64                `json:"guard_kept"`
	GuardKeptBytes     uint64                `json:"guard_kept_bytes"`
	Groups             map[string]GroupStats `json:"groups"`
	Faults             []Fault               `json:"faults"` // the agent and the engine write [] when none
	// The agent's alone: an engine's own snapshot (replay's simulation) has none of these.
	Rejected map[string]uint64 `json:"rejected,omitempty"` // refused control calls by code name, and "unpack"
	Runtime  *Runtime          `json:"runtime,omitempty"`
	Asks     *Asks             `json:"asks,omitempty"`
}

// Asks is what the agent's policy asks of the framework's side (the companions, the guard), so that they
// act on the agent's answer rather than on the policy's name (offload.Policy.Asks).
type Asks struct {
	// Holders: count a layer input's other holders and report them (SWAPAGENT_CALL_HOLDERS).
	Holders bool `json:"holders"`
	// KeepInputs: tell the job's own swap to keep a layer's inputs on device (protect_alias_tensors).
	KeepInputs bool `json:"keep_inputs"`
}

// Runtime is the agent's own counters, the stats JSON's "runtime" object.
type Runtime struct {
	Calls       map[string]uint64 `json:"calls"` // intercepted runtime calls by function name
	Events      uint64            `json:"events"`
	Lost        uint64            `json:"lost"`
	TraceEvents uint64            `json:"trace_events"`
	TraceBytes  uint64            `json:"trace_bytes"`
	Policy      string            `json:"policy"`
	Engine      bool              `json:"engine"`
}

// Meta is the KindMeta record: the process's settings as key=value lines. A map, so a reader keeps every
// key, known or not; the agent writes the Meta* keys.
type Meta map[string]string

// The keys the agent writes, in the order it writes them.
const (
	MetaPolicy   = "policy"
	MetaPrefetch = "prefetch"
	MetaMinBytes = "min_bytes"
	MetaRank     = "rank" // -1 when unknown
	MetaPID      = "pid"
	MetaVersion  = "version"
	MetaABI      = "abi"
	MetaOut      = "out"
	MetaArgv     = "argv" // QuoteArgv
	// MetaPythonGuard is the Python bootstrap's outcome (SWAPAGENT_CALL_NOTE): attached, off, "failed: ...", or
	// absent, which the agent writes at exit for a Python process `swapagent run` offered the bootstrap to
	// and that never ran it (python -I or -S, a replaced PYTHONPATH).
	MetaPythonGuard = "python_guard"
	// MetaPythonUnguarded names, comma-separated, the modules of hyper-parallel's swap the guard found imported
	// in a layout it does not know (SWAPAGENT_CALL_NOTE), with what they define: their releases go unasked.
	MetaPythonUnguarded = "python_guard_unknown"
	// MetaTraceLevel is the trace level the agent recorded at (SWAPAGENT_TRACE): all, memory or off; a trace
	// without it was recorded at all.
	MetaTraceLevel = "trace_level"
	// MetaTraceLimit is the bytes of trace the process keeps (SWAPAGENT_TRACE_LIMIT; 0: no limit).
	MetaTraceLimit = "trace_limit"
	// MetaCompanionPath is the hot path a framework companion ran, "compiled" or "python: <why>", in traces of
	// releases whose companions had a compiled copy; today's are Python only and do not note it. Read (and
	// printed) for those traces.
	MetaCompanionPath = "companion_path"
	// MetaControlCalls is how a companion or the guard reaches the agent (SWAPAGENT_CALL_NOTE): "queued" (the
	// queued calls of swapagent.h, answered in C where nothing can move) or "plain".
	MetaControlCalls = "control_calls"
)

// IsPython says whether argv runs a Python interpreter (python, python3, python3.11, ...: a script with a
// Python shebang runs as its interpreter too).
func IsPython(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	base := argv[0][strings.LastIndexByte(argv[0], '/')+1:]
	return strings.HasPrefix(base, "python") && strings.Trim(base[len("python"):], "0123456789.") == ""
}

var metaOrder = [...]string{MetaPolicy, MetaPrefetch, MetaMinBytes, MetaRank, MetaPID, MetaVersion, MetaABI,
	MetaOut, MetaArgv}

// String formats the record: a line per key, the Meta* keys first in their order, then any other sorted.
// A value holds no newline (the line ends there).
func (m Meta) String() string {
	var b strings.Builder
	line := func(k string) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + m[k])
	}
	for _, k := range metaOrder {
		if _, ok := m[k]; ok {
			line(k)
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(metaOrder[:], k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		line(k)
	}
	return b.String()
}

// Parse adds the key=value lines of text to m: every key is kept, a later value wins, a line without "="
// says nothing.
func (m Meta) Parse(text string) {
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
}

// Prefetch is the recorded prefetch depth; false when absent or not a depth.
func (m Meta) Prefetch() (int, bool) {
	var v int
	if _, err := fmt.Sscan(m[MetaPrefetch], &v); err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// MinBytes is the recorded threshold of keep reason small; false when absent or not a number.
func (m Meta) MinBytes() (uint64, bool) {
	var v uint64
	if _, err := fmt.Sscan(m[MetaMinBytes], &v); err != nil {
		return 0, false
	}
	return v, true
}

// QuoteArgv is the argv value: each argument Go-quoted, separated by spaces.
func QuoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, " ")
}
