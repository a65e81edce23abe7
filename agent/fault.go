// fault.go owns fault diagnosis inside the process: the tracker feed (allocations and frees drained from
// the ring), the ranges of external storages a policy released (the C launch check watches them), and the
// fault records themselves. A fault is found at a kernel launch (a tensor at address 0, or inside a
// watched range: before the kernel runs), after a failed stream sync (from aclGetRecentErrMsg), or when a
// region receives an input whose storage is gone. Each is attributed to the storage, the group that
// released it and its owner, printed once on stderr as a block, written to the trace and flushed at once
// (the process may die next), and listed in the stats JSON.
package agent

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"swapagent/acllog"
	"swapagent/offload"
	"swapagent/trace"
	"swapagent/tracker"
)

// feedLocked tells the tracker about a drained allocation or free and keeps the peak of live device bytes.
func (a *Agent) feedLocked(r *Raw) {
	if r.Ret != 0 {
		return
	}
	if int(r.Fn) >= len(a.kinds) {
		grown := make([]trace.Class, int(r.Fn)+1)
		copy(grown, a.kinds)
		a.kinds = grown
	}
	k := a.kinds[r.Fn]
	if k == trace.ClassUnknown {
		k = trace.ClassOf(a.native.FnName(r.Fn))
		a.kinds[r.Fn] = k
	}
	switch k {
	case trace.ClassDeviceAlloc:
		a.tracker.Alloc(r.Args[0], r.Args[1])
		if _, live := a.tracker.Allocations(); live > a.peakDev {
			a.peakDev = live
		}
	case trace.ClassDeviceFree:
		a.tracker.Free(r.Args[0])
	case trace.ClassException:
		a.exception = r.Args
	case trace.ClassStreamDestroy:
		a.streams.Destroyed(r.Args[0])
	case trace.ClassReserve:
		a.tracker.Reserve(r.Args[0], r.Args[1])
	case trace.ClassReserveRelease:
		a.tracker.Unreserve(r.Args[0])
	default:
		if s, ok := k.Stream(r.Args); ok && a.streams != nil {
			a.streams.Use(s)
		}
	}
}

// Tracker is the agent's ownership model: the engine's (StartEngine hands it over), fed with every
// drained allocation and free; a mover proves the pointers it copies with its Place.
func (a *Agent) Tracker() *tracker.Tracker { return a.tracker }

// watch adds a released external storage to the ranges the C launch check inspects; unwatch removes it
// when the storage is restored.
func (a *Agent) watch(id, base, size uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dead == nil {
		a.dead = map[uint64][2]uint64{}
	}
	a.dead[id] = [2]uint64{base, base + size}
	a.pushDeadLocked()
}

func (a *Agent) unwatch(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.dead[id]; !ok {
		return
	}
	delete(a.dead, id)
	a.pushDeadLocked()
}

func (a *Agent) pushDeadLocked() {
	ranges := make([]uint64, 0, 2*(len(a.dead)+len(a.racing)))
	for _, r := range a.dead {
		ranges = append(ranges, r[0], r[1])
	}
	for _, r := range a.racing {
		ranges = append(ranges, r.base, r.end)
	}
	a.native.SetDead(ranges)
}

// LaunchFault is called by the C launch check, before the kernel runs, for a tensor at address 0 or
// inside a watched range. The launch goes on afterwards: the agent reports, it never changes behaviour.
func (a *Agent) LaunchFault(kernel string, index int, addr, size uint64) {
	a.Drain()
	f := trace.Fault{Kernel: kernel, TensorIndex: index, Addr: trace.Uint(addr), Size: trace.Uint(size),
		Detected: "launch"}
	// A released external storage explains the access first, even when its memory now holds another
	// storage an agent copy is moving: that one is the victim, the release is the cause.
	if id, r, ok := a.racingStorage(addr); ok && !a.watched(addr) {
		a.report(a.raceFault(f, id, r))
		return
	}
	a.report(f, a.attribute(addr, size))
}

