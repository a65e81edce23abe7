// Package replay owns `swapagent replay`: the offline simulation of a trace under another swap policy
// (what would policy P have released, moved and saved, and which external storage would it have broken)
// and, with --exec, the re-issue of a trace's runtime calls against a real or emulated AscendCL runtime.
//
// simulate.go owns the simulation: it drives the recorded control-ABI events through a fresh
// offload.Engine whose mover and storage ops move no bytes but account for them, interleaved in file
// order with the recorded runtime calls, which give the device-memory curve and the tensors each launch
// read. The recorded side (what the recording itself held, released and named as of each event) is a
// timeline.Timeline folded alongside.
package replay

import (
	"fmt"
	"sort"

	"swapagent/offload"
	"swapagent/pool"
	"swapagent/report"
	"swapagent/timeline"
	"swapagent/trace"
	"swapagent/tracker"
)

// Options configure a simulation. Zero Prefetch/MinBytes with the Set flags false mean "as recorded"
// (the trace's metadata), else the offload defaults.
type Options struct {
	Policy      offload.Policy
	Prefetch    int
	PrefetchSet bool
	MinBytes    uint64
	MinBytesSet bool
	// Swap, when set, says which of the recording's groups are swapped: the control calls of the others are
	// left out, as a job that wraps fewer layers would not make them (a plan's candidate configuration).
	Swap func(group string) bool
	// Schedule is the recording's pool.Schedule when the caller has it (a plan simulates one recording many
	// times); nil: found by a first pass.
	Schedule *pool.Schedule
	// NoSwapKnown: the caller has the no-swap peak (a plan's first simulation): PeakNoSwap is left to the
	// estimate, which saves following the pool a second time.
	NoSwapKnown bool
}

// Read is a later kernel launch that reads a storage the simulation holds released.
type Read struct {
	Kernel      string `json:"kernel"`        // the aclnn launch, e.g. "aclnnMul"
	TensorIndex int    `json:"tensor_index"`  // position among the tensors created for that launch
	Tensors     int    `json:"tensors"`       // how many tensors the launch used
	Addr        uint64 `json:"addr"`          // the tensor's RECORDED data address
	Extent      uint64 `json:"extent"`        // the tensor's recorded storage extent in bytes
	Match       string `json:"match"`         // "address" (inside the storage) or "null-extent" (address 0, same size)
	Event       int    `json:"event"`         // index of the launch in the trace
	TS          int64  `json:"ts_ns"`         // launch time since the trace start
	TID         uint32 `json:"tid"`           // thread that launched it
	ReleasedNow bool   `json:"recorded_null"` // the recorded run had released it too (the recorded address was 0)
}

// Violation is an external storage (keep reason other than internal) the simulated policy released.
type Violation struct {
	Storage    string `json:"storage"` // "0xADDR#GEN"
	Base       uint64 `json:"base"`
	Size       uint64 `json:"size"`
	ReleasedBy string `json:"released_by"`
	During     string `json:"during"` // the ABI call that released it, e.g. "region_exit(layer.1)"
	Reason     string `json:"reason"` // what the ownership model says it is: input, output, shared, ...
	Owner      string `json:"owner"`  // e.g. "keyword input of layer.0..layer.10"
	ReleaseEv  int    `json:"release_event"`
	ReleaseTS  int64  `json:"release_ts_ns"`
	Releases   int    `json:"releases"` // how often the simulation released it
	Reads      int    `json:"reads"`    // launches that read it while released
	FirstRead  *Read  `json:"first_read,omitempty"`
	storageIDs []uint64
	inputs     []tracker.InputUse
}

