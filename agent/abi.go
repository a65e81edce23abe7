// abi.go owns the Go side of the control ABI (swapagent.h): each call drains the ring first (so the
// trace, and any decision, sees every earlier runtime event), checks its arguments, delegates to the
// engine without holding the agent's lock (the engine calls storage ops and the observer, which may
// re-enter), records itself as a trace event and returns a SWAPAGENT_E* code. Without an engine every
// call but the stats returns EDISABLED, and is still recorded. Every refused call is counted by code
// (the stats' "rejected"); what each call answers to each bad argument is docs/design.md's table "Bad
// arguments at the ABI".
package agent

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// checkGroup is the rule for group names: 1 to trace.MaxGroup bytes (SWAPAGENT_MAX_GROUP: module paths are
// far shorter, and a bound is what lets a C string be read without trusting it), no ASCII control
// character (a name ends up in logs, reports and terminals).
func checkGroup(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty group", offload.ErrInvalid)
	case len(name) > trace.MaxGroup:
		return fmt.Errorf("%w: group name of %d bytes (at most %d)", offload.ErrInvalid, len(name), trace.MaxGroup)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: group name %q holds a control character", offload.ErrInvalid, name)
		}
	}
	return nil
}

// misuse logs each kind of misuse once (a.misused), so a buggy caller cannot flood the log.
func (a *Agent) misuse(call string, code int, err error) {
	key := fmt.Sprintf("%s/%d", call, code)
	if errors.Is(err, tracker.ErrPointer) { // a bad pointer is worth its own line, whatever came before
		key += "/pointer"
	}
	if _, dup := a.misused.LoadOrStore(key, true); dup {
		return
	}
	a.lg.Warn(fmt.Sprintf("swapagent_%s: %v (code %d); further errors of this kind are not logged", call, err, code))
}

// rejected counts refused calls by code (index -code-1), and refused unpacks apart (they return 0).
type rejected struct {
	codes  [trace.NumErrorCodes]atomic.Uint64
	unpack atomic.Uint64
}

// codeNames are the codes' keys in the stats JSON: swapagent.h's names (trace.ErrorCodeNames) in lower case.
var codeNames = func() (names [trace.NumErrorCodes]string) {
	for i, n := range trace.ErrorCodeNames {
		names[i] = strings.ToLower(n)
	}
	return names
}()

func (r *rejected) snapshot() map[string]uint64 {
	m := make(map[string]uint64, len(codeNames)+1)
	for i, n := range codeNames {
		m[n] = r.codes[i].Load()
	}
	m["unpack"] = r.unpack.Load()
	return m
}

// Invalid refuses a call whose C arguments could not be read (NULL, unreadable, too many).
func (a *Agent) Invalid(call, detail string) int {
	return a.result(call, fmt.Errorf("%w: %s", offload.ErrInvalid, detail))
}

// begin drains (a live call: queued calls before it included) and returns the engine; record appends an
// ABI event.
func (a *Agent) begin(o origin) *offload.Engine {
	if o == live {
		a.lockDrained()
	} else {
		a.mu.Lock()
	}
	a.sink.open()
	e := a.engine
	a.mu.Unlock()
	return e
}

func (a *Agent) record(kind trace.Kind, group string, handle, ret int64, ptrs []uint64, args ...uint64) {
	a.recordText(kind, group, handle, ret, ptrs, "", args...)
}

// recordText is record with the event's Text.
func (a *Agent) recordText(kind trace.Kind, group string, handle, ret int64, ptrs []uint64, text string,
	args ...uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || !a.sink.tracing() {
		return
	}
	ts, tid := a.stampLocked()
	ev := trace.Event{Kind: kind, TS: ts, TID: tid, Handle: handle, Ret: ret, Ptrs: ptrs, Text: text}
	if group != "" {
		ev.Group = a.sink.group(group)
	}
	copy(ev.Args[:], args)
	a.sink.add(&ev)
}