// raceFault describes a launch on a storage an agent copy is moving: the job's stream or event use put
// the kernel outside the ordering the agent set up (a stream it never saw inside the region, a kernel
// queued after the region exit on a storage the region owned), so the copy and the kernel race.
func (a *Agent) raceFault(f trace.Fault, id uint64, r inflight) (trace.Fault, []tracker.StorageInfo) {
	f.Detected, f.ReleasedBy = "race", r.group // the group whose offload moves it
	what := "its copy to host (the storage is released once the copy completes)"
	if r.to == offload.H2D {
		what = "its copy back to device (the kernel may read bytes that have not landed)"
	}
	f.Detail = fmt.Sprintf("%s uses tensor %d at %#x, inside a storage of %s while the agent is moving it: %s",
		f.Kernel, f.TensorIndex, f.Addr, r.group, what)
	var cands []tracker.StorageInfo
	if s, ok := a.tracker.Storage(id); ok {
		cands = append(cands, s)
	}
	if len(cands) == 0 {
		f.Storage, f.Nbytes = trace.StorageName(fmt.Sprintf("%#x", r.base)), trace.Uint(r.end-r.base)
	}
	return f, cands
}

// SyncFault is called after a stream or event sync failed with a device exception code: the runtime's
// recent error message names the kernel, tensor, address and size, which are matched to a storage.
func (a *Agent) SyncFault(call string, code int) {
	a.Drain()
	f := trace.Fault{Kernel: call, TensorIndex: -1, Detected: "sync", Code: code}
	recs, _ := acllog.ParseLog(strings.NewReader(a.native.RecentErrMsg()))
	for _, r := range recs {
		if r.KernelName != "" {
			f.Kernel = r.KernelName
		}
		for _, t := range r.Tensors {
			f.TensorIndex = t.Index
			if t.Addr != nil {
				f.Addr = trace.Uint(*t.Addr)
			}
			if t.Size != nil {
				f.Size = trace.Uint(*t.Size)
			}
			break
		}
	}
	a.mu.Lock()
	if ex := a.exception; ex != [6]uint64{} {
		f.Detail = fmt.Sprintf("exception info: task %d, stream %d, thread %d, device %d, error code %d",
			ex[0], ex[1], ex[2], ex[3], ex[4])
	}
	a.mu.Unlock()
	var cands []tracker.StorageInfo
	if f.Size > 0 || f.Addr != 0 {
		cands = a.attribute(uint64(f.Addr), uint64(f.Size))
	}
	a.report(f, cands)
}

// checkInputs reports a region input whose storage is gone: address 0 (a storage resized to zero) or
// inside a watched range. On a CPU framework the next kernel on it is a segmentation fault, so the
// diagnosis has to come now.
// tensors[i] is what the companion said of input i (zero when nothing).
func (a *Agent) checkInputs(group string, inputs []uint64, nPositional int, tensors []trace.Tensor) {
	for i, p := range inputs {
		keyword, tn := i >= nPositional, tensors[i]
		var cands []tracker.StorageInfo
		switch {
		case p == 0:
			cands = a.releasedInputs(keyword, tn.Path)
		case a.watched(p):
			cands = a.attribute(p, 0)
		default:
			continue
		}
		f := trace.Fault{Kernel: fmt.Sprintf("region_enter(%s)", group), TensorIndex: i, Addr: trace.Uint(p),
			Detected: "region_enter", Arg: tn.Path, Tensor: tn.String(),
			Detail: fmt.Sprintf("%s of %s has no device memory", inputName(i, keyword, tn), group)}
		if p == 0 && len(cands) > 0 {
			// The likely storage was needed here too: its owner grows.
			a.tracker.NoteInput(cands[0].ID, group, keyword, tn.Path)
			if s, ok := a.tracker.Storage(cands[0].ID); ok {
				cands[0] = s
			}
		}
		a.report(f, cands)
	}
}