// Result is what a simulation found.
type Result struct {
	File           string   `json:"file"`
	Argv           []string `json:"argv,omitempty"`
	PID            int      `json:"pid"`
	Policy         string   `json:"policy"`
	Prefetch       int      `json:"prefetch"`
	MinBytes       uint64   `json:"min_bytes"`
	RecordedPolicy string   `json:"recorded_policy,omitempty"`
	Events         int      `json:"events"`
	RuntimeCalls   int      `json:"runtime_calls"`
	ABICalls       int      `json:"abi_calls"`
	NoSwapActivity bool     `json:"no_swap_activity"`
	Released       uint64   `json:"storages_released"`
	Restored       uint64   `json:"storages_restored"`
	BytesOut       uint64   `json:"bytes_moved_out"`
	BytesIn        uint64   `json:"bytes_moved_in"`
	PeakRecorded   uint64   `json:"peak_device_bytes_recorded"`
	PeakNoSwap     uint64   `json:"peak_device_bytes_no_swap"`
	PeakSimulated  uint64   `json:"peak_device_bytes_simulated"`
	// Footprint is what the peaks count: "device", the runtime's allocations in use; "saved", the storages
	// saved for backward (timeline.Saved), where the trace records no device allocation.
	Footprint     string `json:"footprint"`
	SavedVsRecord int64  `json:"saved_bytes_vs_recorded"`
	SavedVsNoSwap int64  `json:"saved_bytes_vs_no_swap"` // an estimate, as report's saved_bytes
	// SavedAtLeast is its lower bound, as report's saved_at_least_bytes (timeline.SavedAtLeast).
	SavedAtLeast int64  `json:"saved_at_least_bytes_vs_no_swap"`
	PoolStep     uint64 `json:"pool_step_bytes"`
	ReleasedPeak uint64 `json:"released_bytes_peak"` // most device bytes the simulation held released at once
	// Memory is the simulated policy's memory figures, as report gives a recording's (report.Figures).
	Memory        report.MemFigures `json:"memory"`
	RecordedFreed uint64            `json:"recorded_released_bytes_peak"` // the same for the recording
	// ReleasedByArg is the bytes the simulation released by what the storage was to the layers that saved
	// it: the argument it was passed as ("rotary_cos_sin[0]", "args[0]"), else "internal".
	ReleasedByArg  map[string]uint64 `json:"released_bytes_by_argument"`
	Violations     []*Violation      `json:"violations"`
	EngineErrors   int               `json:"engine_errors"`
	FirstEngineErr string            `json:"first_engine_error,omitempty"`
	Skipped        int               `json:"skipped_unpacks"` // unpacks of handles the recorded save never got
	Notes          []string          `json:"notes,omitempty"`
	Stats          *trace.Stats      `json:"stats,omitempty"`
}

type tensorRec struct {
	addr, extent uint64
}

// relStorage is a storage the simulation holds released.
type relStorage struct {
	base, size uint64
	v          *Violation // nil for internal storages
}

// simOps are the simulation's mover and storage ops: no bytes move, every byte is counted. Release
// marks the storage gone; Restore gives it back at the base it was saved with.
type simOps struct {
	out, in  uint64
	nextHost uint64
	released uint64 // bytes the simulation holds released now
	saved    map[int64]uint64
	// blocks is the pool the simulation releases into and restores from; block the pool block of each
	// handle's storage (pool.Blocks.At its base when it was saved or released).
	blocks *pool.Blocks
	block  map[int64]int64
}

func (s *simOps) AllocHost(n uint64) (offload.HostBuf, error) {
	s.nextHost += (n + 4095) &^ 4095
	return offload.HostBuf{Addr: s.nextHost, Size: n}, nil
}
func (s *simOps) FreeHost(offload.HostBuf) error { return nil }
func (s *simOps) CopyOut(_, _, n uint64) (offload.Copy, error) {
	s.out += n
	return 0, nil
}
func (s *simOps) CopyIn(_, _, n uint64) (offload.Copy, error) {
	s.in += n
	return 0, nil
}
func (s *simOps) Wait(offload.Copy) error             { return nil }
func (s *simOps) After([]uint64) error                { return nil }
func (s *simOps) Before(offload.Copy, []uint64) error { return nil }
func (s *simOps) Release(handle int64, base, nbytes uint64) error {
	s.released += nbytes
	if id := s.blocks.At(base); id != 0 {
		s.block[handle] = id
	}
	s.blocks.Release(s.block[handle])
	return nil
}
func (s *simOps) Restore(handle int64, nbytes uint64) (uint64, error) {
	base, ok := s.saved[handle]
	if !ok || base == 0 {
		return 0, fmt.Errorf("simulation: no saved base for handle %d", handle)
	}
	s.released -= min(nbytes, s.released)
	s.blocks.Restore(s.block[handle])
	return base, nil
}

