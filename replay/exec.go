// exec.go owns `swapagent replay --exec`: it re-issues a trace's runtime calls (allocations, frees,
// copies, memsets, syncs, streams, events, tensor creations and launches) in recorded order and with
// recorded sizes against an AscendCL runtime, without the framework, mapping every recorded address onto
// the replay's own allocations. The trace has no op geometry, so launches are approximated (see
// docs/replay.md): Mul/Add run for real on 1-D tensors, anything else touches each tensor's range.
package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"swapagent/internal/cli"
	"swapagent/replay/aclrt"
	"swapagent/trace"
)

// FindRuntime says which runtime --exec uses: libascendcl.so from a bare dlopen (LD_LIBRARY_PATH and the
// system paths), then $ASCEND_HOME_PATH/lib64, then the emulator installed beside this binary
// (<exe dir>/../ascend/latest/lib64); libnnopbase.so and libopapi.so come from the same directory. note is
// non-empty when the fallback was taken or a companion library is missing.
func FindRuntime() (path, note string, err error) {
	type candidate struct{ path, shown, note string }
	cands := []candidate{{"libascendcl.so", "libascendcl.so (LD_LIBRARY_PATH or system paths)", ""}}
	if home := os.Getenv("ASCEND_HOME_PATH"); home != "" {
		p := filepath.Join(home, "lib64", "libascendcl.so")
		cands = append(cands, candidate{p, p, ""})
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", "ascend", "latest", "lib64", "libascendcl.so")
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		cands = append(cands, candidate{p, p,
			"no runtime on LD_LIBRARY_PATH or $ASCEND_HOME_PATH: using the emulator beside swapagent (" + p + ")"})
	}
	var tried []string
	for _, c := range cands {
		missing, err := aclrt.Open(c.path)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		var notes []string
		for _, n := range []string{c.note, missing} {
			if n != "" {
				notes = append(notes, n)
			}
		}
		return c.shown, strings.Join(notes, "; "), nil
	}
	return "", "", errors.New("no AscendCL runtime found (set LD_LIBRARY_PATH or ASCEND_HOME_PATH): " +
		strings.Join(tried, "; "))
}

// RuntimeError is the first call of the replay that the runtime failed.
type RuntimeError struct {
	Call     string   `json:"call"`
	Event    int      `json:"event"`
	TS       int64    `json:"ts_ns"`
	Code     int      `json:"code"`
	Recorded int64    `json:"recorded_ret"` // what the same call returned in the recording
	Detail   string   `json:"detail,omitempty"`
	ErrMsg   []string `json:"err_msg,omitempty"` // aclGetRecentErrMsg lines
}

// ExecResult is what --exec did.
type ExecResult struct {
	File          string         `json:"file"`
	Runtime       string         `json:"runtime"`
	Notes         []string       `json:"notes,omitempty"`
	Issued        map[string]int `json:"issued"`  // calls re-issued per recorded function
	Skipped       map[string]int `json:"skipped"` // recorded calls not re-issued, per function
	RealOps       int            `json:"real_ops"`
	Touches       int            `json:"touches"`
	Unmapped      int            `json:"unmapped_addresses"`
	Errors        int            `json:"errors"`      // calls that failed (after the fault too)
	AsRecorded    int            `json:"as_recorded"` // failures the recording had too (not faults)
	StoppedAt     int            `json:"stopped_at"`  // event index where the replay stopped at a fault; -1 if none
	First         *RuntimeError  `json:"first_error,omitempty"`
	Fault         bool           `json:"fault"`            // the runtime faulted (5xxxxx) or diverged from the recording
	Reproduced    bool           `json:"fault_reproduced"` // the recording's call failed with the same code
	RecordedFault bool           `json:"recorded_fault"`   // the recording has a 5xxxxx failure
}

// isFault reports runtime exception codes (507xxx: AI core, memory, internal errors after a fault).
func isFault(code int) bool { return code >= 500000 && code < 600000 }

type alloc struct {
	rec, size, rep uint64
	freed, host    bool
}

type repTensor struct {
	h      uint64
	n      int64
	dtype  int32
	recAdr uint64
}

type executor struct {
	res      *ExecResult
	names    []string
	allocs   []*alloc // creation order; lookups search newest first
	last     *alloc
	streams  map[uint64]uint64
	events   map[uint64]uint64
	tensors  map[uint64]repTensor // recorded handle -> replayed
	pending  map[uint32][]repTensor
	scratch  []uint64
	scrSize  uint64
	scrCur   uint64
	stopped  bool
	curEv    int
	curTS    int64
	curCall  string
	recorded int64
}

