// engine.go owns the Engine: the swap schedule (offload at region exit, completion at the next exit,
// restore with prefetch at backward), its ordering against the job's streams (docs/design.md, "Stream
// ordering"), the per-storage state machine, and the control calls the agent maps onto the C ABI.
package offload

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"swapagent/trace"
	"swapagent/tracker"
)

// StorageOps are the framework's storage operations (swapagent_set_storage_ops). Release frees a
// storage's device memory (resize_(0)); Restore gives it nbytes again and returns the new base.
// Both are called with the engine's lock held and must not call back into the Engine. An agent should
// feed the runtime events they cause (frees, allocations) to the Tracker before returning, so the
// tracker never learns of a free after the storage was already rebased.
type StorageOps interface {
	Release(handle int64, ptr, nbytes uint64) error
	Restore(handle int64, nbytes uint64) (uint64, error)
}

// lastHandle makes handles unique within the process, across engines.
var lastHandle atomic.Int64

type phase uint8

const (
	phIdle     phase = iota // never entered, or forgotten by backward_exit
	phForward               // inside its region
	phExited                // region exited, waiting for backward
	phBackward              // backward entered
)

type group struct {
	name     string
	phase    phase
	handles  []*handle // since the group became live
	region   []*handle // saved in the open region
	first    map[uint64]*handle
	restored bool     // restored since its last region exit
	swapped  bool     // some handle has a unit this step
	mark     uint64   // Streams mark at region enter
	declared []uint64 // streams the framework said the group uses (SetGroupStreams)
	guarded  bool     // its framework moves its storages itself (Guard; guard.go)
}

type handle struct {
	id         int64
	g          *group
	sid        uint64
	size       uint64
	dup        bool
	classified bool
	match      tracker.Mask
	truth      tracker.Reason // what the ownership model says
	reason     tracker.Reason // what the policy made of it (KeepReason)
	u          *unit
	resident   bool // announced as staying on device until forgotten (EvResident)
}

// unit is one storage's swap state, shared by every handle that lets it move: the duplicates of its
// group and, under outputs-only, the other groups that saved it. One unit per storage is what makes a
// double release impossible.
type unit struct {
	sid        uint64
	size       uint64
	state      State
	owner      *group // the group whose offload launched it and releases it
	rel        int64  // handle passed to Release
	refs       int
	host       HostBuf
	copy       Copy
	base       uint64 // base the copy out read from
	released   bool   // device memory released by us and not restored yet
	devValid   bool   // the device memory holds the storage's bytes
	copyFailed bool
	external   bool // some handle's true reason is not internal (only possible off safe)
	pinned     bool // found shared or protected: never offload again
	dead       bool
	guard      bool // released by the framework's own swap (GuardRelease): the framework restores it
}

// Engine is the offload engine. Every method is safe for concurrent use.
type Engine struct {
	mu    sync.Mutex
	cfg   Config
	mover Mover
	ops   StorageOps
	obs   Observer
	tr    *tracker.Tracker

	groups  map[string]*group
	handles map[int64]*handle
	units   map[uint64]*unit // by storage ID
	order   []*group         // groups that exited this step, in forward order
	pending []*unit          // launched at the last region exit, completed at the next

	streams  *Streams
	lastCopy Copy // the latest copy launched: Close waits for it before freeing host buffers

	pool   pool
	st     trace.Stats
	gstats map[string]*trace.GroupStats
	evq    []Event
	spare  []Event // an empty queue array to reuse (unlock)
	// resident counts the handles announced resident per storage ID (announceResident).
	resident map[uint64]int
	seq      uint64
}

// NewEngine returns an engine. A nil mover disables moving (internal storages are kept and counted as
// errors); nil ops keeps internal storages on device until SetStorageOps; obs may be nil.
func NewEngine(cfg Config, mover Mover, ops StorageOps, obs Observer) *Engine {
	if cfg.Prefetch < 0 {
		cfg.Prefetch = 0
	}
	tr := cfg.Tracker
	if tr == nil {
		tr = tracker.New()
	}
	return &Engine{cfg: cfg, mover: mover, ops: ops, obs: obs, tr: tr, streams: &Streams{},
		groups: map[string]*group{}, handles: map[int64]*handle{}, units: map[uint64]*unit{},
		gstats: map[string]*trace.GroupStats{}}
}

// Tracker returns the engine's tracker (Config.Tracker, or its own).
func (e *Engine) Tracker() *tracker.Tracker { return e.tr }

// Streams returns the engine's record of the job's streams; the agent feeds it every stream it sees work
// enqueued on.
func (e *Engine) Streams() *Streams { return e.streams }

// SetGroupStreams states streams a group's work runs on, beyond those the agent sees it launch on inside
// its region (a framework may launch through paths the agent does not intercept).
func (e *Engine) SetGroupStreams(name string, streams []uint64) error {
	if name == "" {
		return fmt.Errorf("%w: empty group", ErrInvalid)
	}
	e.lock()
	defer e.unlock()
	e.groupNamed(name).declared = slices.Clone(streams)
	return nil
}

// groupNamed returns the group called name, creating it on first use.
func (e *Engine) groupNamed(name string) *group {
	g := e.groups[name]
	if g == nil {
		g = &group{name: name}
		e.groups[name] = g
	}
	return g
}