// sim is one simulation's state.
type sim struct {
	res       *Result
	eng       *offload.Engine
	ops       *simOps
	rec       *timeline.Timeline // the recorded side, folded up to the event being replayed
	handles   map[int64]int64    // recorded handle -> simulated handle
	swap      func(string) bool  // Options.Swap
	unswapped map[int64]bool     // recorded handles of the groups left out (Options.Swap)
	// guardTok maps a recorded guard release's token to the simulated one, for its restore.
	guardTok map[int64]int64
	guarded  map[string]bool // groups the recording declared moved by their framework
	// releasedAtPeak: the simulation's bytes released when its peak was reached (the saving's bound).
	releasedAtPeak uint64
	// poolPeak: the pool model's peak so far (ops.blocks), and the bytes released when it rose to it.
	poolPeak, poolReleasedAtPeak uint64
	// The saved storages' footprint (timeline.Saved) less what the simulation and the recording released:
	// the peaks where the trace records no device allocation.
	saved struct{ sim, rec, releasedAtSim uint64 }

	// Tensors created per thread since that thread's previous launch.
	tensors  map[uint32][]tensorRec
	lastTID  uint32
	lastList []tensorRec
	haveLast bool

	// Simulated releases.
	rel     []relStorage             // held released now (few at a time)
	viols   map[[2]uint64]*Violation // open violations by (base, size): one framework storage
	all     []*Violation
	pending []offload.Event
	during  *trace.Event // the ABI event being replayed (its text is built only when needed)
	evIndex int
	evTS    int64
}

// Simulate replays events (one trace, in file order) through a fresh engine under opts.
func Simulate(h trace.Header, events []trace.Event, opts Options) *Result {
	meta := timeline.ScanMeta(events)
	if opts.Schedule == nil {
		opts.Schedule = pool.ScheduleOf(meta, events)
	}
	s := newSim(h, meta, opts)
	for i := range events {
		s.step(i, &events[i])
	}
	s.finish()
	s.res.Events = len(events)
	return s.res
}

// SimulateFile is Simulate on the trace at path, read twice as it is folded instead of kept (trace.Scan): once
// for the recording's settings and its pool.Schedule (and once more to check it), once for the simulation, so the memory it needs does not grow with the
// trace's length. It returns the trace as read (what was lost, its warnings) with the result; an error is
// the reader's one line.
func SimulateFile(path string, opts Options) (*Result, *trace.File, error) {
	recorded := trace.Meta{}
	blocks := pool.NewBlocks(nil, nil)
	f, err := trace.Scan(path, func(ev *trace.Event) {
		if ev.Kind == trace.KindMeta {
			recorded.Parse(ev.Text)
		}
		blocks.Add(ev)
	})
	if err != nil {
		return nil, nil, err
	}
	if opts.Schedule == nil {
		opts.Schedule = blocks.Schedule()
		check := pool.NewCheck(recorded, opts.Schedule)
		if _, err := trace.Scan(path, check.Add); err != nil {
			return nil, nil, err
		}
		opts.Schedule.Check(check)
	}
	s, n := newSim(f.Header, recorded, opts), 0
	f, err = trace.Scan(path, func(ev *trace.Event) {
		s.step(n, ev)
		n++
	})
	if err != nil {
		return nil, nil, err
	}
	s.finish()
	s.res.Events = n
	return s.res, f, nil
}

// newSim is a simulation of a trace with header h, recorded under the settings recorded, ready for its events
// (step, in order, then finish).
func newSim(h trace.Header, recorded trace.Meta, opts Options) *sim {
	cfg := offload.DefaultConfig()
	cfg.Policy = opts.Policy
	if v, ok := recorded.Prefetch(); ok {
		cfg.Prefetch = v
	}
	if v, ok := recorded.MinBytes(); ok {
		cfg.MinBytes = v
	}
	if opts.PrefetchSet {
		cfg.Prefetch = opts.Prefetch
	}
	if opts.MinBytesSet {
		cfg.MinBytes = opts.MinBytes
	}
	s := &sim{
		res: &Result{Argv: h.Argv, PID: h.PID, Policy: cfg.Policy.String(), Prefetch: cfg.Prefetch,
			MinBytes: cfg.MinBytes, RecordedPolicy: recorded["policy"],
			ReleasedByArg: map[string]uint64{}},
		ops: &simOps{saved: map[int64]uint64{}, nextHost: 1 << 44, blocks: pool.NewBlocks(recorded, opts.Schedule),
			block: map[int64]int64{}},
		rec: timeline.New(h, timeline.Options{NoSeries: true, Retire: func(*timeline.Handle) {},
			PoolSchedule: opts.Schedule, NoPool: opts.NoSwapKnown}),
		handles: map[int64]int64{}, guardTok: map[int64]int64{}, guarded: map[string]bool{},
		swap: opts.Swap, unswapped: map[int64]bool{},
		tensors: map[uint32][]tensorRec{},
		viols:   map[[2]uint64]*Violation{},
	}
	s.eng = offload.NewEngine(cfg, s.ops, s.ops, offload.ObserverFunc(func(ev offload.Event) {
		if ev.Kind == offload.EvRelease || ev.Kind == offload.EvRestore {
			s.pending = append(s.pending, ev)
		}
	}))
	return s
}