// Exec re-issues events against the runtime already opened (FindRuntime).
func Exec(events []trace.Event) *ExecResult {
	x := &executor{
		res:     &ExecResult{Issued: map[string]int{}, Skipped: map[string]int{}, StoppedAt: -1},
		streams: map[uint64]uint64{}, events: map[uint64]uint64{}, tensors: map[uint64]repTensor{},
		pending: map[uint32][]repTensor{},
	}
	x.curCall = "aclInit"
	if r := aclrt.Init(); r != 0 {
		x.check(r, "initialising the runtime for the replay")
		x.res.Fault = true
		return x.res
	}
	x.curCall = "aclrtSetDevice"
	x.check(aclrt.SetDevice(0), "")
	for i := range events {
		ev := &events[i]
		switch ev.Kind {
		case trace.KindFunc:
			for int(ev.Fn) >= len(x.names) {
				x.names = append(x.names, "")
			}
			x.names[ev.Fn] = ev.Text
		case trace.KindCall:
			x.curEv, x.curTS, x.recorded = i, ev.TS, ev.Ret
			x.call(ev)
			if x.stopped {
				x.res.StoppedAt = i
			}
		}
		if x.stopped {
			break
		}
	}
	if !x.stopped {
		// Kernels the recording never waited for still run: surface their faults.
		x.curEv, x.curCall, x.recorded = len(events), "aclrtSynchronizeDevice (end of the trace)", 0
		x.check(aclrt.SyncDevice(), "")
	}
	for _, t := range x.tensors {
		aclrt.DestroyTensor(t.h)
	}
	aclrt.Finalize()
	for _, p := range x.scratch {
		aclrt.FreeScratch(p)
	}
	for _, ev := range events {
		if ev.Kind == trace.KindCall && ev.Ret != 0 && isFault(int(ev.Ret)) {
			x.res.RecordedFault = true
			break
		}
	}
	return x.res
}

// check records a call's result; it returns false (and stops the replay) on a runtime fault.
func (x *executor) check(code int, detail string) bool {
	if code == 0 {
		return true
	}
	x.res.Errors++
	fault := isFault(code)
	if !fault && int64(code) == x.recorded {
		x.res.AsRecorded++ // the recording failed the same way: not a divergence
		return true
	}
	if x.res.First == nil {
		x.res.First = &RuntimeError{Call: x.curCall, Event: x.curEv, TS: x.curTS, Code: code, Recorded: x.recorded,
			Detail: detail, ErrMsg: aclrt.RecentErrMsg()}
		if code == aclrt.Missing {
			x.res.First.Detail = strings.TrimSpace(detail + " (the runtime lacks this function)")
		}
		x.res.Reproduced = int64(code) == x.recorded
	}
	x.res.Fault = true
	if fault {
		x.stopped = true // every later call would return 507899
		return false
	}
	return true
}

func (x *executor) find(a uint64) *alloc {
	if l := x.last; l != nil && a >= l.rec && a-l.rec < l.size {
		return l
	}
	for i := len(x.allocs) - 1; i >= 0; i-- {
		if al := x.allocs[i]; a >= al.rec && a-al.rec < al.size {
			x.last = al
			return al
		}
	}
	return nil
}

// dev maps a recorded device (or pinned host) address; 0 stays 0, an address in a freed allocation maps
// into its freed counterpart (a use after free the runtime must see), an unknown one passes unchanged
// (kernels check their ranges against live device memory, so a stray address faults, never corrupts).
func (x *executor) dev(a uint64) uint64 {
	p, _ := x.devOK(a)
	return p
}

// devOK is dev that also says whether the address was mapped (or 0).
func (x *executor) devOK(a uint64) (uint64, bool) {
	if a == 0 {
		return 0, true
	}
	if al := x.find(a); al != nil {
		return al.rep + (a - al.rec), true
	}
	x.res.Unmapped++
	return a, false
}

// host maps a recorded host address: pinned buffers map like device memory, anything else gets scratch
// memory of at least n bytes.
func (x *executor) host(a, n uint64) uint64 {
	if a == 0 {
		return 0
	}
	if al := x.find(a); al != nil {
		return al.rep + (a - al.rec)
	}
	if n > x.scrSize { // grown, never shrunk; older buffers stay valid for copies still queued
		x.scrCur = aclrt.HostScratch(n)
		x.scratch = append(x.scratch, x.scrCur)
		x.scrSize = n
	}
	return x.scrCur
}