// regionStreams are the streams whose queued work may have produced or read g's storages: those used
// since its region was entered and those it declared; every known stream when neither says anything.
func (e *Engine) regionStreams(g *group) []uint64 {
	s := e.streams.Since(g.mark)
	for _, d := range g.declared {
		if !slices.Contains(s, d) {
			s = append(s, d)
		}
	}
	if len(s) == 0 {
		return e.streams.All()
	}
	return s
}

// after orders the mover's next copies after the work queued so far on streams.
func (e *Engine) after(streams []uint64) error {
	if e.cfg.Unordered || len(streams) == 0 {
		return nil
	}
	return e.mover.After(streams)
}

// before makes every known stream's later work wait for copy c on the device: a restored storage may be
// read by any of them, and no one may reuse the memory it landed in before the copy is done. With no stream
// known (a job that has only made synchronous calls so far) no device wait could order its next use, a
// synchronous copy on the default stream included, after c: the host waits instead.
func (e *Engine) before(c Copy) error {
	if e.cfg.Unordered || c == 0 {
		return nil
	}
	streams := e.streams.All()
	if len(streams) == 0 {
		return e.mover.Wait(c)
	}
	return e.mover.Before(c, streams)
}

func (e *Engine) launched(c Copy) Copy {
	e.lastCopy = max(e.lastCopy, c)
	return c
}

// Config returns the configuration in use.
func (e *Engine) Config() Config { return e.cfg }

// Queueing says which calls the C side may queue (Policy.Queueing) and the size below which a saved storage
// stays on device whatever else holds it (the tracker's small rule, tracker.KeepSmall): under QueueUntilMove,
// a region exit whose saves are all smaller moves nothing. The C side asks it once (shim/c/calls.c).
func (e *Engine) Queueing() (q Queueing, keepBelow uint64) {
	return e.cfg.Policy.Queueing(), e.cfg.MinBytes
}

// SetStorageOps registers (or, with nil, removes) the framework's storage ops.
func (e *Engine) SetStorageOps(ops StorageOps) {
	e.mu.Lock()
	e.ops = ops
	e.mu.Unlock()
}

func (e *Engine) lock() { e.mu.Lock() }

// unlock releases the lock, then delivers queued events so an observer may call back. The queue's array is
// kept for the next call (a region's exit queues an event per saved storage): it goes back unless an
// observer's call queued events meanwhile.
func (e *Engine) unlock() {
	evs := e.evq
	e.evq = nil
	e.mu.Unlock()
	if len(evs) == 0 {
		return
	}
	for _, ev := range evs {
		e.obs.Observe(ev)
	}
	if cap(evs) <= maxSpareEvents {
		clear(evs)
		e.mu.Lock()
		if e.spare == nil || cap(e.spare) < cap(evs) {
			e.spare = evs[:0]
		}
		e.mu.Unlock()
	}
}

const maxSpareEvents = 1 << 12

func (e *Engine) emit(ev Event) {
	if e.obs == nil {
		return
	}
	e.seq++
	ev.Seq = e.seq
	if e.evq == nil && e.spare != nil {
		e.evq, e.spare = e.spare, nil
	}
	e.evq = append(e.evq, ev)
}

func (e *Engine) gs(name string) *trace.GroupStats {
	s := e.gstats[name]
	if s == nil {
		s = &trace.GroupStats{}
		e.gstats[name] = s
	}
	return s
}

func (e *Engine) move(u *unit, to State, grp string) error {
	if err := Transition(u.state, to); err != nil {
		e.emit(Event{Kind: EvError, Group: grp, Storage: u.sid, Size: u.size, From: u.state, To: to, Detail: err.Error()})
		return err
	}
	e.emit(Event{Kind: EvState, Group: grp, Handle: u.rel, Storage: u.sid, Base: u.base, Size: u.size, From: u.state, To: to,
		ByFramework: u.guard})
	u.state = to
	return nil
}

// RegionEnter opens group's forward region; inputs are storage base pointers, the first nPositional
// from positional arguments. Re-entering a group whose backward began forgets its previous step
// (an implicit BackwardExit); re-entering a group still waiting for backward keeps its handles.
func (e *Engine) RegionEnter(name string, inputs []uint64, nPositional int) error {
	if name == "" || nPositional < 0 || nPositional > len(inputs) {
		return fmt.Errorf("%w: region_enter(%q, %d inputs, %d positional)", ErrInvalid, name, len(inputs), nPositional)
	}
	e.lock()
	defer e.unlock()
	g := e.groupNamed(name)
	switch g.phase {
	case phForward:
		return fmt.Errorf("%w: group %q is already in its region", ErrOrder, name)
	case phBackward:
		e.forget(g)
	}
	if err := e.tr.EnterRegion(name, inputs, nPositional); err != nil {
		return err
	}
	g.phase, g.restored, g.region = phForward, false, reuse(g.region)
	g.mark = e.streams.Mark()
	return nil
}

// Save registers a storage saved for backward in group's open region and returns its handle.
func (e *Engine) Save(name string, ptr, nbytes uint64, flags uint32) (int64, error) {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil || g.phase != phForward {
		return 0, fmt.Errorf("%w: save in group %q outside its region", ErrOrder, name)
	}
	sv, err := e.tr.Save(name, ptr, nbytes, flags)
	if err != nil {
		return 0, err
	}
	return e.saved(g, name, sv, nbytes, 0), nil
}

