// traces.go owns what doctor learns from swapagent traces beside the logs: the agent's own fault
// records (KindFault) and, from the swap decisions (KindClassify, KindState, KindRegionEnter), which
// released storage a faulting address or size belongs to, who released it and who owned it.
package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"swapagent/acllog"
	"swapagent/trace"
	"swapagent/tracker"
)

// Offload states in KindState events (swapagent.h).
const (
	stateDevice = 0
	stateD2H    = 1
	stateHost   = 2
	stateH2D    = 3
)

// findTraces lists the trace files of a directory.
var findTraces = trace.FindTraces

// keepReasons names swapagent_keep_reason values.
var keepReasons = []string{"internal", "input", "output", "protected", "param", "shared", "small", "duplicate"}

func keepReasonName(r uint64) string {
	if r < uint64(len(keepReasons)) {
		return keepReasons[r]
	}
	return fmt.Sprintf("reason %d", r)
}

// TraceFault is the JSON the agent writes in a KindFault event's Text (docs/doctor.md). Numbers may
// also be written as "0x..." strings.
type TraceFault struct {
	Kernel        string   `json:"kernel"`
	Addr          jsonUint `json:"addr"`
	Size          jsonUint `json:"size"`
	Storage       jsonUint `json:"storage"`
	Generation    jsonUint `json:"generation"`
	Handle        int64    `json:"handle"`
	Nbytes        jsonUint `json:"nbytes"`
	Arg           string   `json:"arg,omitempty"`            // the argument accessed, when named
	Tensor        string   `json:"tensor,omitempty"`         // its dtype and shape
	StorageTensor string   `json:"storage_tensor,omitempty"` // the storage's dtype and shape
	ReleasedBy    string   `json:"released_by"`
	Owner         string   `json:"owner"`
	KeepReason    string   `json:"keep_reason"`
	Detected      string   `json:"detected"`
	Code          int      `json:"code"`
	TensorIndex   *int     `json:"tensor_index"`
	Repeats       uint64   `json:"repeats,omitempty"`
	Detail        string   `json:"detail,omitempty"`
}

// jsonUint accepts a JSON number or a decimal/"0x" string.
type jsonUint uint64