// memAddr maps one side of a copy, by kind (0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 default) and side. A device
// side outside every recorded allocation is not mapped (ok false): a runtime that takes unknown pointers
// for pageable host memory (the emulator does) would write through it.
func (x *executor) memAddr(a, n uint64, kind uint64, dst bool) (uint64, bool) {
	deviceSide := kind == 3 || (kind == 1 && dst) || (kind == 2 && !dst)
	if deviceSide {
		return x.devOK(a)
	}
	return x.host(a, n), true
}

func (x *executor) stream(s uint64) uint64 {
	if s == 0 {
		return 0
	}
	if r, ok := x.streams[s]; ok {
		return r
	}
	x.res.Notes = appendOnce(x.res.Notes, "a stream the trace never created was replayed on the default stream")
	return 0
}

func (x *executor) event(e uint64) (uint64, bool) {
	r, ok := x.events[e]
	return r, ok
}

func appendOnce(list []string, s string) []string {
	for _, l := range list {
		if l == s {
			return list
		}
	}
	return append(list, s)
}

var elemSize = map[int32]int64{0: 4, 1: 2, 2: 1, 3: 4, 4: 1, 6: 2, 7: 2, 8: 4, 9: 8, 10: 8, 11: 8, 12: 1, 27: 2}

func (x *executor) call(ev *trace.Event) {
	name := ""
	if int(ev.Fn) < len(x.names) {
		name = x.names[ev.Fn]
	}
	if name == "" {
		name = fmt.Sprintf("fn#%d", ev.Fn)
	}
	x.curCall = name
	a := ev.Args
	issued := true
	switch name {
	case "aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached":
		if ev.Ret != 0 || a[0] == 0 {
			issued = false // nothing to map: the recording got no memory
			break
		}
		which := map[string]int{"aclrtMalloc": 0, "aclrtMallocAlign32": 1, "aclrtMallocCached": 2}[name]
		p, r := aclrt.Malloc(which, a[1], int32(a[2]))
		if x.check(r, fmt.Sprintf("%d bytes", a[1])) && r == 0 {
			x.allocs = append(x.allocs, &alloc{rec: a[0], size: a[1], rep: p})
		}
	case "aclrtMallocHost":
		if ev.Ret != 0 || a[0] == 0 {
			issued = false
			break
		}
		p, r := aclrt.MallocHost(a[1])
		if x.check(r, fmt.Sprintf("%d bytes", a[1])) && r == 0 {
			x.allocs = append(x.allocs, &alloc{rec: a[0], size: a[1], rep: p, host: true})
		}
	case "aclrtFree", "aclrtFreeHost":
		al := x.find(a[0])
		switch {
		case al != nil && al.rec == a[0] && !al.freed:
			al.freed = true
			if name == "aclrtFree" {
				x.check(aclrt.Free(al.rep), "")
			} else {
				x.check(aclrt.FreeHost(al.rep), "")
			}
		case ev.Ret != 0:
			issued = false // a free the recording already saw fail: nothing of ours to free
		default:
			p := x.dev(a[0]) // double free or interior pointer: let the runtime judge it
			if name == "aclrtFree" {
				x.check(aclrt.Free(p), "")
			} else {
				x.check(aclrt.FreeHost(p), "")
			}
		}
	case "aclrtMemcpy", "aclrtMemcpyAsync":
		dst, ok1 := x.memAddr(a[0], a[4], a[3], true)
		src, ok2 := x.memAddr(a[1], a[2], a[3], false)
		if !ok1 || !ok2 {
			issued = false
			break
		}
		detail := fmt.Sprintf("dst %#x, src %#x, %d bytes, kind %d", a[0], a[1], a[2], a[3])
		if name == "aclrtMemcpy" {
			x.check(aclrt.Memcpy(dst, a[4], src, a[2], int32(a[3])), detail)
		} else {
			x.check(aclrt.MemcpyAsync(dst, a[4], src, a[2], int32(a[3]), x.stream(a[5])), detail)
		}
	case "aclrtMemset", "aclrtMemsetAsync":
		p, ok := x.devOK(a[0])
		if !ok {
			issued = false // see memAddr
			break
		}
		detail := fmt.Sprintf("%#x, %d bytes", a[0], a[1])
		if name == "aclrtMemset" {
			x.check(aclrt.Memset(p, a[3], int32(a[2]), a[1]), detail)
		} else {
			x.check(aclrt.MemsetAsync(p, a[3], int32(a[2]), a[1], x.stream(a[4])), detail)
		}
	case "aclrtSynchronizeStream":
		x.check(aclrt.SyncStream(x.stream(a[0])), "")
	case "aclrtSynchronizeStreamWithTimeout":
		x.check(aclrt.SyncStreamTimeout(x.stream(a[0]), int32(a[1])), "")
	case "aclrtSynchronizeEvent":
		if e, ok := x.event(a[0]); ok {
			x.check(aclrt.SyncEvent(e), "")
		} else {
			issued = false
		}
	case "aclrtCreateStream":
		if ev.Ret != 0 {
			issued = false
			break
		}
		s, r := aclrt.CreateStream()
		if x.check(r, "") && r == 0 {
			x.streams[a[0]] = s
		}
	case "aclrtDestroyStream":
		if s, ok := x.streams[a[0]]; ok {
			delete(x.streams, a[0])
			x.check(aclrt.DestroyStream(s), "")
		} else {
			issued = false
		}
	case "aclrtCreateEvent":
		if ev.Ret != 0 {
			issued = false
			break
		}
		e, r := aclrt.CreateEvent()
		if x.check(r, "") && r == 0 {
			x.events[a[0]] = e
		}
	case "aclrtDestroyEvent":
		if e, ok := x.event(a[0]); ok {
			delete(x.events, a[0])
			x.check(aclrt.DestroyEvent(e), "")
		} else {
			issued = false
		}
	case "aclrtRecordEvent":
		if e, ok := x.event(a[0]); ok {
			x.check(aclrt.RecordEvent(e, x.stream(a[1])), "")
		} else {
			issued = false
		}
	case "aclrtStreamWaitEvent":
		if e, ok := x.event(a[1]); ok {
			x.check(aclrt.StreamWaitEvent(x.stream(a[0]), e), "")
		} else {
			issued = false
		}
	case "aclCreateTensor":
		issued = x.createTensor(ev)
	case "aclDestroyTensor":
		if t, ok := x.tensors[a[0]]; ok {
			delete(x.tensors, a[0])
			aclrt.DestroyTensor(t.h) // host-only; the result says nothing about the device
		} else {
			issued = false
		}
	case "aclInit", "aclFinalize":
		issued = false // the replay initialises once at its start and finalises at its end
	default:
		if trace.IsLaunch(name) {
			x.launch(ev, name)
		} else {
			issued = false // e.g. aclrtSetExceptionInfoCallback: nothing to call it with
		}
	}
	if issued {
		x.res.Issued[name]++
	} else {
		x.res.Skipped[name]++
	}
}