// SaveN is Save of each entry (ptrs[i], sizes[i], flags[i]; flags nil: all 0) in order, under one lock:
// hs[i] is entry i's handle, or 0 with errs[i] its error. An entry of hs above 0 on the call is the handle
// that save gets (a queued save, given its handle by the C side; unique, never an engine's own).
func (e *Engine) SaveN(name string, ptrs, sizes []uint64, flags []uint32, hs []int64, errs []error) {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil || g.phase != phForward {
		err := fmt.Errorf("%w: save in group %q outside its region", ErrOrder, name)
		for i := range ptrs {
			hs[i], errs[i] = 0, err
		}
		return
	}
	svs := make([]tracker.Saved, len(ptrs))
	e.tr.SaveN(name, ptrs, sizes, flags, svs, errs)
	for i := range ptrs {
		id := hs[i]
		hs[i] = 0
		if errs[i] == nil {
			hs[i] = e.saved(g, name, svs[i], sizes[i], id)
		}
	}
}

// saved makes the handle of a save the tracker registered: id, or the next of the engine's own when 0.
func (e *Engine) saved(g *group, name string, sv tracker.Saved, nbytes uint64, id int64) int64 {
	if id <= 0 {
		id = lastHandle.Add(1)
	}
	h := &handle{id: id, g: g, sid: sv.Storage, size: nbytes, dup: sv.Duplicate}
	if h.dup {
		h.reason, h.truth = tracker.Duplicate, tracker.Duplicate
	}
	if g.first == nil {
		g.first = map[uint64]*handle{}
	}
	if !h.dup {
		g.first[h.sid] = h
	}
	g.handles = append(g.handles, h)
	g.region = append(g.region, h)
	e.handles[h.id] = h
	e.st.Saves++
	e.gs(name).Saves++
	return h.id
}

// effective is the reason the policy acts on.
func (e *Engine) effective(m tracker.Mask, truth tracker.Reason) tracker.Reason {
	if e.cfg.Policy != PolicyOutputsOnly || truth == tracker.Duplicate {
		return truth
	}
	for _, r := range []tracker.Reason{tracker.Output, tracker.Protected, tracker.Param, tracker.Small} {
		if m.Has(r) {
			return r
		}
	}
	return tracker.Internal
}

func (e *Engine) count(h *handle, d int64) {
	gs := e.gs(h.g.name)
	if h.reason == tracker.Internal {
		e.st.Internal = uint64(int64(e.st.Internal) + d)
		gs.Internal = uint64(int64(gs.Internal) + d)
		return
	}
	e.st.Kept.Add(int(h.reason), d)
	gs.Kept = uint64(int64(gs.Kept) + d)
}

func (e *Engine) setReason(h *handle, r tracker.Reason, why string) {
	if h.reason == r {
		return
	}
	e.count(h, -1)
	old := h.reason
	h.reason = r
	e.count(h, 1)
	base, _ := e.tr.Base(h.sid)
	e.emit(Event{Kind: EvReclassify, Group: h.g.name, Handle: h.id, Storage: h.sid, Base: base, Size: h.size, Reason: r,
		Detail: fmt.Sprintf("%v -> %v: %s", old, r, why)})
}

// RegionExit closes group's region: classifies its saves, launches the copies out of its internal
// storages, and completes (waits, then releases) the offload launched at the previous region exit.
func (e *Engine) RegionExit(name string, outputs []uint64) error {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil || g.phase != phForward {
		return fmt.Errorf("%w: region_exit of group %q without region_enter", ErrOrder, name)
	}
	cls, err := e.tr.ExitRegion(name, outputs, e.cfg.MinBytes)
	if err != nil {
		return err
	}
	for i, c := range cls {
		h := g.region[i]
		h.match, h.truth, h.classified = c.Match, c.Reason, true
		h.reason = e.effective(c.Match, c.Reason)
		e.count(h, 1)
		base, _ := e.tr.Base(h.sid)
		// No Detail: this runs once per saved storage, and no observer reads one for a classification.
		e.emit(Event{Kind: EvClassify, Group: name, Handle: h.id, Storage: h.sid, Base: base, Size: h.size,
			Reason: h.reason})
	}
	if e.cfg.Policy == PolicySafe {
		for _, h := range g.region {
			if h.match.Has(tracker.Shared) {
				e.unshare(h)
			}
		}
	}
	if g.guarded {
		e.guardKeeps(g)
	}
	// Complete the previous group's offload before launching this one's copies: a mover waits on its
	// stream, so completing after the launch would also wait for this group's copies and nothing would
	// overlap the next group's compute.
	prev := e.pending
	e.pending = nil
	e.complete(prev)
	var launched []*unit
	if e.cfg.Policy != PolicyOff && !g.guarded {
		fenced := false
		for _, h := range g.region {
			if !fenced && !h.dup && h.reason == tracker.Internal && e.mover != nil {
				// The copies out read what the region's kernels wrote: they start after the work queued
				// on the region's streams so far.
				fenced = true
				if err := e.after(e.regionStreams(g)); err != nil {
					e.st.Errors++
					e.emit(Event{Kind: EvError, Group: name, Detail: "ordering the copies out: " + err.Error()})
					break
				}
			}
			if !h.dup && h.reason == tracker.Internal {
				if u := e.attach(g, h); u != nil {
					launched = append(launched, u)
				}
			}
		}
		for _, h := range g.region {
			if f := g.first[h.sid]; h.dup && f != nil && f.u != nil {
				h.u = f.u
				f.u.refs++
			}
		}
	}
	e.pending = launched
	e.announceResident(g)
	g.region = reuse(g.region)
	g.phase = phExited
	e.removeOrder(g)
	e.order = append(e.order, g)
	return nil
}

