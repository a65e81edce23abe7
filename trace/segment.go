// segment.go owns segmented traces, the flight recorder of a long job: a process's trace is a sequence of
// segment files, each a whole trace that reads on its own, and the writer keeps the newest segments within
// a byte limit and deletes the oldest. Every segment after the first opens with a snapshot: the past events
// that still describe the present (live allocations, tensors, executors, streams and events, each group's
// current region, function and group names, the metadata, the latest stats and every fault), so a reader
// that has lost the segments before it still sees the state they left. A reader of several segments takes
// the first one's snapshot and skips the others', which repeat what it already read.
package trace

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// DefaultLimit is the bytes of trace one process keeps when SWAPAGENT_TRACE_LIMIT is unset: 1 GiB.
const DefaultLimit = 1 << 30

// MinLimit is the smallest limit that keeps anything whole: one segment of the smallest size.
const MinLimit = minSegment

// Segment sizes: a limit is split into segmentsPerLimit segments, within these bounds.
const (
	segmentsPerLimit = 8
	minSegment       = 16 << 10
	maxSegment       = 64 << 20
	maxSnapFaults    = 4096 // faults carried into every segment; the stats count all of them
	maxSnapLogs      = 64   // the newest log lines carried
)

// segmentSep joins a trace's base name and a segment index: <base>+<k>.swtrace. Neither a host name nor a
// pid contains it.
const segmentSep = "+"

// SegmentPath is the path of segment k of the trace whose first segment is first (<dir>/<base>.swtrace):
// first itself for 0, <dir>/<base>+<k>.swtrace after it.
func SegmentPath(first string, k int) string {
	if k == 0 {
		return first
	}
	return strings.TrimSuffix(first, FileSuffix) + segmentSep + strconv.Itoa(k) + FileSuffix
}

// splitSegment returns the first segment's path of the trace path belongs to and path's index; a path that
// is not a segment name is its own first segment.
func splitSegment(path string) (first string, k int) {
	base := strings.TrimSuffix(path, FileSuffix)
	if base == path {
		return path, 0
	}
	i := strings.LastIndex(base, segmentSep)
	if i < 0 || strings.ContainsRune(base[i:], filepath.Separator) {
		return path, 0
	}
	n, err := strconv.Atoi(base[i+1:])
	if err != nil || n <= 0 || strconv.Itoa(n) != base[i+1:] {
		return path, 0
	}
	return base[:i] + FileSuffix, n
}

// FirstSegment is the path of the first segment of the trace whose segment path is (path itself when it
// is a first segment, or no segment name at all): <dir>/<base>+<k>.swtrace gives <dir>/<base>.swtrace.
func FirstSegment(path string) string {
	first, _ := splitSegment(path)
	return first
}

// segmentsOf lists the segment files of the trace path belongs to that exist beside it, by index.
func segmentsOf(path string) []string {
	first, _ := splitSegment(path)
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return []string{path}
	}
	type seg struct {
		k    int
		path string
	}
	var segs []seg
	for _, e := range entries {
		p := filepath.Join(filepath.Dir(path), e.Name())
		if f, k := splitSegment(p); !e.IsDir() && f == filepath.Join(filepath.Dir(path), filepath.Base(first)) {
			segs = append(segs, seg{k, p})
		}
	}
	if len(segs) == 0 {
		return []string{path}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].k < segs[j].k })
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = s.path
	}
	return out
}

// SegmentFiles are what a SegmentedWriter needs of the file system: it never opens files itself, so the
// agent keeps its own rules for them (no links followed, mode 0600).
type SegmentFiles interface {
	// Create makes segment k (k >= 1) of the trace.
	Create(k int) (io.WriteCloser, error)
	// Remove deletes segment k.
	Remove(k int) error
}

// SegmentedWriter writes a trace as segments, keeping at most limit bytes of closed segments (plus the one
// being written). Like Writer it is not safe for concurrent use.
type SegmentedWriter struct {
	files    SegmentFiles
	h        Header
	limit    int64
	segBytes int64
	cur      *Writer
	out      io.WriteCloser
	k        int     // the current segment's index
	closed   []int64 // sizes of the closed segments still on disk, oldest first
	oldest   int     // index of the oldest segment still on disk
	snap     snapshot
	events   uint64 // events added, over every segment
	done     uint64 // bytes of the segments closed so far (dropped ones included)
	err      error
}

