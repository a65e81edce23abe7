// traces.go owns what doctor learns from swapagent traces beside the logs: the agent's own fault
// records and, from the swap decisions the trace's timeline holds (package timeline: handles, release
// order, region inputs and outputs), which released storage a faulting address or size belongs to, who
// released it and who owned it.
package doctor

import (
	"fmt"
	"sort"

	"swapagent/timeline"
	"swapagent/trace"
	"swapagent/tracker"
)

// findTraces lists the trace files of a directory.
var findTraces = trace.FindTraces

// keepReasonName names a swapagent_keep_reason value.
func keepReasonName(r uint64) string {
	if r < uint64(len(trace.KeepReasonNames)) {
		return trace.KeepReasonNames[r]
	}
	return fmt.Sprintf("reason %d", r)
}

// StorageRef names one storage found in a trace.
type StorageRef struct {
	Base       uint64 `json:"base"`
	Nbytes     uint64 `json:"nbytes"`
	Generation uint64 `json:"generation"`
	Handle     int64  `json:"handle"`
	ReleasedBy string `json:"released_by,omitempty"` // group whose offload released it
	KeepReason string `json:"keep_reason,omitempty"` // how that group classified it
	Owner      string `json:"owner,omitempty"`       // who else held it (inputs/outputs of groups)
	Tensor     string `json:"tensor,omitempty"`      // dtype and shape, when the companion described it
	MatchedBy  string `json:"matched_by"`            // "fault event", "address" or "size"
	Others     int    `json:"others_same_size,omitempty"`
	Restored   bool   `json:"restored,omitempty"` // brought back to device later in the trace
	Trace      string `json:"trace"`
}

// traceIndex is one trace as diagnosis reads it: its timeline, and the agent's fault records that decode.
type traceIndex struct {
	*timeline.Timeline
	path     string
	faults   []trace.Fault
	badFault int      // fault events whose text is not a fault record
	warnings []string // what reading lost (trace.File.Warnings)
}

// loadTrace reads a trace by the read rule every command follows (trace.Scan), folding its events as they are
// read. Matching a fault to a storage needs the trace's history (its handles and who held what): for a log
// fault (history set) or for the agent's own fault records. Without log faults the fold first drops each
// handle once its group is done, so its memory does not grow with the trace's length, and the trace is read
// again, whole, only when it holds fault records; one without them keeps its figures, not its history.
func loadTrace(path string, history bool) (*traceIndex, error) {
	t, f, err := foldTrace(path, history)
	if err != nil {
		return nil, err
	}
	if !history && t.Count(trace.KindFault) > 0 {
		if t, f, err = foldTrace(path, true); err != nil {
			return nil, err
		}
	}
	if !history && t.Count(trace.KindFault) == 0 {
		t.Forget()
	}
	t.Gaps, t.Truncated = f.Gaps, f.Truncated
	ix := &traceIndex{Timeline: t, path: path, warnings: f.Warnings()}
	for _, f := range t.Faults {
		if f.Err != nil {
			ix.badFault++
			continue
		}
		ix.faults = append(ix.faults, f.Record)
	}
	return ix, nil
}

// foldTrace folds the trace at path as it is read; without history each handle is dropped once its group is
// done.
func foldTrace(path string, history bool) (*timeline.Timeline, *trace.File, error) {
	opt := timeline.Options{NoSeries: true}
	if !history {
		opt.Retire = func(*timeline.Handle) {}
	}
	t := timeline.New(trace.Header{}, opt)
	f, err := trace.Scan(path, t.Add)
	if err != nil {
		return nil, nil, err
	}
	t.Header = f.Header
	return t, f, nil
}

func (ix *traceIndex) ref(h *timeline.Handle, by string) *StorageRef {
	r := &StorageRef{
		Base: h.Base, Nbytes: h.Nbytes, Generation: h.Gen, Handle: h.ID,
		KeepReason: keepReasonName(h.Reason), Owner: ix.Owner(h.Base, h.Nbytes), Tensor: h.Tensor.String(),
		MatchedBy: by, Restored: h.Restored, Trace: ix.path,
	}
	if h.Released() {
		r.ReleasedBy = ix.GroupName(h.Group)
	}
	if r.Owner == "" && h.Param() {
		r.Owner = "parameter or buffer of " + ix.GroupName(h.Group)
	}
	return r
}