// announceResident tells the observer which handles of the region that just exited stay on device until
// their group is forgotten, so that their unpacks can be answered without the engine (EvResident, with
// their base): under off every one (nothing ever moves), under safe those kept whose storage no unit
// moves (another group saving it later makes it shared, so kept there too). Never under outputs-only,
// where another group may move a storage this one keeps.
func (e *Engine) announceResident(g *group) {
	if e.obs == nil || (e.cfg.Policy != PolicyOff && e.cfg.Policy != PolicySafe) {
		return
	}
	for _, h := range g.region {
		if h.resident || e.unitOf(h) != nil || (e.cfg.Policy == PolicySafe && h.reason == tracker.Internal) {
			continue
		}
		base, ok := e.tr.Base(h.sid)
		if !ok || base == 0 {
			continue
		}
		h.resident = true
		if e.resident == nil {
			e.resident = map[uint64]int{}
		}
		e.resident[h.sid]++
		e.emit(Event{Kind: EvResident, Group: g.name, Handle: h.id, Storage: h.sid, Base: base, Size: h.size})
	}
}

// unresident withdraws h's announcement (Base 0).
func (e *Engine) unresident(h *handle) {
	if !h.resident {
		return
	}
	h.resident = false
	if e.resident[h.sid]--; e.resident[h.sid] <= 0 {
		delete(e.resident, h.sid)
	}
	e.emit(Event{Kind: EvResident, Group: h.g.name, Handle: h.id, Storage: h.sid, Size: h.size})
}

// unshare keeps a storage that another live group also saved: their internal handles become shared and
// an offload in progress is undone before anything is released.
func (e *Engine) unshare(h *handle) {
	// Only a group's first handle of a storage can be internal (later ones are duplicates), so the other
	// groups' first handles are all there is to look at.
	for _, g := range e.groups {
		o := g.first[h.sid]
		if o == nil || e.handles[o.id] != o {
			continue
		}
		if o.g != h.g && o.classified && o.reason == tracker.Internal {
			o.match, o.truth = o.match.With(tracker.Shared)
			e.setReason(o, tracker.Shared, "also saved by "+h.g.name)
		}
	}
	if u := e.units[h.sid]; u != nil {
		u.pinned = true
		if u.released {
			e.emit(Event{Kind: EvError, Group: h.g.name, Handle: h.id, Storage: h.sid, Size: h.size,
				Detail: "shared storage was already released by " + u.owner.name})
			return
		}
		e.unwind(u, h.g.name)
	}
}

// attach lets handle h's storage move: it joins the storage's unit or creates it, and returns the unit
// when g launched its copy out.
func (e *Engine) attach(g *group, h *handle) *unit {
	if u := e.units[h.sid]; u != nil {
		h.u = u
		u.refs++
		u.external = u.external || h.truth != tracker.Internal
		g.swapped = true
		if u.state == Device && !u.pinned && e.launch(u, g, h) {
			return u
		}
		if u.state != Device {
			e.emit(Event{Kind: EvShare, Group: g.name, Handle: h.id, Storage: h.sid, Size: h.size,
				Detail: "already offloaded by " + u.owner.name})
		}
		return nil
	}
	if e.resident[h.sid] > 0 { // not expected under off or safe (see announceResident): withdraw, to be sure
		for _, o := range e.handles {
			if o.sid == h.sid {
				e.unresident(o)
			}
		}
	}
	u := &unit{sid: h.sid, size: h.size, state: Device, owner: g, devValid: true}
	if !e.launch(u, g, h) {
		return nil
	}
	u.refs = 1
	u.external = h.truth != tracker.Internal
	h.u = u
	e.units[h.sid] = u
	g.swapped = true
	return u
}

// launch starts the copy out of u for g; false when the storage stays on device.
func (e *Engine) launch(u *unit, g *group, h *handle) bool {
	keep := func(why string) bool {
		e.emit(Event{Kind: EvKeep, Group: g.name, Handle: h.id, Storage: h.sid, Size: h.size, Detail: why})
		return false
	}
	if e.ops == nil {
		e.st.KeptNoOps++
		return keep("no storage ops registered: kept on device")
	}
	if e.mover == nil {
		e.st.Errors++
		return keep("no mover: kept on device")
	}
	base, ok := e.tr.Base(u.sid)
	if !ok || base == 0 {
		return keep("storage is not on device (released or freed): nothing to copy")
	}
	buf, err := e.pool.get(e.mover, u.size)
	if err != nil {
		e.st.Errors++
		return keep("host buffer: " + err.Error())
	}
	c, err := e.mover.CopyOut(buf.Addr, base, u.size)
	if err != nil {
		e.pool.put(buf)
		e.st.Errors++
		return keep("copy out: " + err.Error())
	}
	u.host, u.copy, u.base, u.owner, u.rel, u.copyFailed = buf, e.launched(c), base, g, h.id, false
	_ = e.move(u, D2H, g.name)
	return true
}