// inputName is how a fault names input i of a region: "keyword input rotary_cos_sin[0] (float32
// [32, 1, 1, 16], 2048 bytes)" when the companion described it, else "keyword input 4".
func inputName(i int, keyword bool, tn trace.Tensor) string {
	kind := "positional input "
	if keyword {
		kind = "keyword input "
	}
	if tn.Path == "" {
		kind += fmt.Sprint(i)
	} else {
		kind += tn.Path
	}
	switch b := tn.Bytes(); {
	case tn.Known() && b > 0:
		kind += fmt.Sprintf(" (%s, %d bytes)", tn, b)
	case tn.Known():
		kind += " (" + tn.String() + ")"
	}
	return kind
}

func (a *Agent) watched(p uint64) bool {
	_, ok := a.watchedStorage(p)
	return ok
}

// watchedStorage returns the released external storage whose range holds p.
func (a *Agent) watchedStorage(p uint64) (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.dead {
		if p >= r[0] && p < r[1] {
			return id, true
		}
	}
	return 0, false
}

// attribute returns the storages that best explain an access to addr (size bytes), most likely first: the
// released storage whose range held addr, or for address 0 the released storages of that size.
func (a *Agent) attribute(addr, size uint64) []tracker.StorageInfo {
	t := a.tracker
	var out []tracker.StorageInfo
	add := func(r tracker.Record) {
		if r.Kind != tracker.RecReleased {
			return
		}
		for _, s := range out {
			if s.ID == r.Storage {
				return
			}
		}
		if s, ok := t.Storage(r.Storage); ok {
			out = append(out, s)
		} else { // no longer held by any group: the history record is all that is left
			out = append(out, tracker.StorageInfo{ID: r.Storage, Addr: r.Base, Gen: r.Gen, Size: r.Size,
				Released: true, ReleasedBy: r.Group})
		}
	}
	if addr != 0 {
		// A watched (released external) storage explains the access even when the framework has since
		// reused the memory for other storages: those are victims, not causes.
		if id, ok := a.watchedStorage(addr); ok {
			if s, ok := t.Storage(id); ok {
				return []tracker.StorageInfo{s}
			}
		}
		if r, ok := t.FindRecent(addr); ok {
			add(r)
		}
		return out
	}
	for _, r := range t.FindSize(size, tracker.HistoryCap) {
		add(r)
	}
	return rankCandidates(out)
}

// releasedInputs returns released storages that were region inputs of the same kind (keyword or
// positional): the likely owners of an input that arrives with address 0. When the companion named the
// argument (arg), the storages that were that same argument of earlier groups come first.
func (a *Agent) releasedInputs(keyword bool, arg string) []tracker.StorageInfo {
	t := a.tracker
	var out []tracker.StorageInfo
	seen := map[uint64]bool{}
	for _, r := range t.History(tracker.HistoryCap) {
		if r.Kind != tracker.RecReleased || seen[r.Storage] {
			continue
		}
		seen[r.Storage] = true
		s, ok := t.Storage(r.Storage)
		if !ok || !s.Released {
			continue
		}
		for _, in := range s.Inputs {
			if in.Keyword == keyword {
				out = append(out, s)
				break
			}
		}
	}
	out = rankCandidates(out)
	if arg != "" {
		sort.SliceStable(out, func(i, j int) bool { return wasArg(out[i], arg) && !wasArg(out[j], arg) })
	}
	return out
}

func wasArg(s tracker.StorageInfo, arg string) bool {
	for _, in := range s.Inputs {
		if in.Arg == arg {
			return true
		}
	}
	return false
}