func (a *Agent) result(call string, err error) int {
	c := Code(err)
	if c < 0 && -c <= len(a.rejected.codes) {
		a.rejected.codes[-c-1].Add(1)
	}
	switch c {
	case trace.CodeOK:
	case trace.CodeEDISABLED: // expected without an engine: not a misuse
		a.lg.Debug("swapagent_"+call+": disabled", zap.Error(err))
	default:
		a.misuse(call, c, err)
	}
	return c
}

var errNoEngine = fmt.Errorf("%w: no offload engine", offload.ErrDisabled)

// StorageOps adapts the registered C callbacks (the cgo glue builds them).
type StorageOps = offload.StorageOps

// SetStorageOps registers the framework's storage ops (nil removes them).
func (a *Agent) SetStorageOps(ops StorageOps) int {
	if ops != nil {
		ops = drainingOps{ops: ops, a: a}
	}
	a.mu.Lock()
	a.ops = ops
	e := a.engine
	a.mu.Unlock()
	if e == nil {
		return a.result("set_storage_ops", errNoEngine)
	}
	e.SetStorageOps(ops)
	a.lg.Debug("storage ops registered", zap.Bool("set", ops != nil))
	return trace.CodeOK
}

// RegionEnter: inputs are the region's input storages; the first nPositional came from positional
// arguments.
func (a *Agent) RegionEnter(group string, inputs []uint64, nPositional int) int {
	return a.RegionEnterDesc(group, inputs, nPositional, nil)
}

// RegionEnterDesc is RegionEnter with the inputs' descriptions (trace.Tensor wire lines, one per input;
// nil when none were given): fault reports name the argument, its dtype and shape
// (SWAPAGENT_CALL_REGION_ENTER with text).
func (a *Agent) RegionEnterDesc(group string, inputs []uint64, nPositional int, descs []string) int {
	return a.regionEnterDesc(live, group, inputs, nPositional, descs)
}

func (a *Agent) regionEnterDesc(o origin, group string, inputs []uint64, nPositional int, descs []string) int {
	if err := checkGroup(group); err != nil {
		return a.result("region_enter", err)
	}
	if nPositional < 0 || nPositional > len(inputs) {
		return a.result("region_enter", fmt.Errorf("%w: %d inputs, %d positional", offload.ErrInvalid,
			len(inputs), nPositional))
	}
	tensors, err := a.parseTensors(descs, len(inputs))
	if err != nil {
		return a.result("region_enter", err)
	}
	if a.cfg.InjectPanic == "region_enter" {
		panic("injected by SWAPAGENT_TEST_PANIC")
	}
	e := a.begin(o)
	a.checkInputs(group, inputs, nPositional, tensors)
	err = errNoEngine
	if e != nil {
		err = e.RegionEnter(group, inputs, nPositional)
	}
	if err == nil && descs != nil {
		err = a.tracker.Describe(group, inputs, tensors)
	}
	c := a.result("region_enter", err)
	a.recordText(trace.KindRegionEnter, group, 0, int64(c), inputs, wireText(descs), uint64(nPositional))
	return c
}

// Describe tells what the tensors on ptrs of group's open region are (its outputs, what it saved): one
// trace.Tensor wire line per pointer (SWAPAGENT_CALL_DESCRIBE). The tracker keeps them for fault reports and
// owners; the trace keeps them for report and doctor.
func (a *Agent) Describe(group string, ptrs []uint64, descs []string) int {
	if err := checkGroup(group); err != nil {
		return a.result("describe", err)
	}
	tensors, err := a.parseTensors(descs, len(ptrs))
	if err != nil {
		return a.result("describe", err)
	}
	return a.result("describe", a.describeTensors(live, group, ptrs, descs, tensors))
}

// describeTensors is Describe once the descriptions were read (tensors: descs parsed), without counting
// or logging a failure: that is the caller's.
func (a *Agent) describeTensors(o origin, group string, ptrs []uint64, descs []string,
	tensors []trace.Tensor) error {
	err := errNoEngine
	if e := a.begin(o); e != nil {
		err = a.tracker.Describe(group, ptrs, tensors)
	}
	a.recordText(trace.KindDescribe, group, 0, int64(Code(err)), ptrs, wireText(descs))
	return err
}