// complete waits for the copies out of units and releases their device memory.
func (e *Engine) complete(units []*unit) {
	for _, u := range units {
		if u.dead || u.state != D2H {
			continue
		}
		t0 := time.Now()
		err := e.mover.Wait(u.copy)
		e.addWait(&e.st.OffloadWaitNS, t0)
		if err != nil {
			e.st.Errors++
			e.emit(Event{Kind: EvError, Group: u.owner.name, Storage: u.sid, Size: u.size, Detail: "copy out: " + err.Error()})
			e.unwind(u, u.owner.name)
			continue
		}
		_ = e.move(u, Host, u.owner.name)
		base, ok := e.tr.Base(u.sid)
		var why string
		switch {
		case !ok || base != u.base:
			why = "storage freed or moved during the copy: not released"
		case e.ops == nil:
			e.st.KeptNoOps++
			why = "no storage ops registered: not released"
		case e.cfg.Policy == PolicySafe && e.tr.SavedByOthers(u.sid, u.owner.name):
			// Another region saved it while the copy ran (regions may nest): shared, so it stays.
			u.pinned = true
			why = "saved by another live group since its copy began (shared): not released"
		default:
			// The tracker learns of the release first: the framework's release may free memory, and a
			// drain that delivers that free before Released would mark the storage freed under its holder.
			_ = e.tr.Released(u.sid, u.owner.name)
			if err := e.ops.Release(u.rel, base, u.size); err != nil {
				_ = e.tr.Restored(u.sid, base)
				e.st.Errors++
				why = "release: " + err.Error()
			}
		}
		if why != "" {
			e.emit(Event{Kind: EvKeep, Group: u.owner.name, Handle: u.rel, Storage: u.sid, Size: u.size, Detail: why})
			e.unwind(u, u.owner.name)
			continue
		}
		u.released, u.devValid = true, false
		e.st.OffloadedStorages++
		e.st.OffloadedBytes += u.size
		if u.external {
			e.st.ReleasedExternal++
		}
		e.st.SavedBytes += u.size
		e.st.SavedBytesPeak = max(e.st.SavedBytesPeak, e.st.SavedBytes)
		gs := e.gs(u.owner.name)
		gs.Offloaded++
		gs.OffloadedBytes += u.size
		e.emit(Event{Kind: EvRelease, Group: u.owner.name, Handle: u.rel, Storage: u.sid, Base: base, Size: u.size,
			External: u.external})
	}
}

func (e *Engine) addWait(p *uint64, t0 time.Time) {
	d := uint64(time.Since(t0).Nanoseconds())
	*p += d
	e.st.WaitNS += d
}

// unwind returns a unit whose device memory was never released to device, through legal transitions.
func (e *Engine) unwind(u *unit, grp string) {
	if u.released {
		return
	}
	if u.state == H2D && !u.devValid {
		// Restored, its copy back in flight (or failed): it lands, and the streams wait for it, before the
		// storage counts as on device.
		_ = e.finishRestore(u, grp)
		return
	}
	if u.state == D2H {
		_ = e.mover.Wait(u.copy)
		_ = e.move(u, Host, grp)
	}
	if u.state == Host {
		_ = e.move(u, H2D, grp)
	}
	if u.state == H2D {
		_ = e.move(u, Device, grp)
	}
	e.pool.put(u.host)
	u.host, u.copy = HostBuf{}, 0
}

// unitOf is the unit deciding where h's bytes are: its own, or, for a handle that does not move with it
// (kept by this group while another group swaps the same storage, possible only off safe, or saved in a
// region still open while another group's copy of it runs), that group's.
func (e *Engine) unitOf(h *handle) *unit {
	if h.u != nil {
		return h.u
	}
	return e.units[h.sid]
}

func (e *Engine) completePending() {
	p := e.pending
	e.pending = nil
	e.complete(p)
}

// restoreGroup brings g's storages back (its later kernels wait for the copies on the device), then
// launches the restore of the next Prefetch swapped groups in backward order.
func (e *Engine) restoreGroup(g *group) error {
	e.completePending()
	first := e.startRestores(g)
	for _, h := range g.handles {
		if u := e.unitOf(h); u != nil && u.state == H2D {
			if err := e.finishRestore(u, g.name); err != nil && first == nil {
				first = err
			}
		}
	}
	if first == nil {
		g.restored = true
	}
	e.prefetch(g)
	return first
}

// startRestores gives g's offloaded storages device memory again, then launches their copies back, all
// after the work queued so far on every stream: the framework may hand a storage memory that queued
// kernels on any stream still use.
func (e *Engine) startRestores(g *group) error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	var copies []*unit
	var hs []*handle
	for _, h := range g.handles {
		if u := e.unitOf(h); u != nil && u.state == Host && !u.guard && !slices.Contains(copies, u) {
			if err := e.reacquire(u, h, g.name); err != nil {
				note(err)
				continue
			}
			copies, hs = append(copies, u), append(hs, h)
		}
	}
	if len(copies) == 0 {
		return first
	}
	if err := e.after(e.streams.All()); err != nil {
		e.st.Errors++
		e.emit(Event{Kind: EvError, Group: g.name, Detail: "ordering the copies in: " + err.Error()})
		for _, u := range copies {
			u.copyFailed = true // finishRestore retries the copy, which orders it again
		}
	}
	for i, u := range copies {
		note(e.copyIn(u, hs[i], g.name))
	}
	return first
}