// rankCandidates sorts storages by the fault rule (tracker.MoreLikely), the one doctor applies to a
// trace's storages. c comes newest first (tracker history order), so its reverse is the release order.
func rankCandidates(c []tracker.StorageInfo) []tracker.StorageInfo {
	type cand struct {
		info    tracker.StorageInfo
		suspect tracker.Suspect
	}
	cs := make([]cand, len(c))
	for i, s := range c {
		cs[len(c)-1-i] = cand{s, tracker.Suspect{Released: s.Released, External: len(s.Inputs) > 0, Order: len(c) - 1 - i}}
	}
	sort.SliceStable(cs, func(i, j int) bool { return tracker.MoreLikely(cs[i].suspect, cs[j].suspect) })
	for i := range cs {
		c[i] = cs[i].info
	}
	return c
}

// report fills f from the most likely storage, prints the block, traces and flushes it. A storage already
// reported by the same check only counts a repeat.
func (a *Agent) report(f trace.Fault, cands []tracker.StorageInfo) {
	if len(cands) > 0 {
		s := cands[0]
		f.Storage, f.Generation, f.Nbytes = trace.StorageName(s.Name()), trace.Uint(s.Gen), trace.Uint(s.Size)
		f.Owner = s.Owner()
		f.StorageTensor = s.Tensor.String()
		if s.ReleasedBy != "" {
			f.ReleasedBy = s.ReleasedBy
		}
	}
	key := f.Detected + "/" + string(f.Storage)
	if f.Storage == "" {
		key = fmt.Sprintf("%s/%s/%d/%d", f.Detected, f.Kernel, f.Addr, f.Size)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if i, ok := a.faultIx[key]; ok {
		a.faults[i].Repeats++
		return
	}
	if a.faultIx == nil {
		a.faultIx = map[string]int{}
	}
	a.faultIx[key] = len(a.faults)
	a.faults = append(a.faults, f)
	fmt.Fprint(a.stderr, faultBlock(f, cands, a.cfg.Policy))
	a.sink.open()
	if b, err := json.Marshal(f); err == nil {
		a.sink.add(&trace.Event{Kind: trace.KindFault, TS: a.ts(), Text: string(b)})
	}
	a.sink.flush()
}

// faultBlock renders one fault for stderr, compute-sanitizer style: what was accessed, then the most
// likely cause, then the other candidates.
func faultBlock(f trace.Fault, cands []tracker.StorageInfo, policy offload.Policy) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, "swapagent: "+format+"\n", args...) }
	switch f.Detected {
	case "launch":
		p("========= FAULT: %s uses tensor %d at address %#x (%d bytes), a storage that is not on device",
			f.Kernel, f.TensorIndex, f.Addr, f.Size)
		p("=========   found at launch, before the kernel runs (it still runs: the agent does not change the job)")
	case "race":
		name, size := string(f.Storage), uint64(f.Nbytes)
		if len(cands) > 0 {
			name, size = cands[0].Name(), cands[0].Size
		}
		if f.Owner != "" && policy.MovesExternal() {
			// The policy moves a storage owned outside the wrapper: that, not the job's streams, is the cause.
			p("========= FAULT (policy): %s", f.Detail)
			p("=========   found at launch, before the kernel runs: the storage is the %s, owned outside the "+
				"swap wrapper, and policy %s moves it for %s's offload; policy safe keeps module inputs on device",
				f.Owner, policy, f.ReleasedBy)
			p("=========   storage %s (%d bytes)", name, size)
			return b.String()
		}
		p("========= FAULT (race): %s", f.Detail)
		p("=========   found at launch, before the kernel runs: the job's streams or events put this kernel " +
			"outside the order the agent's copies follow (docs/design.md, \"Stream ordering\")")
		p("=========   storage %s (%d bytes) of %s; owner: %s", name, size, f.ReleasedBy, orNone(f.Owner))
		return b.String()
	case "sync":
		p("========= FAULT: stream sync failed with %d; the runtime reports kernel %s, tensor %d, address %#x, "+
			"%d bytes", f.Code, f.Kernel, f.TensorIndex, f.Addr, f.Size)
		if f.Detail != "" {
			p("=========   %s", f.Detail)
		}
	default:
		p("========= FAULT: %s", f.Detail)
		p("=========   found at %s, before the layer runs (its first kernel on it would read address 0)", f.Kernel)
	}
	if len(cands) == 0 {
		p("=========   no storage released by this agent matches; see `swapagent doctor` for the runtime's view")
		return b.String()
	}
	for i, s := range cands {
		lead := "most likely"
		if i > 0 {
			lead = "also possible"
		}
		shape := ""
		if d := s.Describe(guessShape); d != "" {
			shape = ": " + d
		}
		p("=========   %s: storage %s (%d bytes%s) was released by %s", lead, s.Name(), s.Size, shape, s.ReleasedBy)
		if owner := s.Owner(); owner != "" {
			p("=========     owner: %s; it lives outside the swap wrapper and must stay on device", owner)
			if i == 0 && policy.MovesExternal() {
				p("=========     policy %s released it; policy safe keeps module inputs on device", policy)
			}
		}
		if i == 2 && len(cands) > 3 {
			p("=========   and %d more", len(cands)-3)
			break
		}
	}
	return b.String()
}