// wireText is the trace Text of checked descriptions: their lines as given (trace.JoinTensors's form,
// without building them again), "" when none says anything.
func wireText(descs []string) string {
	for _, d := range descs {
		if d != "" {
			return strings.Join(descs, "\n")
		}
	}
	return ""
}

// parseTensors reads n descriptions (none: n zero Tensors); a malformed one refuses the call.
func (a *Agent) parseTensors(descs []string, n int) ([]trace.Tensor, error) {
	out := make([]trace.Tensor, n)
	if descs == nil {
		return out, nil
	}
	if len(descs) != n {
		return nil, fmt.Errorf("%w: %d descriptions for %d pointers", offload.ErrInvalid, len(descs), n)
	}
	return out, a.parsed.parse(descs, out)
}

// tensorCache holds the descriptions parsed so far. A companion describes the same arguments and saved
// shapes every step, and parsing was most of a description's cost in the agent: a line is parsed once.
// Bounded: a caller whose lines never repeat starts it over. The Tensors are shared, never changed.
type tensorCache struct {
	mu sync.Mutex
	m  map[string]trace.Tensor
}

const maxParsed = 4096

// parse fills out with descs parsed; a malformed one is the error.
func (c *tensorCache) parse(descs []string, out []trace.Tensor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, d := range descs {
		t, ok := c.m[d]
		if !ok {
			var err error
			if t, err = trace.ParseTensor(d); err != nil {
				return fmt.Errorf("%w: description %d: %v", offload.ErrInvalid, i, err)
			}
			if c.m == nil || len(c.m) >= maxParsed {
				c.m = make(map[string]trace.Tensor)
			}
			c.m[d] = t
		}
		out[i] = t
	}
	return nil
}

// Save registers a saved storage and returns its handle (or a negative code).
func (a *Agent) Save(group string, ptr, nbytes uint64, flags uint32) int64 {
	if err := checkGroup(group); err != nil {
		return int64(a.result("save", err))
	}
	e := a.begin(live)
	var h int64
	err := errNoEngine
	if e != nil {
		h, err = e.Save(group, ptr, nbytes, flags)
	}
	ret := h
	if err != nil {
		ret = int64(a.result("save", err))
		h = 0
	}
	a.record(trace.KindSave, group, h, ret, nil, ptr, nbytes, uint64(flags), 0)
	return ret
}

// SaveN registers the saved storages of group's open region in one call (SWAPAGENT_CALL_SAVE): entry i is
// what Save(group, ptrs[i], sizes[i], flags[i]) would have answered (flags nil: all 0), written to out[i]
// (a handle, or a negative code; each refused entry is counted like a refused save), with one drain, one
// engine lock and one proof of the host ranges for all of them. It returns OK when every entry was saved,
// else the first refused entry's code. A bad group or mismatched lengths refuse the whole call (EINVAL,
// out untouched).
func (a *Agent) SaveN(group string, ptrs, sizes []uint64, flags []uint32, out []int64) int {
	return a.saveN(live, group, ptrs, sizes, flags, out, false)
}

// saveN is SaveN; preset: out holds the handles the saves are to get (queued saves, given theirs in C).
func (a *Agent) saveN(o origin, group string, ptrs, sizes []uint64, flags []uint32, out []int64, preset bool) int {
	if err := checkGroup(group); err != nil {
		return a.result("save", err)
	}
	if len(sizes) != len(ptrs) || len(out) != len(ptrs) || (flags != nil && len(flags) != len(ptrs)) {
		return a.result("save", fmt.Errorf("%w: %d pointers, %d sizes, %d flags, %d handles", offload.ErrInvalid,
			len(ptrs), len(sizes), len(flags), len(out)))
	}
	if len(ptrs) == 0 {
		return trace.CodeOK
	}
	if !preset {
		clear(out)
	}
	e := a.begin(o)
	errs := make([]error, len(ptrs))
	if e != nil {
		e.SaveN(group, ptrs, sizes, flags, out, errs)
	} else {
		for i := range errs {
			errs[i] = errNoEngine
		}
	}
	rc := trace.CodeOK
	for i, err := range errs {
		if err != nil {
			out[i] = int64(a.result("save", err))
			if rc == trace.CodeOK {
				rc = int(out[i])
			}
		}
	}
	a.recordSaves(group, ptrs, sizes, flags, out)
	return rc
}