// findStorage matches a fault to a released storage: by address when the address is real (inside a
// released storage), else by size. Among several, a storage with an owner outside the releasing group
// comes first, then the earliest release (the one that destroyed it).
func (ix *traceIndex) findStorage(addr *uint64, size *uint64) *StorageRef {
	if addr != nil && !nearNull(*addr) {
		var best *timeline.Handle
		for _, h := range ix.Released {
			if *addr >= h.Base && *addr < h.Base+max(h.Nbytes, 1) {
				best = h // the latest release of that range: a reused address belongs to the newest generation
			}
		}
		if best != nil {
			return ix.ref(best, "address")
		}
	}
	if size == nil || *size == 0 {
		return nil
	}
	var cands []*timeline.Handle
	owned := map[*timeline.Handle]bool{}
	bases := map[uint64]bool{}
	for _, h := range ix.Released {
		if h.Nbytes == *size {
			cands = append(cands, h)
			owned[h] = ix.Owner(h.Base, h.Nbytes) != ""
			bases[h.Base] = true
		}
	}
	if len(cands) == 0 {
		return nil
	}
	// The agent's rule (tracker.MoreLikely); every candidate here was released.
	suspect := func(h *timeline.Handle) tracker.Suspect {
		return tracker.Suspect{Released: true, External: owned[h], Order: h.ReleaseSeq}
	}
	sort.SliceStable(cands, func(i, j int) bool { return tracker.MoreLikely(suspect(cands[i]), suspect(cands[j])) })
	r := ix.ref(cands[0], "size")
	r.Others = len(bases) - 1
	return r
}

// fromFault completes a storage reference from the agent's own fault record.
func (ix *traceIndex) fromFault(f trace.Fault) *StorageRef {
	r := &StorageRef{
		Base: f.Storage.Addr(), Nbytes: uint64(f.Nbytes), Generation: uint64(f.Generation), Handle: f.Handle,
		ReleasedBy: f.ReleasedBy, Owner: f.Owner, KeepReason: f.KeepReason, MatchedBy: "fault event", Trace: ix.path,
		Tensor: f.StorageTensor,
	}
	if h := ix.Handles[f.Handle]; h != nil && f.Handle != 0 {
		if r.Base == 0 {
			r.Base = h.Base
		}
		if r.Nbytes == 0 {
			r.Nbytes = h.Nbytes
		}
		if r.Generation == 0 {
			r.Generation = h.Gen
		}
		if r.ReleasedBy == "" && h.Released() {
			r.ReleasedBy = ix.GroupName(h.Group)
		}
		if r.KeepReason == "" {
			r.KeepReason = keepReasonName(h.Reason)
		}
	}
	if r.Nbytes == 0 {
		r.Nbytes = uint64(f.Size)
	}
	if r.Owner == "" && r.Base != 0 {
		r.Owner = ix.Owner(r.Base, r.Nbytes)
	}
	if r.ReleasedBy == "" || r.Base == 0 {
		// The agent named less than we can find: fill from the swap decisions.
		addr, size := uint64(f.Addr), uint64(f.Size)
		if m := ix.findStorage(&addr, &size); m != nil {
			if r.Base == 0 {
				r.Base, r.Generation, r.Handle = m.Base, m.Generation, m.Handle
			}
			if r.ReleasedBy == "" {
				r.ReleasedBy = m.ReleasedBy
			}
			if r.Owner == "" {
				r.Owner = m.Owner
			}
			if r.KeepReason == "" {
				r.KeepReason = m.KeepReason
			}
		}
	}
	return r
}

// match picks the agent fault record that fits a log fault (same address and size, else same size).
func (ix *traceIndex) match(addr, size *uint64) (trace.Fault, bool) {
	for _, f := range ix.faults {
		if addr != nil && size != nil && uint64(f.Addr) == *addr && uint64(f.Size) == *size {
			return f, true
		}
	}
	for _, f := range ix.faults {
		if size != nil && uint64(f.Size) == *size {
			return f, true
		}
	}
	if addr == nil && size == nil && len(ix.faults) > 0 {
		return ix.faults[0], true
	}
	return trace.Fault{}, false
}