func (x *executor) createTensor(ev *trace.Event) bool {
	if ev.Ret == 0 {
		return false
	}
	a := ev.Args
	dtype := int32(a[3])
	es, ok := elemSize[dtype]
	if !ok {
		es = 1
	}
	n := int64(a[5])
	off := int64(a[4])
	storage := off + n
	if a[2] > 0 {
		storage = max(int64(a[2])/es, 1)
	}
	t := repTensor{h: aclrt.Tensor1D(x.dev(a[1]), max(n, 1), dtype, off, storage), n: n, dtype: dtype, recAdr: a[1]}
	if t.h == 0 {
		x.check(100000, fmt.Sprintf("aclCreateTensor(%#x, %d elements) refused", a[1], n))
		return true
	}
	x.tensors[a[0]] = t
	x.pending[ev.TID] = append(x.pending[ev.TID], t)
	return true
}

// launch re-issues an aclnn launch on the tensors created on its thread since the previous launch.
func (x *executor) launch(ev *trace.Event, name string) {
	list := x.pending[ev.TID]
	if k := ev.Args[4]; k < uint64(len(list)) {
		list = list[uint64(len(list))-k:]
	}
	x.pending[ev.TID] = x.pending[ev.TID][:0]
	st := x.stream(ev.Args[3])
	floats := true
	for _, t := range list {
		floats = floats && t.dtype == 0
	}
	if (name == "aclnnMul" || name == "aclnnAdd") && len(list) == 3 && floats {
		op := aclrt.OpMul
		if name == "aclnnAdd" {
			op = aclrt.OpAdd
		}
		x.res.RealOps++
		code, _ := aclrt.Op(op, list[0].h, list[1].h, list[2].h, st)
		x.check(code, tensorDetail(list))
		return
	}
	for i, t := range list {
		x.res.Touches++
		code, _ := aclrt.Op(aclrt.OpInplaceCopy, t.h, t.h, 0, st)
		if !x.check(code, fmt.Sprintf("touch of tensor %d of %d (%s)", i, len(list), tensorDetail(list[i:i+1]))) {
			return
		}
	}
}