// recordSaves records each entry of a SaveN as the KindSave event a Save makes.
func (a *Agent) recordSaves(group string, ptrs, sizes []uint64, flags []uint32, out []int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || !a.sink.tracing() {
		return
	}
	ts, tid := a.stampLocked()
	ev := trace.Event{Kind: trace.KindSave, TS: ts, TID: tid, Group: a.sink.group(group)}
	for i, p := range ptrs {
		var f uint32
		if flags != nil {
			f = flags[i]
		}
		ev.Handle, ev.Ret = max(out[i], 0), out[i]
		ev.Args = [6]uint64{p, sizes[i], uint64(f), 0}
		a.sink.add(&ev)
	}
}

// groupCall is the skeleton of the calls that take a group: the group rule, a drain, the engine's method
// (EDISABLED without an engine), the code, and the call's trace event (kind 0: none).
func (a *Agent) groupCall(o origin, call string, kind trace.Kind, group string, ptrs []uint64,
	do func(*offload.Engine) error) int {
	if err := checkGroup(group); err != nil {
		return a.result(call, err)
	}
	err := errNoEngine
	if e := a.begin(o); e != nil {
		err = do(e)
	}
	c := a.result(call, err)
	if kind != 0 {
		a.record(kind, group, 0, int64(c), ptrs)
	}
	return c
}

// RegionExit closes a region with its output storages.
func (a *Agent) RegionExit(group string, outputs []uint64) int {
	return a.regionExit(live, group, outputs)
}

func (a *Agent) regionExit(o origin, group string, outputs []uint64) int {
	if o == live {
		a.mayMove()
	}
	return a.groupCall(o, "region_exit", trace.KindRegionExit, group, outputs,
		func(e *offload.Engine) error { return e.RegionExit(group, outputs) })
}

// RegionExitWith ends group's open region in one call (SWAPAGENT_CALL_REGION_EXIT with saves or
// descriptions): SaveN of what it saved (none: left out), Describe of desc pointers (none: left out), then
// RegionExit with its outputs. A bad group or description refuses it whole, before anything is done;
// otherwise it returns RegionExit's result (a description fails only where the exit does), and each save's
// is in out.
func (a *Agent) RegionExitWith(group string, outputs, ptrs, sizes []uint64, flags []uint32, out []int64,
	descPtrs []uint64, descs []string) int {
	rc, _ := a.regionExitWith(live, group, outputs, ptrs, sizes, flags, out, false, descPtrs, descs)
	return rc
}

// regionExitWith is RegionExitWith; preset: out holds the handles its saves are to get (a queued call's).
// whole: the call was refused whole (nothing saved).
func (a *Agent) regionExitWith(o origin, group string, outputs, ptrs, sizes []uint64, flags []uint32,
	out []int64, preset bool, descPtrs []uint64, descs []string) (rc int, whole bool) {
	if err := checkGroup(group); err != nil {
		return a.result("region_exit", err), true
	}
	tensors, err := a.parseTensors(descs, len(descPtrs))
	if err != nil {
		return a.result("region_exit", err), true
	}
	if len(ptrs) > 0 {
		a.saveN(o, group, ptrs, sizes, flags, out, preset)
	}
	if len(descPtrs) > 0 {
		_ = a.describeTensors(o, group, descPtrs, descs, tensors) // where it fails, the exit fails and says why
	}
	return a.regionExit(o, group, outputs), false
}

// Protect keeps ptrs on device for group.
func (a *Agent) Protect(group string, ptrs []uint64) int {
	return a.groupCall(live, "protect", trace.KindProtect, group, ptrs,
		func(e *offload.Engine) error { return e.Protect(group, ptrs) })
}