func (e *Engine) prefetch(g *group) {
	if e.cfg.Prefetch <= 0 {
		return
	}
	i := len(e.order) - 1
	for i >= 0 && e.order[i] != g {
		i--
	}
	for n, i := 0, i-1; i >= 0 && n < e.cfg.Prefetch; i-- {
		q := e.order[i]
		if !q.swapped || q.guarded {
			continue
		}
		n++
		_ = e.startRestores(q)
	}
}

// startRestore gives u device memory again (through the framework) and launches the copy back.
func (e *Engine) startRestore(u *unit, h *handle, grp string) error {
	if err := e.reacquire(u, h, grp); err != nil {
		return err
	}
	if !u.devValid {
		if err := e.after(e.streams.All()); err != nil {
			u.copyFailed = true
		}
	}
	return e.copyIn(u, h, grp)
}

func (e *Engine) failRestore(u *unit, h *handle, grp string, err error) error {
	e.st.Errors++
	e.emit(Event{Kind: EvError, Group: grp, Handle: h.id, Storage: u.sid, Size: u.size, Detail: err.Error()})
	return err
}

// reacquire gives a released storage device memory again through the framework's restore op.
func (e *Engine) reacquire(u *unit, h *handle, grp string) error {
	fail := func(err error) error { return e.failRestore(u, h, grp, err) }
	if u.released {
		if e.ops == nil {
			return fail(fmt.Errorf("%w: cannot restore storage of handle %d", ErrNoOps, h.id))
		}
		base, err := e.ops.Restore(h.id, u.size)
		if err != nil || base == 0 {
			return fail(fmt.Errorf("%w: restore of handle %d (%d bytes): %v", ErrRuntime, h.id, u.size, err))
		}
		if err := e.tr.Restored(u.sid, base); err != nil {
			return fail(fmt.Errorf("%w: %v", ErrRuntime, err))
		}
		u.released, u.base = false, base
		e.st.SavedBytes -= u.size
		e.emit(Event{Kind: EvRestore, Group: grp, Handle: h.id, Storage: u.sid, Base: base, Size: u.size})
	}
	return nil
}

// copyIn launches the copy back of a reacquired storage (none when its device memory was never released);
// the caller ordered it after the streams' queued work.
func (e *Engine) copyIn(u *unit, h *handle, grp string) error {
	u.copy = 0
	if !u.devValid && !u.copyFailed {
		c, err := e.mover.CopyIn(u.base, u.host.Addr, u.size)
		if err != nil {
			return e.failRestore(u, h, grp, fmt.Errorf("%w: copy in: %v", ErrRuntime, err))
		}
		u.copy = e.launched(c)
		e.st.RestoredStorages++
		e.st.RestoredBytes += u.size
		e.gs(grp).Restored++
	}
	return e.move(u, H2D, grp)
}

// finishRestore makes every stream's later work wait for u's copy back, on the device: the host does not
// block. A copy that could not be launched or ordered before is retried here.
func (e *Engine) finishRestore(u *unit, grp string) error {
	if u.copyFailed {
		err := e.after(e.streams.All())
		var c Copy
		if err == nil {
			c, err = e.mover.CopyIn(u.base, u.host.Addr, u.size)
		}
		if err != nil {
			e.st.Errors++
			return fmt.Errorf("%w: copy in: %v", ErrRuntime, err)
		}
		u.copy, u.copyFailed = e.launched(c), false
	}
	t0 := time.Now()
	err := e.before(u.copy)
	e.addWait(&e.st.RestoreWaitNS, t0)
	if err != nil {
		// The streams could not be made to wait: the host waits instead, which orders everything the
		// host enqueues from now on.
		if err = e.mover.Wait(u.copy); err != nil {
			u.copyFailed = true
			e.st.Errors++
			e.emit(Event{Kind: EvError, Group: grp, Storage: u.sid, Size: u.size, Detail: "copy in: " + err.Error()})
			return fmt.Errorf("%w: copy in: %v", ErrRuntime, err)
		}
	}
	u.devValid = true
	e.pool.put(u.host)
	u.host, u.copy = HostBuf{}, 0
	return e.move(u, Device, grp)
}

// BackwardEnter restores group's storages (completing any pending offload first) and prefetches.
func (e *Engine) BackwardEnter(name string) error {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil {
		return fmt.Errorf("%w: backward_enter(%q)", ErrGroup, name)
	}
	if g.phase == phForward {
		return fmt.Errorf("%w: backward_enter(%q) inside its forward region", ErrOrder, name)
	}
	if g.phase == phExited {
		g.phase = phBackward
	}
	if e.cfg.Policy == PolicyOff || g.restored || g.guarded {
		return nil
	}
	return e.restoreGroup(g)
}