func tensorDetail(list []repTensor) string {
	parts := make([]string, len(list))
	for i, t := range list {
		parts[i] = fmt.Sprintf("%#x x%d", t.recAdr, t.n)
	}
	return "recorded tensors " + strings.Join(parts, ", ")
}

// WriteExecText writes an --exec result for people.
func WriteExecText(w io.Writer, r *ExecResult) {
	fmt.Fprintf(w, "replay --exec %s\n  runtime: %s\n", r.File, r.Runtime)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	total := 0
	names := make([]string, 0, len(r.Issued))
	for n, c := range r.Issued {
		names = append(names, n)
		total += c
	}
	sort.Strings(names)
	fmt.Fprintf(w, "  calls re-issued: %d (launches: %d run as the real op, %d tensor touches)\n", total, r.RealOps,
		r.Touches)
	for _, n := range names {
		fmt.Fprintf(w, "    %-36s %d\n", n, r.Issued[n])
	}
	if len(r.Skipped) > 0 {
		names = names[:0]
		for n := range r.Skipped {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %d", n, r.Skipped[n])
		}
		fmt.Fprintf(w, "  not re-issued: %s\n", strings.Join(parts, ", "))
	}
	if r.Unmapped > 0 {
		fmt.Fprintf(w, "  addresses outside every recorded allocation: %d (tensors keep them; copies and memsets on them are not re-issued)\n", r.Unmapped)
	}
	if r.AsRecorded > 0 {
		fmt.Fprintf(w, "  calls that failed as they did in the recording: %d\n", r.AsRecorded)
	}
	e := r.First
	if e == nil {
		fmt.Fprintf(w, "  result: the runtime ran the trace clean\n")
		return
	}
	fmt.Fprintf(w, "  first runtime error: %s returned %d at event %d (+%s)", e.Call, e.Code, e.Event, ms(e.TS))
	if e.Detail != "" {
		fmt.Fprintf(w, ": %s", e.Detail)
	}
	fmt.Fprintln(w)
	for _, l := range e.ErrMsg {
		fmt.Fprintf(w, "    | %s\n", l)
	}
	switch {
	case r.Reproduced:
		fmt.Fprintf(w, "  result: fault reproduced (the recorded call returned %d too)\n", e.Recorded)
	case isFault(e.Code) && r.RecordedFault:
		fmt.Fprintf(w, "  result: the runtime faulted (the recorded call returned %d; the recording faulted elsewhere)\n", e.Recorded)
	case isFault(e.Code):
		fmt.Fprintf(w, "  result: the runtime faulted where the recording returned %d (the approximated launches read what the real ones may not)\n", e.Recorded)
	default:
		fmt.Fprintf(w, "  result: the replay diverged from the recording (recorded %d)\n", e.Recorded)
	}
	if r.StoppedAt >= 0 {
		fmt.Fprintf(w, "  replay stopped at event %d: after a fault every call fails\n", r.StoppedAt)
	}
}

// runExec is Main's --exec path.
func runExec(file, format string, stdout, stderr io.Writer) int {
	t, notes, err := load(file)
	if err != nil {
		Command.Errorf(stderr, "%v", err)
		return ExitBadInput
	}
	// Re-issuing calls across a gap would replay allocations without their frees (or the reverse) and
	// fault where the job did not.
	if len(t.Gaps) > 0 {
		Command.Errorf(stderr, "--exec needs the whole trace: %s", t.GapWarning(t.Gaps[0]))
		return ExitBadInput
	}
	events := t.Events
	path, rnote, err := FindRuntime()
	if err != nil {
		Command.Errorf(stderr, "%v", err)
		return ExitBadInput
	}
	r := Exec(events)
	r.File, r.Runtime = file, path
	if rnote != "" {
		Command.Errorf(stderr, "note: %s", rnote)
		r.Notes = append([]string{rnote}, r.Notes...)
	}
	r.Notes = append(r.Notes, notes...)
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			Command.Errorf(stderr, "write: %v", err)
		}
	} else {
		WriteExecText(cli.Terminal(stdout), r)
	}
	if r.Fault {
		return ExitViolation
	}
	return ExitClean
}