// NewSegmentedWriter starts segment 0 on out (the file the caller created) and writes segments after it
// through files once one holds limit/8 bytes (at least 16 KiB, at most 64 MiB). A limit <= 0 means no
// limit: one segment, as NewWriter writes.
func NewSegmentedWriter(out io.WriteCloser, h Header, limit int64, files SegmentFiles) (*SegmentedWriter, error) {
	h.Segment = 0
	w, err := NewWriter(out, h)
	if err != nil {
		return nil, err
	}
	s := &SegmentedWriter{files: files, h: h, limit: limit, cur: w, out: out}
	if limit > 0 {
		s.segBytes = min(max(limit/segmentsPerLimit, minSegment), maxSegment)
	}
	return s, nil
}

// Add adds ev to the current segment and to the snapshot the next segment opens with.
func (s *SegmentedWriter) Add(ev *Event) error {
	if s.err != nil {
		return s.err
	}
	if err := s.cur.Add(ev); err != nil {
		return err
	}
	s.events++
	if s.segBytes > 0 {
		s.snap.add(ev)
	}
	return nil
}

// Flush ends the current batch; once the segment is full it then closes it, opens the next with its
// snapshot and deletes the oldest segments beyond the limit. A failure to open the next segment stops the
// trace (the error sticks); everything written before it stays readable.
func (s *SegmentedWriter) Flush() error {
	if s.err != nil {
		return s.err
	}
	err := s.cur.Flush()
	if err != nil {
		s.err = err
		return err
	}
	if s.segBytes == 0 || int64(s.cur.Bytes()) < s.segBytes {
		return nil
	}
	if err := s.rotate(); err != nil {
		s.err = fmt.Errorf("trace: next segment: %w", err)
		return s.err
	}
	return nil
}