// Unpack makes sure the handle's storage is on device and returns its current base (which differs from
// the saved pointer after a restore). The first unpack of a group not yet restored restores it.
func (e *Engine) Unpack(id int64) (uint64, error) {
	e.lock()
	defer e.unlock()
	h := e.handles[id]
	if h == nil {
		return 0, fmt.Errorf("%w: %d", ErrHandle, id)
	}
	if u := e.unitOf(h); u != nil && u.state != Device && !u.guard {
		if !h.g.restored {
			if err := e.restoreGroup(h.g); err != nil {
				return 0, err
			}
		}
		if u.state == D2H {
			e.completePending()
		}
		if u.state == Host {
			if err := e.startRestore(u, h, h.g.name); err != nil {
				return 0, err
			}
		}
		if u.state == H2D {
			if err := e.finishRestore(u, h.g.name); err != nil {
				return 0, err
			}
		}
	}
	base, _ := e.tr.Base(h.sid)
	if base == 0 {
		return 0, fmt.Errorf("%w: handle %d: its storage was released and cannot be restored through it",
			ErrState, id)
	}
	return base, nil
}

// BackwardExit forgets group's handles (State then says ErrHandle); the group may enter again next step.
func (e *Engine) BackwardExit(name string) error {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil {
		return fmt.Errorf("%w: backward_exit(%q)", ErrGroup, name)
	}
	if g.phase == phForward {
		return fmt.Errorf("%w: backward_exit(%q) inside its forward region", ErrOrder, name)
	}
	e.forget(g)
	return nil
}

func (e *Engine) forget(g *group) {
	for _, h := range g.handles {
		delete(e.handles, h.id)
		e.unresident(h)
		e.emit(Event{Kind: EvForget, Group: g.name, Handle: h.id, Storage: h.sid, Size: h.size, Reason: h.reason})
		if u := h.u; u != nil {
			if u.refs--; u.refs == 0 {
				e.drop(u, g.name)
			}
		}
	}
	_ = e.tr.Forget(g.name)
	e.removeOrder(g)
	g.handles, g.region = reuse(g.handles), reuse(g.region)
	clear(g.first)
	g.phase, g.restored, g.swapped = phIdle, false, false
}

// reuse empties a group's handle list for its next region or step, keeping the array: a layer saves about
// as many storages every step, so the lists and the first-save map stop growing after the first. The old
// entries are cleared so no handle outlives its group in them.
func reuse(hs []*handle) []*handle {
	clear(hs)
	return hs[:0]
}

// drop discards a unit nobody references; a storage still released stays released (its savers are done).
func (e *Engine) drop(u *unit, grp string) {
	if (u.state == D2H || u.state == H2D) && e.mover != nil {
		_ = e.mover.Wait(u.copy)
	}
	if u.released {
		e.st.SavedBytes -= u.size
		e.emit(Event{Kind: EvForget, Group: grp, Storage: u.sid, Size: u.size, From: u.state,
			Detail: "forgotten while released: the storage stays released"})
	}
	e.pool.put(u.host)
	u.host, u.dead = HostBuf{}, true
	if e.units[u.sid] == u {
		delete(e.units, u.sid)
	}
}

func (e *Engine) removeOrder(g *group) {
	for i, o := range e.order {
		if o == g {
			e.order = append(e.order[:i], e.order[i+1:]...)
			return
		}
	}
}

// Protect keeps the storages at ptrs on device for group. Storages the group already classified are
// reclassified and an offload in progress is undone; ErrState when one was already released.
func (e *Engine) Protect(name string, ptrs []uint64) error {
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil {
		return fmt.Errorf("%w: protect(%q)", ErrGroup, name)
	}
	ids, err := e.tr.Protect(name, ptrs)
	if err != nil {
		return err
	}
	var out error
	for _, sid := range ids {
		for _, h := range g.handles {
			if h.sid != sid || !h.classified || h.dup {
				continue
			}
			h.match, h.truth = h.match.With(tracker.Protected)
			e.setReason(h, e.effective(h.match, h.truth), "protected after region exit")
			if h.reason == tracker.Internal {
				continue
			}
			if u := e.unitOf(h); u != nil {
				u.pinned = true
				if u.released {
					out = fmt.Errorf("%w: storage of handle %d was already released by %s", ErrState, h.id, u.owner.name)
					continue
				}
				e.unwind(u, name)
			}
		}
	}
	return out
}