func (s *sim) step(i int, ev *trace.Event) {
	// The block a recorded free ends, asked before the recorded side forgets it.
	var freed uint64
	var wasLive bool
	if ev.Kind == trace.KindCall && ev.Ret == 0 && s.rec.Class(ev.Fn) == trace.ClassDeviceFree {
		freed, wasLive = s.rec.Foot.Held.Size(ev.Args[0])
	}
	s.rec.Add(ev)
	s.ops.blocks.Add(ev)
	s.poolRose()
	switch ev.Kind {
	case trace.KindCall:
		s.res.RuntimeCalls++
		switch s.rec.Class(ev.Fn) {
		case trace.ClassTensor:
			if !s.haveLast || s.lastTID != ev.TID {
				s.switchThread(ev.TID)
			}
			s.lastList = append(s.lastList, tensorRec{addr: ev.Args[1], extent: ev.Args[2]})
		case trace.ClassLaunch:
			if !s.haveLast || s.lastTID != ev.TID {
				s.switchThread(ev.TID)
			}
			if len(s.rel) > 0 {
				s.checkLaunch(i, ev)
			}
			s.lastList = s.lastList[:0]
		case trace.ClassDeviceAlloc:
			if ev.Ret == 0 && ev.Args[0] != 0 {
				s.eng.Tracker().Alloc(ev.Args[0], ev.Args[1])
				s.peak()
			}
		case trace.ClassDeviceFree:
			if wasLive {
				s.eng.Tracker().Free(ev.Args[0])
				for k := range s.viols { // a storage there later is another storage
					if k[0] >= ev.Args[0] && k[0]-ev.Args[0] < freed {
						delete(s.viols, k)
					}
				}
			}
		}
	case trace.KindLost:
		s.res.Notes = append(s.res.Notes, fmt.Sprintf("the recording lost %d runtime events (ring full)", ev.Args[0]))
	case trace.KindClassify:
		if ev.Args[4] != 0 && s.swapped(ev) { // the evidence SWAPAGENT_CALL_HOLDERS gave: the simulated policy decides on it again
			s.evIndex, s.evTS, s.during = i, ev.TS, ev
			s.engineErr(s.eng.Holders(s.group(ev), []uint64{ev.Args[0]}, []int64{trace.Holders(ev.Args[4])}))
			s.drainEngine()
		}
	case trace.KindRegionEnter, trace.KindSave, trace.KindRegionExit, trace.KindProtect,
		trace.KindBackwardEnter, trace.KindUnpack, trace.KindBackwardExit, trace.KindDescribe,
		trace.KindGuarded, trace.KindGuard, trace.KindGuardRestore:
		if s.swapped(ev) {
			s.res.ABICalls++
			s.evIndex, s.evTS, s.during = i, ev.TS, ev
			s.abi(ev)
			s.drainEngine()
		}
		s.savedPeak()
	}
}

// savedPeak evaluates the saved storages' footprint after an ABI event: the storages saved and not yet
// given up, less what the simulation (and, for the recorded figure, the recording) holds released.
func (s *sim) savedPeak() {
	live := s.rec.Saved.LiveBytes
	if n := live - min(s.ops.released, live); n > s.saved.sim {
		s.saved.sim, s.saved.releasedAtSim = n, s.ops.released
	}
	s.saved.rec = max(s.saved.rec, live-min(s.rec.Foot.Released, live))
}

// swapped says whether ev is a call of a group the simulation swaps (Options.Swap), and remembers the handles
// of a left-out group's saves, so that their unpacks are left out too.
func (s *sim) swapped(ev *trace.Event) bool {
	if s.swap == nil {
		return true
	}
	if ev.Kind == trace.KindUnpack {
		return !s.unswapped[ev.Handle]
	}
	if ev.Kind == trace.KindGuardRestore || s.swap(s.group(ev)) {
		return true
	}
	if ev.Kind == trace.KindSave && ev.Handle != 0 {
		s.unswapped[ev.Handle] = true
	}
	return false
}