// Holders gives the framework's count of the references to each storage at ptrs outside group's saved
// tensors (SWAPAGENT_CALL_HOLDERS): the engine releases a layer input nothing else holds (offload.Engine.Holders).
// The evidence is traced on the KindClassify it makes, not as a call.
func (a *Agent) Holders(group string, ptrs []uint64, counts []int64) int {
	return a.groupCall(live, "holders", 0, group, nil,
		func(e *offload.Engine) error { return e.Holders(group, ptrs, counts) })
}

// GroupStreams states the streams group's kernels run on (SWAPAGENT_CALL_GROUP_STREAMS).
func (a *Agent) GroupStreams(group string, streams []uint64) int {
	return a.groupCall(live, "group_streams", 0, group, nil,
		func(e *offload.Engine) error { return e.SetGroupStreams(group, streams) })
}

// BackwardEnter marks the start of group's backward.
func (a *Agent) BackwardEnter(group string) int { return a.backwardEnter(live, group) }

func (a *Agent) backwardEnter(o origin, group string) int {
	return a.groupCall(o, "backward_enter", trace.KindBackwardEnter, group, nil,
		func(e *offload.Engine) error { return e.BackwardEnter(group) })
}

// Unpack ensures handle's storage is on device and returns its base (0 on error).
func (a *Agent) Unpack(handle int64) uint64 {
	e := a.begin(live)
	var base uint64
	err := errNoEngine
	if e != nil {
		base, err = e.Unpack(handle)
	}
	ret := int64(base)
	if err != nil {
		a.rejected.unpack.Add(1)
		ret, base = int64(a.result("unpack", err)), 0
	}
	a.record(trace.KindUnpack, "", handle, ret, nil)
	return base
}

// BackwardExit marks the end of group's backward.
func (a *Agent) BackwardExit(group string) int { return a.backwardExit(live, group) }

func (a *Agent) backwardExit(o origin, group string) int {
	return a.groupCall(o, "backward_exit", trace.KindBackwardExit, group, nil,
		func(e *offload.Engine) error { return e.BackwardExit(group) })
}

// handleQuery is the skeleton of the calls that ask about a handle: a drain, the engine's answer or the
// code of its error (EDISABLED without an engine). Not traced: they change nothing.
func (a *Agent) handleQuery(call string, handle int64, ask func(*offload.Engine, int64) (int, error)) int {
	e := a.begin(live)
	if e == nil {
		return a.result(call, errNoEngine)
	}
	v, err := ask(e, handle)
	if err != nil {
		return a.result(call, err)
	}
	return v
}

// State returns handle's state (0 device, 1 d2h, 2 host, 3 h2d) or a negative code.
func (a *Agent) State(handle int64) int {
	return a.handleQuery("state", handle, (*offload.Engine).State)
}

// KeepReason returns handle's keep reason or a negative code.
func (a *Agent) KeepReason(handle int64) int {
	return a.handleQuery("keep_reason", handle, (*offload.Engine).KeepReason)
}

// Observe records the engine's decisions in the trace (the agent is the engine's offload.Observer).
func (a *Agent) Observe(ev offload.Event) {
	switch ev.Kind {
	case offload.EvClassify, offload.EvReclassify:
		a.record(trace.KindClassify, ev.Group, ev.Handle, 0, nil, ev.Base, ev.Size, uint64(ev.Reason), 0, ev.HeldArg)
	case offload.EvState:
		a.record(trace.KindState, ev.Group, ev.Handle, 0, nil, uint64(ev.From), uint64(ev.To), ev.Base, ev.Size)
		if !ev.ByFramework {
			a.inFlight(ev)
		}
	case offload.EvRelease:
		if ev.External {
			a.watch(ev.Storage, ev.Base, ev.Size)
		}
	case offload.EvRestore:
		a.unwatch(ev.Storage)
	case offload.EvResident:
		a.native.SetResident(ev.Handle, ev.Base)
	case offload.EvGuardKeep:
		a.keptOnce(ev)
	case offload.EvError:
		a.lg.Warn("offload: " + ev.Detail)
	default:
		if ev.Detail != "" {
			a.lg.Debug("offload: "+ev.Detail, zap.Int64("handle", ev.Handle), zap.String("group", ev.Group))
		}
	}
}

var _ offload.Observer = (*Agent)(nil)