// guessShape is the most likely transformer shape of a storage of size bytes (acllog.ExplainSize), for
// storages the companion did not describe.
func guessShape(size uint64) string {
	if si := acllog.ExplainSize(size); len(si.Shapes) > 0 {
		return si.Shapes[0].String()
	}
	return ""
}

// inflight is a storage an agent copy is moving: out (D2H, until its release) or back (H2D, until the
// job's streams were made to wait for the copy). A kernel launched on it in that window races the copy.
type inflight struct {
	base, end uint64
	group     string
	to        offload.State
}

// inFlight follows a storage's state: in flight while D2H or H2D. Its range joins the launch check's.
func (a *Agent) inFlight(ev offload.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, was := a.racing[ev.Storage]
	switch {
	case (ev.To == offload.D2H || ev.To == offload.H2D) && ev.Base != 0:
		if a.racing == nil {
			a.racing = map[uint64]inflight{}
		}
		a.racing[ev.Storage] = inflight{ev.Base, ev.Base + ev.Size, ev.Group, ev.To}
	case was:
		delete(a.racing, ev.Storage)
	default:
		return
	}
	a.pushDeadLocked()
}

// racingStorage returns the in-flight storage whose range holds p.
func (a *Agent) racingStorage(p uint64) (uint64, inflight, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.racing {
		if p >= r.base && p < r.end {
			return id, r, true
		}
	}
	return 0, inflight{}, false
}

// faultCause is the kind of cause a fault record says, for the summary line.
func faultCause(f trace.Fault) string {
	switch {
	case f.Detected == "race" && f.Owner != "":
		return "a storage owned outside the wrapper moved by the policy"
	case f.Detected == "race":
		return "a kernel racing the agent's copy"
	case f.Detected == "region_enter":
		return "an input with no device memory"
	case f.Detected == "sync":
		return "a failed stream sync"
	case f.Owner != "":
		return "a kernel reading a released external storage"
	}
	return "a kernel reading a storage not on device"
}

// faultSummary is the line the agent ends a process with when it diagnosed faults (compute-sanitizer's
// ERROR SUMMARY): the faults, repeats included, by cause; "" when there were none.
func (a *Agent) faultSummary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.faults) == 0 {
		return ""
	}
	counts := map[string]uint64{}
	var order []string
	var total uint64
	for _, f := range a.faults {
		c := faultCause(f)
		if _, seen := counts[c]; !seen {
			order = append(order, c)
		}
		counts[c] += 1 + f.Repeats
		total += 1 + f.Repeats
	}
	parts := make([]string, len(order))
	for i, c := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[c], c)
	}
	return fmt.Sprintf("swapagent: ========= ERROR SUMMARY: %d fault(s) with their repeats, %d distinct (one block "+
		"each), in pid %d (policy %s): %s\n", total, len(a.faults), a.pid, a.cfg.Policy, strings.Join(parts, "; "))
}

func orNone(s string) string {
	if s == "" {
		return "none recorded"
	}
	return s
}