func (s *sim) switchThread(tid uint32) {
	if s.haveLast {
		s.tensors[s.lastTID] = s.lastList
	}
	s.lastTID, s.lastList, s.haveLast = tid, s.tensors[tid], true
}

func (s *sim) group(ev *trace.Event) string { return s.rec.GroupName(ev.Group) }

func (s *sim) engineErr(err error) {
	if err == nil {
		return
	}
	s.res.EngineErrors++
	if s.res.FirstEngineErr == "" {
		s.res.FirstEngineErr = fmt.Sprintf("event %d: %s: %v", s.evIndex, s.describe(s.during), err)
	}
}

// describe names an ABI event as a call: "region_exit(layer.1)", "unpack(42)".
func (s *sim) describe(ev *trace.Event) string {
	if ev == nil {
		return "?"
	}
	if ev.Kind == trace.KindUnpack {
		return fmt.Sprintf("unpack(%d)", ev.Handle)
	}
	return ev.Kind.String() + "(" + s.group(ev) + ")"
}

func (s *sim) abi(ev *trace.Event) {
	switch ev.Kind {
	case trace.KindRegionEnter:
		g := s.group(ev)
		npos := int(min(ev.Args[0], uint64(len(ev.Ptrs))))
		err := s.eng.RegionEnter(g, ev.Ptrs, npos)
		s.engineErr(err)
		if err == nil && ev.Text != "" { // the companion's names make the owners name the argument
			s.engineErr(s.eng.Tracker().Describe(g, ev.Ptrs, trace.SplitTensors(ev.Text, len(ev.Ptrs))))
		}
	case trace.KindDescribe:
		if ev.Ret == 0 {
			s.engineErr(s.eng.Tracker().Describe(s.group(ev), ev.Ptrs, trace.SplitTensors(ev.Text, len(ev.Ptrs))))
		}
	case trace.KindSave:
		g := s.group(ev)
		h, err := s.eng.Save(g, ev.Args[0], ev.Args[1], uint32(ev.Args[2]))
		s.engineErr(err)
		if err == nil {
			s.ops.saved[h] = ev.Args[0]
			s.ops.block[h] = s.ops.blocks.At(ev.Args[0])
			if ev.Handle != 0 {
				s.handles[ev.Handle] = h
			}
		}
	case trace.KindRegionExit:
		g := s.group(ev)
		s.engineErr(s.eng.RegionExit(g, ev.Ptrs))
	case trace.KindProtect:
		g := s.group(ev)
		s.engineErr(s.eng.Protect(g, ev.Ptrs))
	case trace.KindBackwardEnter:
		g := s.group(ev)
		s.engineErr(s.eng.BackwardEnter(g))
	case trace.KindUnpack:
		h, ok := s.handles[ev.Handle]
		if !ok {
			s.res.Skipped++
			return
		}
		s.guardRestoreBefore(h)
		_, err := s.eng.Unpack(h)
		s.engineErr(err)
	case trace.KindBackwardExit:
		g := s.group(ev)
		s.engineErr(s.eng.BackwardExit(g))
	case trace.KindGuarded:
		if ev.Ret == 0 {
			s.engineErr(s.eng.Guard(s.group(ev)))
			s.guarded[s.group(ev)] = true
		}
	case trace.KindGuard:
		// The job's own swap asked: the simulated policy answers (any live group's verdict, as the guard asks).
		held, own := timeline.GuardHolders(ev)
		d, err := s.eng.GuardRelease("", ev.Args[0], ev.Args[1], tracker.Outside(held, own))
		s.engineErr(err)
		if err == nil && d.Allow && d.Known {
			s.ops.released += d.Size
			s.ops.block[d.Handle] = s.ops.blocks.At(ev.Args[0])
			s.ops.blocks.Release(s.ops.block[d.Handle])
			s.noteRelease(d.Handle, d.Size)
			if ev.Handle != 0 && ev.Args[2] == trace.ReleaseAllow {
				s.guardTok[ev.Handle] = d.Handle
			}
		}
	case trace.KindGuardRestore:
		tok, ok := s.guardTok[ev.Handle]
		if !ok || ev.Ret != 0 {
			return // the simulated policy kept what the recording released, or the restore was refused
		}
		delete(s.guardTok, ev.Handle)
		if _, err := s.eng.GuardRestore(tok, ev.Args[0], ev.Args[1]); err == nil {
			s.ops.released -= min(ev.Args[1], s.ops.released)
			s.ops.blocks.Restore(s.ops.block[tok])
		} else {
			s.engineErr(err)
		}
	}
}