func (s *SegmentedWriter) rotate() error {
	err := s.cur.closeGoingOn()
	size := int64(s.cur.Bytes())
	if cerr := s.out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	s.closed = append(s.closed, size)
	// Make room first: the closed segments before this one go while they and it exceed the limit, so the
	// closed segments on disk never hold more than the limit, or than the newest of them when it alone does.
	s.trim(1)
	out, err := s.files.Create(s.k + 1)
	if err != nil {
		return err
	}
	s.k++
	snap := s.snap.events()
	h := s.h
	h.Segment, h.First, h.Lead = s.k, s.events, 1+len(snap)
	w, err := NewWriter(out, h)
	if err != nil {
		_ = out.Close()
		return err
	}
	s.done += uint64(size) // the closed segment's bytes, now that cur is the next one
	s.cur, s.out = w, out
	mark := Event{Kind: KindSegment, TS: s.snap.lastTS, Args: [6]uint64{uint64(s.k), uint64(len(snap))}}
	for _, ev := range append([]*Event{&mark}, snap...) {
		if err := w.Add(ev); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	// Now that the next segment holds its snapshot, the one just closed goes too when it alone exceeds the
	// limit; the one being written comes on top of the limit.
	s.trim(0)
	return nil
}

// trim deletes the oldest closed segments while those on disk hold more than the limit, keeping the newest
// keep of them whatever their size.
func (s *SegmentedWriter) trim(keep int) {
	var kept int64
	for _, n := range s.closed {
		kept += n
	}
	for kept > s.limit && len(s.closed) > keep && s.files.Remove(s.oldest) == nil {
		// (A file we cannot delete stays, and so do the newer ones: the trace goes on.)
		kept -= s.closed[0]
		s.closed = s.closed[1:]
		s.oldest++
	}
}

// Close closes the current segment (not its file, as Writer.Close does not).
func (s *SegmentedWriter) Close() error {
	err := s.cur.Close()
	if s.err != nil && err == nil {
		err = s.err
	}
	return err
}

// Current is the file of the segment being written (to close it after Close).
func (s *SegmentedWriter) Current() io.WriteCloser { return s.out }

// Events returns the events added so far, over every segment.
func (s *SegmentedWriter) Events() uint64 { return s.events }

// Bytes returns the bytes written so far, over every segment, the dropped ones included.
func (s *SegmentedWriter) Bytes() uint64 { return s.done + s.cur.Bytes() }

// Segments returns the index of the current segment and of the oldest still kept.
func (s *SegmentedWriter) Segments() (current, oldest int) { return s.k, s.oldest }

// snapshot keeps the past events that still describe the present, each with its place in the trace.
type snapshot struct {
	seq     uint64
	lastTS  int64
	acts    []action        // by function id, from the KindFunc records
	names   map[uint64]kept // KindFunc (by Fn) and KindGroup (by 1<<32 | Group)
	metas   []kept
	stats   *kept
	faults  []kept
	logs    []kept
	lost    []kept
	guarded map[uint32]kept
	live    map[liveKey]keptCall // allocations, streams, events, physical memory, address ranges
	// tensors are the live tensors in creation order. An op destroys its tensors right after its launch, so
	// the one destroyed is nearly always among the last few: a slice searched from its end costs a few
	// compares, where a map cost a hash insert and delete for half the events of a trace.
	tensors []keptCall
	execs   map[uint64]execRec // executors not yet used up by a launch or destroyed
	repeat  map[uint64]bool    // executors made repeatable: a launch does not use them up
	groups  regions            // each group's current region: since its last KindRegionEnter
	handles groupOf            // handle -> group, for the records that carry only a handle
}

// regions holds each group's current region by group ID. The agent numbers groups from 1 up, so a slice
// indexed by ID finds one without hashing (every swap-ABI record looks its group up); an ID beyond it
// (another writer's numbering) goes to a map.
type regions struct {
	small [][]kept
	big   map[uint32]*[]kept
}

const maxSmallGroup = 1 << 12

// of returns group id's region, made empty when it has none yet.
func (r *regions) of(id uint32) *[]kept {
	if id < maxSmallGroup {
		for uint32(len(r.small)) <= id {
			r.small = append(r.small, make([][]kept, len(r.small)+16)...)
		}
		return &r.small[id]
	}
	ks := r.big[id]
	if ks == nil {
		if r.big == nil {
			r.big = map[uint32]*[]kept{}
		}
		ks = new([]kept)
		r.big[id] = ks
	}
	return ks
}

// each calls fn with every group's region.
func (r *regions) each(fn func([]kept)) {
	for _, ks := range r.small {
		fn(ks)
	}
	for _, ks := range r.big {
		fn(*ks)
	}
}

type kept struct {
	seq uint64
	ev  Event
}

// groupOf maps handles to groups. The agent numbers handles from 1 up, so a slice indexed by handle does
// it without hashing; a handle beyond it (another writer's numbering) goes to a map.
type groupOf struct {
	small []uint32
	big   map[int64]uint32
}

const maxSmallHandle = 1 << 22

func (m *groupOf) get(h int64) uint32 {
	if h >= 0 && h < int64(len(m.small)) {
		return m.small[h]
	}
	return m.big[h]
}

func (m *groupOf) set(h int64, g uint32) {
	switch {
	case h >= 0 && h < maxSmallHandle:
		for int64(len(m.small)) <= h {
			m.small = append(m.small, make([]uint32, len(m.small)+64)...)
		}
		m.small[h] = g
	case g == 0:
		delete(m.big, h)
	default:
		m.big[h] = g
	}
}

// keptCall is a kept KindCall without the fields a call never uses: no pointers, so the live set, which
// changes with every tensor an op creates, costs the garbage collector nothing to scan.
type keptCall struct {
	seq  uint64
	ts   int64
	ret  int64
	args [6]uint64
	tid  uint32
	fn   uint16
}

// execRec is an executor's creation (its GetWorkspaceSize) and the calls that changed it since.
type execRec struct {
	made    keptCall
	changed []keptCall
}

func (s *snapshot) keepCall(ev *Event) keptCall {
	return keptCall{seq: s.seq, ts: ev.TS, ret: ev.Ret, args: ev.Args, tid: ev.TID, fn: ev.Fn}
}

func (k *keptCall) kept() kept {
	return kept{seq: k.seq, ev: Event{Kind: KindCall, TS: k.ts, TID: k.tid, Fn: k.fn, Ret: k.ret, Args: k.args}}
}

// liveKey names a live object: what it is and its handle or address.
type liveKey struct {
	what uint8
	id   uint64
}

// What a liveKey names.
const (
	liveDevice uint8 = iota + 1
	liveHost
	liveReserve
	livePhysical
	liveTensor
	liveStream
	liveEvent
)

// Function roles the snapshot needs beyond their Class.
const (
	roleNone uint8 = iota + 1
	roleWorkspace
	roleRepeatable
	roleExecDestroy
	roleSetAddr
	rolePhysAlloc
	rolePhysFree
	roleTensorDestroy
	roleStreamCreate
	roleEventCreate
	roleEventDestroy
	roleLaunch
)

func roleOf(name string) uint8 {
	if strings.HasPrefix(name, "aclnn") && strings.HasSuffix(name, "GetWorkspaceSize") {
		return roleWorkspace
	}
	switch name {
	case "aclSetAclOpExecutorRepeatable":
		return roleRepeatable
	case "aclDestroyAclOpExecutor":
		return roleExecDestroy
	case "aclSetTensorAddr", "aclSetDynamicTensorAddr":
		return roleSetAddr
	case "aclrtMallocPhysical":
		return rolePhysAlloc
	case "aclrtFreePhysical":
		return rolePhysFree
	case "aclDestroyTensor":
		return roleTensorDestroy
	case "aclrtCreateStream", "aclrtCreateStreamWithConfig":
		return roleStreamCreate
	case "aclrtCreateEvent", "aclrtCreateEventWithFlag", "aclrtCreateEventExWithFlag":
		return roleEventCreate
	case "aclrtDestroyEvent":
		return roleEventDestroy
	}
	return roleNone
}

func (s *snapshot) keep(ev *Event) kept {
	k := kept{seq: s.seq, ev: *ev}
	k.ev.Ptrs = slices.Clone(ev.Ptrs)
	return k
}

// add takes ev into the snapshot when it describes the present, and drops what it ends.
func (s *snapshot) add(ev *Event) {
	s.seq++
	s.lastTS = max(s.lastTS, ev.TS)
	if s.names == nil {
		s.names, s.guarded = map[uint64]kept{}, map[uint32]kept{}
		s.live, s.execs, s.repeat = map[liveKey]keptCall{}, map[uint64]execRec{}, map[uint64]bool{}
		s.handles = groupOf{big: map[int64]uint32{}}
	}
	switch ev.Kind {
	case KindCall:
		s.call(ev)
	case KindFunc:
		for int(ev.Fn) >= len(s.acts) {
			s.acts = append(s.acts, action{})
		}
		s.acts[ev.Fn] = actionOf(ev.Text)
		s.names[uint64(ev.Fn)] = s.keep(ev)
	case KindGroup:
		s.names[1<<32|uint64(ev.Group)] = s.keep(ev)
	case KindMeta:
		s.metas = append(s.metas, s.keep(ev))
	case KindStats:
		k := s.keep(ev)
		s.stats = &k
	case KindFault:
		if len(s.faults) < maxSnapFaults {
			s.faults = append(s.faults, s.keep(ev))
		}
	case KindLog:
		s.logs = append(s.logs, s.keep(ev))
		if len(s.logs) > maxSnapLogs {
			s.logs = s.logs[1:]
		}
	case KindLost:
		s.lost = append(s.lost, s.keep(ev))
	case KindGuarded:
		s.guarded[ev.Group] = s.keep(ev)
	case KindSegment:
		// A segment's own mark: not state.
	case KindRegionEnter:
		ks := s.groups.of(ev.Group)
		for _, k := range *ks {
			s.handles.set(k.ev.Handle, 0)
		}
		*ks = append((*ks)[:0], s.keep(ev))
	default:
		// The swap ABI's records of a region: kept with their group's current region.
		g := ev.Group
		if g == 0 {
			g = s.handles.get(ev.Handle)
		} else if ev.Handle != 0 {
			s.handles.set(ev.Handle, g)
		}
		if g != 0 {
			ks := s.groups.of(g)
			*ks = append(*ks, s.keep(ev))
		}
	}
}

// liveOp is what a call does to the live set: makes (add) or ends an object of kind what, named by
// Args[0]. A call that makes one counts only when it succeeded (Ret 0), but for aclCreateTensor, whose Ret
// is the tensor (tensors have a list of their own).
type liveOp struct {
	what uint8
	add  bool
}

// The live set's calls, by Class and by role.
var (
	classLive = [...]liveOp{
		ClassDeviceAlloc: {liveDevice, true}, ClassDeviceFree: {liveDevice, false},
		ClassHostAlloc: {liveHost, true}, ClassHostFree: {liveHost, false},
		ClassReserve: {liveReserve, true}, ClassReserveRelease: {liveReserve, false},
		ClassTensor: {liveTensor, true}, ClassStreamDestroy: {liveStream, false},
	}
	roleLive = [...]liveOp{
		rolePhysAlloc: {livePhysical, true}, rolePhysFree: {livePhysical, false},
		roleTensorDestroy: {liveTensor, false},
		roleStreamCreate:  {liveStream, true},
		roleEventCreate:   {liveEvent, true}, roleEventDestroy: {liveEvent, false},
	}
)

// action is what the calls of one function do to the snapshot, worked out once from its name: the live
// object they make or end, else their role for executors.
type action struct {
	live liveOp
	role uint8
}

func actionOf(name string) action {
	c, a := ClassOf(name), action{role: roleOf(name)}
	if int(c) < len(classLive) {
		a.live = classLive[c]
	}
	if a.live.what == 0 && int(a.role) < len(roleLive) {
		a.live = roleLive[a.role]
	}
	if c == ClassLaunch {
		a.role = roleLaunch
	}
	return a
}

func (s *snapshot) call(ev *Event) {
	if int(ev.Fn) >= len(s.acts) {
		return
	}
	act := &s.acts[ev.Fn]
	a, op := &ev.Args, act.live
	switch {
	case op.what == liveTensor && op.add:
		if a[0] != 0 {
			s.tensors = append(s.tensors, s.keepCall(ev))
		}
		return
	case op.what == liveTensor:
		for i := len(s.tensors) - 1; i >= 0; i-- {
			if s.tensors[i].args[0] == a[0] {
				s.tensors = slices.Delete(s.tensors, i, i+1)
				break
			}
		}
		return
	case op.what != 0 && op.add:
		if a[0] != 0 && ev.Ret == 0 {
			s.live[liveKey{op.what, a[0]}] = s.keepCall(ev)
		}
		return
	case op.what != 0:
		delete(s.live, liveKey{op.what, a[0]})
		return
	}
	switch role := act.role; role {
	case roleLaunch:
		if !s.repeat[a[2]] {
			delete(s.execs, a[2])
		}
	case roleWorkspace:
		if ev.Ret == 0 && a[4] != 0 {
			s.execs[a[4]] = execRec{made: s.keepCall(ev)}
		}
	case roleRepeatable, roleSetAddr:
		if x, ok := s.execs[a[0]]; ok {
			x.changed = append(x.changed, s.keepCall(ev))
			s.execs[a[0]] = x
			if role == roleRepeatable {
				s.repeat[a[0]] = true
			}
		}
	case roleExecDestroy:
		delete(s.execs, a[0])
		delete(s.repeat, a[0])
	}
}

// events returns the snapshot in trace order.
func (s *snapshot) events() []*Event {
	var all []*kept
	take := func(ks []kept) {
		for i := range ks {
			all = append(all, &ks[i])
		}
	}
	for _, k := range s.names {
		all = append(all, &k)
	}
	take(s.metas)
	if s.stats != nil {
		all = append(all, s.stats)
	}
	take(s.faults)
	take(s.logs)
	take(s.lost)
	for _, k := range s.guarded {
		all = append(all, &k)
	}
	calls := func(cs ...keptCall) {
		for i := range cs {
			k := cs[i].kept()
			all = append(all, &k)
		}
	}
	for _, c := range s.live {
		calls(c)
	}
	calls(s.tensors...)
	for _, x := range s.execs {
		calls(x.made)
		calls(x.changed...)
	}
	s.groups.each(take)
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	out := make([]*Event, len(all))
	for i, k := range all {
		out[i] = &k.ev
	}
	return out
}