func (u *jsonUint) UnmarshalJSON(b []byte) error {
	s, _, _ := strings.Cut(strings.Trim(string(b), `"`), "#") // "0xADDR#GEN" names a storage
	if s == "null" || s == "" {
		return nil
	}
	v, ok := acllog.ParseUint(s)
	if !ok {
		return fmt.Errorf("not an unsigned integer: %.40s", s)
	}
	*u = jsonUint(v)
	return nil
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

type storage struct {
	handle   int64
	group    uint32
	base     uint64
	nbytes   uint64
	gen      uint64
	reason   uint64
	flags    uint64
	released bool
	relSeq   int // order of release, for "who released it first"
	restored bool
	tensor   trace.Tensor // what the companion said of it (region_enter or describe)
}

type regionUse struct {
	group   uint32
	keyword bool
	arg     string // the argument's path, when the companion named it
}

// groupPtr is a pointer in one group's open region: descriptions are matched to saves through it.
type groupPtr struct {
	group uint32
	ptr   uint64
}

// traceIndex is one trace reduced to what diagnosis needs.
type traceIndex struct {
	path     string
	hdr      trace.Header
	groups   map[uint32]string
	byHandle map[int64]*storage
	released []*storage // in release order
	inputs   map[uint64][]regionUse
	outputs  map[uint64][]uint32
	// described: the descriptions of the open regions' pointers (region_enter's, describe's); saved: the
	// storage each group saved at a pointer in its open region. Both are cleared at the group's exit.
	described map[groupPtr]trace.Tensor
	saved     map[groupPtr]*storage
	faults    []TraceFault
	badFault  int
	endTS     int64       // the last event's TS: the trace's window is [StartUnix, StartUnix+endTS]
	readErr   error       // the trace ends mid-batch (a killed process)
	gaps      []trace.Gap // damaged batches skipped
}

func loadTrace(path string) (*traceIndex, error) {
	hdr, evs, gaps, err := trace.SalvageFile(path)
	if err != nil && !errors.Is(err, trace.ErrTruncated) {
		return nil, err
	}
	ix := &traceIndex{
		path: path, hdr: hdr, readErr: err, gaps: gaps,
		groups:    map[uint32]string{},
		byHandle:  map[int64]*storage{},
		inputs:    map[uint64][]regionUse{},
		outputs:   map[uint64][]uint32{},
		described: map[groupPtr]trace.Tensor{},
		saved:     map[groupPtr]*storage{},
	}
	describe := func(g uint32, p uint64, t trace.Tensor) {
		k := groupPtr{g, p}
		if old := ix.described[k]; t.Path == "" {
			t.Path = old.Path // a saved input keeps its argument's name
		}
		ix.described[k] = t
		if s := ix.saved[k]; s != nil && t.Known() {
			s.tensor = t
		}
	}
	get := func(h int64) *storage {
		s := ix.byHandle[h]
		if s == nil {
			s = &storage{handle: h}
			ix.byHandle[h] = s
		}
		return s
	}
	for i := range evs {
		ev := &evs[i]
		ix.endTS = max(ix.endTS, ev.TS)
		switch ev.Kind {
		case trace.KindGroup:
			ix.groups[ev.Group] = ev.Text
		case trace.KindRegionEnter:
			npos := ev.Args[0]
			ts := trace.SplitTensors(ev.Text, len(ev.Ptrs))
			for j, p := range ev.Ptrs {
				ix.inputs[p] = append(ix.inputs[p], regionUse{group: ev.Group, keyword: uint64(j) >= npos,
					arg: ts[j].Path})
				if p != 0 && (ts[j].Known() || ts[j].Path != "") {
					describe(ev.Group, p, ts[j])
				}
			}
		case trace.KindDescribe:
			for j, t := range trace.SplitTensors(ev.Text, len(ev.Ptrs)) {
				if ev.Ptrs[j] != 0 && (t.Known() || t.Path != "") {
					describe(ev.Group, ev.Ptrs[j], t)
				}
			}
		case trace.KindRegionExit:
			for _, p := range ev.Ptrs {
				ix.outputs[p] = append(ix.outputs[p], ev.Group)
			}
			for k := range ix.described {
				if k.group == ev.Group {
					delete(ix.described, k)
				}
			}
			for k := range ix.saved {
				if k.group == ev.Group {
					delete(ix.saved, k)
				}
			}
		case trace.KindSave:
			s := get(ev.Handle)
			s.group, s.base, s.nbytes, s.flags, s.gen = ev.Group, ev.Args[0], ev.Args[1], ev.Args[2], ev.Args[3]
			k := groupPtr{ev.Group, s.base}
			ix.saved[k] = s
			if t := ix.described[k]; t.Known() {
				s.tensor = t
			}
		case trace.KindClassify:
			s := get(ev.Handle)
			s.group, s.base, s.nbytes, s.reason, s.gen = ev.Group, ev.Args[0], ev.Args[1], ev.Args[2], ev.Args[3]
		case trace.KindState:
			s := get(ev.Handle)
			if s.nbytes == 0 {
				s.nbytes = ev.Args[3]
			}
			switch ev.Args[1] {
			case stateHost:
				if !s.released {
					s.released = true
					s.relSeq = len(ix.released)
					ix.released = append(ix.released, s)
				}
			case stateDevice:
				if s.released {
					s.restored = true
				}
			}
		case trace.KindFault:
			var f TraceFault
			if json.Unmarshal([]byte(ev.Text), &f) != nil {
				ix.badFault++
				continue
			}
			ix.faults = append(ix.faults, f)
		}
	}
	return ix, nil
}

func (ix *traceIndex) groupName(g uint32) string {
	if n, ok := ix.groups[g]; ok && n != "" {
		return n
	}
	return fmt.Sprintf("group#%d", g)
}

// owner describes who held [base, base+nbytes) besides the group that released it: its input uses by
// the tracker's rule (tracker.StorageInfo.Owner), then the groups it was an output of.
func (ix *traceIndex) owner(base, nbytes uint64) string {
	if base == 0 {
		return ""
	}
	end := base + max(nbytes, 1)
	var uses []tracker.InputUse
	var outs []string
	seenOut := map[uint32]bool{}
	for p, us := range ix.inputs {
		if p < base || p >= end {
			continue
		}
		for _, u := range us {
			uses = append(uses, tracker.InputUse{Group: ix.groupName(u.group), Keyword: u.keyword, Arg: u.arg})
		}
	}
	for p, gs := range ix.outputs {
		if p < base || p >= end {
			continue
		}
		for _, g := range gs {
			if !seenOut[g] {
				seenOut[g] = true
				outs = append(outs, ix.groupName(g))
			}
		}
	}
	// Map order must not decide the text: uses in group order, as the tracker would have seen them.
	sort.SliceStable(uses, func(i, j int) bool { return uses[i].Group < uses[j].Group })
	owner := tracker.StorageInfo{Inputs: uses}.Owner()
	if len(outs) > 0 {
		if owner != "" {
			owner += "; "
		}
		owner += "output of " + tracker.GroupList(outs)
	}
	return owner
}

func (ix *traceIndex) ref(s *storage, by string) *StorageRef {
	r := &StorageRef{
		Base: s.base, Nbytes: s.nbytes, Generation: s.gen, Handle: s.handle,
		KeepReason: keepReasonName(s.reason), Owner: ix.owner(s.base, s.nbytes), Tensor: s.tensor.String(),
		MatchedBy: by, Restored: s.restored, Trace: ix.path,
	}
	if s.released {
		r.ReleasedBy = ix.groupName(s.group)
	}
	if r.Owner == "" && s.flags&1 != 0 {
		r.Owner = "parameter or buffer of " + ix.groupName(s.group)
	}
	return r
}

// findStorage matches a fault to a released storage: by address when the address is real (inside a
// released storage), else by size. Among several, a storage with an owner outside the releasing group
// comes first, then the earliest release (the one that destroyed it).
func (ix *traceIndex) findStorage(addr *uint64, size *uint64) *StorageRef {
	if addr != nil && !nearNull(*addr) {
		var best *storage
		for _, s := range ix.released {
			if *addr >= s.base && *addr < s.base+max(s.nbytes, 1) {
				best = s // the latest release of that range: a reused address belongs to the newest generation
			}
		}
		if best != nil {
			return ix.ref(best, "address")
		}
	}
	if size == nil || *size == 0 {
		return nil
	}
	var cands []*storage
	bases := map[uint64]bool{}
	for _, s := range ix.released {
		if s.nbytes == *size {
			cands = append(cands, s)
			bases[s.base] = true
		}
	}
	if len(cands) == 0 {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool {
		oi, oj := ix.owner(cands[i].base, cands[i].nbytes) != "", ix.owner(cands[j].base, cands[j].nbytes) != ""
		if oi != oj {
			return oi
		}
		return cands[i].relSeq < cands[j].relSeq
	})
	r := ix.ref(cands[0], "size")
	r.Others = len(bases) - 1
	return r
}

// fromFault completes a storage reference from the agent's own fault record.
func (ix *traceIndex) fromFault(f TraceFault) *StorageRef {
	r := &StorageRef{
		Base: uint64(f.Storage), Nbytes: uint64(f.Nbytes), Generation: uint64(f.Generation), Handle: f.Handle,
		ReleasedBy: f.ReleasedBy, Owner: f.Owner, KeepReason: f.KeepReason, MatchedBy: "fault event", Trace: ix.path,
		Tensor: f.StorageTensor,
	}
	if s := ix.byHandle[f.Handle]; s != nil && f.Handle != 0 {
		if r.Base == 0 {
			r.Base = s.base
		}
		if r.Nbytes == 0 {
			r.Nbytes = s.nbytes
		}
		if r.Generation == 0 {
			r.Generation = s.gen
		}
		if r.ReleasedBy == "" && s.released {
			r.ReleasedBy = ix.groupName(s.group)
		}
		if r.KeepReason == "" {
			r.KeepReason = keepReasonName(s.reason)
		}
	}
	if r.Nbytes == 0 {
		r.Nbytes = uint64(f.Size)
	}
	if r.Owner == "" && r.Base != 0 {
		r.Owner = ix.owner(r.Base, r.Nbytes)
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
func (ix *traceIndex) match(addr, size *uint64) (TraceFault, bool) {
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
	return TraceFault{}, false
}