// guardRestoreBefore gives back, before its unpack, a storage of a guarded group that the simulated policy
// released and the recording never did (so the trace has no restore of it): the job's own swap restores
// what it released before the layer's backward reads it.
func (s *sim) guardRestoreBefore(h int64) {
	info, err := s.eng.Info(h)
	if err != nil || !s.guarded[info.Group] || info.State != offload.Host {
		return
	}
	if _, err := s.eng.GuardRestore(h, info.Storage.Addr, info.Storage.Size); err == nil {
		s.ops.released -= min(info.Storage.Size, s.ops.released)
		s.ops.blocks.Restore(s.ops.block[h])
	}
}

// noteRelease counts a release of handle h's storage by the argument the storage was passed as.
func (s *sim) noteRelease(h int64, size uint64) {
	arg := "internal"
	if info, err := s.eng.Info(h); err == nil {
		for _, in := range info.Storage.Inputs {
			if in.Arg != "" {
				arg = in.Arg
				break
			}
		}
	}
	s.res.ReleasedByArg[arg] += size
}

// drainEngine applies the releases and restores the last engine call made.
func (s *sim) drainEngine() {
	for _, ev := range s.pending {
		switch ev.Kind {
		case offload.EvRelease:
			s.res.Released++
			s.noteRelease(ev.Handle, ev.Size)
			r := relStorage{base: ev.Base, size: ev.Size}
			if info, err := s.eng.Info(ev.Handle); err == nil && info.Truth != tracker.Internal {
				// The simulation's release makes the tracker see the next save at that address as a new
				// storage (a new generation), while the recording kept using one framework storage there:
				// one violation per (base, size) until the runtime frees that memory.
				key := [2]uint64{ev.Base, ev.Size}
				v := s.viols[key]
				if v == nil {
					v = &Violation{Storage: info.Storage.Name(), Base: ev.Base, Size: ev.Size, ReleasedBy: ev.Group,
						During: s.describe(s.during), Reason: info.Truth.String(), ReleaseEv: s.evIndex, ReleaseTS: s.evTS}
					s.viols[key] = v
					s.all = append(s.all, v)
				}
				v.Releases++
				v.storageIDs = append(v.storageIDs, ev.Storage)
				v.inputs = append(v.inputs, info.Storage.Inputs...)
				r.v = v
			}
			s.rel = append(s.rel, r)
		case offload.EvRestore:
			s.res.Restored++
			for k := range s.rel {
				if s.rel[k].base == ev.Base && s.rel[k].size == ev.Size {
					s.rel = append(s.rel[:k], s.rel[k+1:]...)
					break
				}
			}
		}
	}
	s.pending = s.pending[:0]
}

// checkLaunch matches the launch's tensors against the external storages the simulation holds released.
func (s *sim) checkLaunch(i int, ev *trace.Event) {
	list := s.lastList
	if n := ev.Args[4]; n < uint64(len(list)) {
		list = list[uint64(len(list))-n:]
	}
	for ti, t := range list {
		for _, r := range s.rel {
			if r.v == nil {
				continue
			}
			match := ""
			switch {
			case t.addr == 0 && t.extent == r.size:
				match = "null-extent"
			case t.addr >= r.base && t.addr-r.base < r.size && !s.rec.ReleasedAt(r.base):
				match = "address"
			}
			if match == "" {
				continue
			}
			r.v.Reads++
			if r.v.FirstRead == nil {
				r.v.FirstRead = &Read{Kernel: s.rec.FuncName(ev.Fn), TensorIndex: ti, Tensors: len(list), Addr: t.addr,
					Extent: t.extent, Match: match, Event: i, TS: ev.TS, TID: ev.TID, ReleasedNow: t.addr == 0}
			}
		}
	}
}

// poolRose notes the bytes released when the pool model's peak rose (the saving's lower bound).
func (s *sim) poolRose() {
	if m := s.ops.blocks.M; m != nil && m.HeldPeak() > s.poolPeak {
		s.poolPeak, s.poolReleasedAtPeak = m.HeldPeak(), s.ops.released
	}
}