// Holders takes the framework's count of the references to each storage at ptrs outside group's saved
// tensors (negative: it cannot tell), read after the group's region exited, once the job's own variables
// have moved on (the companions count when the next layer is entered). Under safe a storage the rules keep
// only for its role (a layer input) that nothing else holds loses that reason (tracker.Releasable): an
// internal one's copy out starts now and completes, like the region's own, at the next region exit. Every count on such a
// storage is recorded (EvReclassify with HeldArg), whatever it decided.
func (e *Engine) Holders(name string, ptrs []uint64, counts []int64) error {
	if len(ptrs) != len(counts) {
		return fmt.Errorf("%w: %d pointers, %d counts", ErrInvalid, len(ptrs), len(counts))
	}
	e.lock()
	defer e.unlock()
	g := e.groups[name]
	if g == nil {
		return fmt.Errorf("%w: holders(%q)", ErrGroup, name)
	}
	if g.phase != phExited || g.guarded {
		return nil // in its region, or its backward began: too early or too late; a guarded group asks at release
	}
	fenced := false
	for i, ptr := range ptrs {
		held := tracker.Holders(counts[i])
		si, ok := e.tr.LookupStorage(ptr)
		if !held.Known() || !ok || si.Base != ptr {
			continue
		}
		h := g.first[si.ID]
		if h == nil || e.handles[h.id] != h || !h.classified || !h.reason.Owned() || e.unitOf(h) != nil {
			continue
		}
		ev := Event{Kind: EvReclassify, Group: name, Handle: h.id, Storage: h.sid, Base: si.Base, Size: h.size,
			Reason: h.reason, HeldArg: trace.HoldersArg(int64(held))}
		if e.cfg.Policy != PolicySafe || !tracker.Releasable(h.match, h.reason, held) {
			ev.Detail = fmt.Sprintf("%v kept: held by %d reference(s) outside its saved tensors", h.reason, held)
			e.emit(ev)
			continue
		}
		e.count(h, -1)
		rest := h.match.WithoutRole()
		ev.Detail = fmt.Sprintf("%v -> %v: no holder outside its saved tensors", h.reason, rest)
		h.truth, h.reason = rest, rest
		e.count(h, 1)
		ev.Reason = h.reason
		e.emit(ev)
		if rest != tracker.Internal {
			continue // small: the engine's economy keeps it
		}
		if e.mover != nil && !fenced {
			// The copy reads what kernels queued so far may still write: all of them, as the storage was
			// produced before the group's region.
			fenced = true
			if err := e.after(e.streams.All()); err != nil {
				e.st.Errors++
				e.emit(Event{Kind: EvError, Group: name, Detail: "ordering the copies out: " + err.Error()})
				return nil
			}
		}
		u := e.attach(g, h)
		if u == nil {
			continue
		}
		e.pending = append(e.pending, u)
		for _, o := range g.handles {
			if o.dup && o.sid == h.sid && o.u == nil {
				o.u = u
				u.refs++
			}
		}
	}
	return nil
}

// State returns the handle's state (Device for kept storages).
func (e *Engine) State(id int64) (int, error) {
	e.lock()
	defer e.unlock()
	h := e.handles[id]
	if h == nil {
		return 0, fmt.Errorf("%w: %d", ErrHandle, id)
	}
	if u := e.unitOf(h); u != nil {
		return int(u.state), nil
	}
	return int(Device), nil
}

// KeepReason returns the reason the policy acted on (tracker.Reason values, 0 internal .. 7 duplicate).
// Before its region exits a handle reports internal, or duplicate for a repeated save.
func (e *Engine) KeepReason(id int64) (int, error) {
	e.lock()
	defer e.unlock()
	h := e.handles[id]
	if h == nil {
		return 0, fmt.Errorf("%w: %d", ErrHandle, id)
	}
	return int(h.reason), nil
}

// HandleInfo describes one handle.
type HandleInfo struct {
	Handle  int64
	Group   string
	Storage tracker.StorageInfo
	Reason  tracker.Reason // what the policy acted on
	Truth   tracker.Reason // what the ownership model says (differs only off safe)
	State   State
}

// Info describes a handle, for diagnosis.
func (e *Engine) Info(id int64) (HandleInfo, error) {
	e.lock()
	defer e.unlock()
	h := e.handles[id]
	if h == nil {
		return HandleInfo{}, fmt.Errorf("%w: %d", ErrHandle, id)
	}
	si, _ := e.tr.Storage(h.sid)
	hi := HandleInfo{Handle: id, Group: h.g.name, Storage: si, Reason: h.reason, Truth: h.truth}
	if u := e.unitOf(h); u != nil {
		hi.State = u.state
	}
	return hi, nil
}

// AddFault appends a diagnosed fault to the stats.
func (e *Engine) AddFault(f trace.Fault) {
	e.lock()
	e.st.Faults = append(e.st.Faults, f)
	e.unlock()
}

// SetPeakDeviceBytes raises peak_device_bytes to n (the agent computes it from runtime events).
func (e *Engine) SetPeakDeviceBytes(n uint64) {
	e.lock()
	e.st.PeakDeviceBytes = max(e.st.PeakDeviceBytes, n)
	e.unlock()
}

// Stats returns a snapshot of the accounting.
func (e *Engine) Stats() trace.Stats {
	e.lock()
	defer e.unlock()
	s := e.st
	s.Policy, s.Prefetch = e.cfg.Policy.String(), e.cfg.Prefetch
	s.HostAllocs, s.HostReuses, s.HostBytes = e.pool.allocs, e.pool.reuses, e.pool.bytes
	if tm, ok := e.mover.(TimelineMover); ok {
		tl := tm.Timeline()
		s.DeviceCopyNS, s.DeviceCopyBytes, s.DeviceStallNS = tl.CopyNS, tl.CopyBytes, tl.StallNS
	}
	s.Faults = append([]trace.Fault{}, e.st.Faults...)
	s.Groups = make(map[string]trace.GroupStats, len(e.gstats))
	for k, v := range e.gstats {
		s.Groups[k] = *v
	}
	return s
}

// Close completes a pending offload and frees the idle host buffers; live handles stay valid.
func (e *Engine) Close() error {
	e.lock()
	defer e.unlock()
	e.completePending()
	if e.mover == nil {
		return nil
	}
	// Copies back may still read pooled host buffers.
	if err := e.mover.Wait(e.lastCopy); err != nil {
		return err
	}
	return e.pool.drain(e.mover)
}