// peak evaluates the device-memory estimate of a trace the pool model cannot follow (no tensor recorded:
// level memory) at an allocation: device memory only grows there, and a caching pool only allocates when
// it is full, so that is where the bytes in use are known (docs/replay.md).
func (s *sim) peak() {
	foot := &s.rec.Foot
	s.res.PeakRecorded = foot.Held.PeakBytes
	noSwap := foot.Held.LiveBytes + foot.Released
	if sim := noSwap - min(s.ops.released, noSwap); sim > s.res.PeakSimulated {
		s.res.PeakSimulated, s.releasedAtPeak = sim, s.ops.released
	}
}

func (s *sim) finish() {
	r := s.res
	c, partial := s.rec.Coverage()
	if c != "" {
		r.Notes = append(r.Notes, c)
	}
	r.BytesOut, r.BytesIn = s.ops.out, s.ops.in
	r.RecordedFreed = s.rec.Foot.PeakReleased
	r.NoSwapActivity = r.ABICalls == 0
	// The no-swap peak can come after the last allocation (docs/cli.md): read it from the whole recording.
	noSwap, _ := s.rec.Foot.NoSwapPeak()
	r.PeakNoSwap = max(noSwap, s.rec.Foot.Held.PeakBytes)
	r.PoolStep = s.rec.Foot.MinAlloc
	if s.ops.blocks.Active() { // the pool model followed the recording's blocks: its peak, not the estimate
		r.PeakSimulated, s.releasedAtPeak = s.poolPeak, s.poolReleasedAtPeak
		if s.rec.Foot.Pool != nil {
			r.PeakNoSwap = noSwap
		}
	}
	r.Footprint = "device"
	if r.PeakRecorded == 0 && s.rec.Saved.PeakBytes > 0 { // no device allocation: the saved storages
		r.Footprint, r.PeakRecorded, r.PeakNoSwap, r.PeakSimulated = "saved", s.saved.rec, s.rec.Saved.PeakBytes, s.saved.sim
		s.releasedAtPeak, r.PoolStep = s.saved.releasedAtSim, 0
		r.Notes = append(r.Notes, "no device allocation recorded: the peaks are the bytes of the storages saved for backward")
	}
	r.SavedVsRecord = int64(r.PeakRecorded) - int64(r.PeakSimulated)
	r.SavedVsNoSwap = int64(r.PeakNoSwap) - int64(r.PeakSimulated)
	r.SavedAtLeast = min(int64(timeline.SavedAtLeast(s.releasedAtPeak, r.PoolStep)), max(r.SavedVsNoSwap, 0))
	s.eng.SetPeakDeviceBytes(r.PeakSimulated)
	st := s.eng.Stats()
	r.Stats = &st
	r.ReleasedPeak = st.SavedBytesPeak
	r.Memory = report.Figures(r.PeakSimulated, r.PeakNoSwap, r.ReleasedPeak, r.PoolStep, s.releasedAtPeak)
	if partial {
		r.Memory.Withhold(report.PartialRun)
	}
	for _, v := range s.all {
		// The owner grows as later groups receive the storage: report what the whole trace says.
		for _, id := range v.storageIDs {
			if si, ok := s.eng.Tracker().Storage(id); ok {
				v.inputs = append(v.inputs, si.Inputs...)
			}
		}
		v.Owner = ownerText(v.inputs)
		r.Violations = append(r.Violations, v)
	}
	// Most important first: storages a later launch read (the run faults there), earliest read first;
	// then released-but-unread ones in release order.
	sort.Slice(r.Violations, func(a, b int) bool {
		va, vb := r.Violations[a], r.Violations[b]
		if (va.FirstRead != nil) != (vb.FirstRead != nil) {
			return va.FirstRead != nil
		}
		if va.FirstRead != nil && va.FirstRead.Event != vb.FirstRead.Event {
			return va.FirstRead.Event < vb.FirstRead.Event
		}
		if va.ReleaseEv != vb.ReleaseEv {
			return va.ReleaseEv < vb.ReleaseEv
		}
		return va.Base < vb.Base
	})
	if r.Violations == nil {
		r.Violations = []*Violation{}
	}
}

// ownerText names the groups a storage was an input of, as the tracker does for one storage
// ("keyword input of layer.0..layer.10"), over every generation a violation merged.
func ownerText(inputs []tracker.InputUse) string {
	return tracker.StorageInfo{Inputs: inputs}.Owner()
}
