// Package doctor owns `swapagent doctor`: post-mortem diagnosis of null-address and aicore faults from an
// msrun log directory, and from the swapagent traces beside it when there are any.
//
// doctor.go finds the logs and traces, builds one Fault per fault record and explains it; parse.go reads
// the logs, size.go explains sizes, traces.go reads traces, render.go prints, main.go is the subcommand.
package doctor

import (
	"swapagent/acllog"

	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Result is a diagnosis of one directory. It marshals to the JSON `doctor --format json` prints.
type Result struct {
	Dir    string   `json:"dir"`
	Logs   []string `json:"logs"`   // log files read, relative to Dir
	Traces []string `json:"traces"` // trace files read
	Faults []Fault  `json:"faults"` // one per fault record, in rank order
	Notes  []string `json:"notes,omitempty"`
}

// Diagnosed reports whether any fault was found.
func (r *Result) Diagnosed() bool { return len(r.Faults) > 0 }

// Fault is one diagnosed fault. Its first fields are those of the stats JSON "faults" list.
type Fault struct {
	Kernel     string  `json:"kernel,omitempty"`
	Addr       *uint64 `json:"addr"`
	Size       *uint64 `json:"size"`
	Storage    *uint64 `json:"storage"`               // base of the released storage, when a trace names it
	ReleasedBy string  `json:"released_by,omitempty"` // group whose swap released it
	Owner      string  `json:"owner,omitempty"`       // who still owned it

	Rank        int              `json:"rank"` // -1: unknown (scheduler or an unnamed log)
	Log         string           `json:"log,omitempty"`
	Line        int              `json:"line,omitempty"`
	Source      string           `json:"source"` // "log", or "trace" for a fault only the agent recorded
	Op          string           `json:"op,omitempty"`
	TensorIndex *int             `json:"tensor_index"`
	Record      *acllog.Record   `json:"record,omitempty"`
	AddrKind    string           `json:"addr_kind"` // null, near-null, non-null, unknown
	SizeInfo    *acllog.SizeInfo `json:"size_info,omitempty"`
	StorageRef  *StorageRef      `json:"storage_ref,omitempty"`
	Causes      []string         `json:"causes"` // most likely first
	Advice      []string         `json:"advice"`
}

// nearNullLimit: addresses below it are a null base plus a view offset, never a real device address.
const nearNullLimit = 1 << 24

func nearNull(a uint64) bool { return a < nearNullLimit }

var (
	reWorker    = regexp.MustCompile(`^worker_(\d+)\.log$`)
	reRankDir   = regexp.MustCompile(`^rank_?(\d+)$`)
	reRankInLog = regexp.MustCompile(`(?:^|[._-])rank_?(\d+)(?:[._-]|$)`)
)

type logFile struct {
	path string
	rank int
}

// isMsrunLog tells whether a file name is one msrun writes.
func isMsrunLog(name string) bool { return name == "scheduler.log" || reWorker.MatchString(name) }

// isFile accepts regular files and symlinks to them.
func isFile(path string, e fs.DirEntry) bool {
	if e.Type().IsRegular() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 {
		st, err := os.Stat(path)
		return err == nil && st.Mode().IsRegular()
	}
	return false
}

func rankOf(path string) int {
	name := filepath.Base(path)
	if m := reWorker.FindStringSubmatch(name); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil {
			return v
		}
	}
	if m := reRankDir.FindStringSubmatch(filepath.Base(filepath.Dir(path))); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil {
			return v
		}
	}
	if m := reRankInLog.FindStringSubmatch(name); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil {
			return v
		}
	}
	return -1
}

// findLogs looks for msrun logs in dir, then one level down (dir/log/, dir/msrun_log/, ...), then two
// (MindFormers' output/msrun_log/ when given the run directory, or log/rank_N/ files). When there are no
// msrun logs at all it falls back to any *.log directly in dir.
func findLogs(dir string) ([]logFile, []string, error) {
	var notes []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	collect := func(d string, accept func(string) bool) []logFile {
		es, err := os.ReadDir(d)
		if err != nil {
			notes = append(notes, "skipped "+d+": "+oneLine(err))
			return nil
		}
		var out []logFile
		for _, e := range es {
			if accept(e.Name()) && isFile(filepath.Join(d, e.Name()), e) {
				p := filepath.Join(d, e.Name())
				out = append(out, logFile{path: p, rank: rankOf(p)})
			}
		}
		return out
	}
	if logs := collect(dir, isMsrunLog); len(logs) > 0 {
		return logs, notes, nil
	}
	var subdirs []string
	for _, e := range entries {
		if e.IsDir() {
			subdirs = append(subdirs, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(subdirs)
	for depth := 1; depth <= 2; depth++ {
		var logs []logFile
		var next []string
		for _, sd := range subdirs {
			logs = append(logs, collect(sd, isMsrunLog)...)
			if reRankDir.MatchString(filepath.Base(sd)) {
				logs = append(logs, collect(sd, func(n string) bool { return strings.HasSuffix(n, ".log") })...)
			}
			if depth < 2 {
				es, _ := os.ReadDir(sd)
				for _, e := range es {
					if e.IsDir() {
						next = append(next, filepath.Join(sd, e.Name()))
					}
				}
			}
		}
		if len(logs) > 0 {
			return logs, notes, nil
		}
		sort.Strings(next)
		subdirs = next
	}
	return collect(dir, func(n string) bool { return strings.HasSuffix(n, ".log") }), notes, nil
}

// Diagnose reads the msrun log directory dir (and traces beside it) and diagnoses every fault in it.
// The error is only for bad input: a missing or unreadable directory, a file, or no log files at all.
func Diagnose(dir string) (*Result, error) {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no such directory", dir)
		}
		return nil, fmt.Errorf("%s: %s", dir, oneLine(err))
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory (give the msrun log directory)", dir)
	}
	logs, notes, err := findLogs(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", dir, oneLine(err))
	}
	if len(logs) == 0 {
		return nil, fmt.Errorf("%s: no log files (expected worker_<rank>.log or scheduler.log)", dir)
	}
	res := &Result{Dir: dir, Notes: notes, Faults: []Fault{}, Traces: []string{}}
	read := 0
	for _, lf := range logs {
		res.Logs = append(res.Logs, rel(dir, lf.path))
		recs, err := parseFile(lf.path)
		if err != nil {
			res.Notes = append(res.Notes, rel(dir, lf.path)+": "+oneLine(err))
			if recs == nil {
				continue
			}
		}
		read++
		for i := range recs {
			res.Faults = append(res.Faults, faultFromRecord(lf, rel(dir, lf.path), &recs[i]))
		}
	}
	if read == 0 {
		return nil, fmt.Errorf("%s: none of the %d log files could be read", dir, len(logs))
	}

	traces := loadTraces(dir, logs, res)
	attachTraces(res, traces)
	for i := range res.Faults {
		explain(&res.Faults[i])
	}
	sort.SliceStable(res.Faults, func(i, j int) bool {
		ri, rj := res.Faults[i].Rank, res.Faults[j].Rank
		if ri < 0 {
			ri = int(^uint(0) >> 1)
		}
		if rj < 0 {
			rj = int(^uint(0) >> 1)
		}
		return ri < rj
	})
	return res, nil
}

func parseFile(path string) ([]acllog.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := acllog.ParseLog(f)
	if recs == nil {
		recs = []acllog.Record{}
	}
	return recs, err
}

func faultFromRecord(lf logFile, name string, rec *acllog.Record) Fault {
	f := Fault{Rank: lf.rank, Log: name, Line: rec.Line, Source: "log", Kernel: rec.KernelName, Record: rec}
	if f.Kernel != "" {
		f.Op = acllog.KernelOp(f.Kernel)
	} else if rec.FailedOp != "" {
		f.Op = strings.TrimPrefix(rec.FailedOp, "aclnn")
	}
	// The faulting tensor: a null or near-null one, else the first dumped.
	var pick *acllog.Tensor
	for i := range rec.Tensors {
		t := &rec.Tensors[i]
		if t.Addr != nil && nearNull(*t.Addr) {
			pick = t
			break
		}
	}
	if pick == nil && len(rec.Tensors) > 0 {
		pick = &rec.Tensors[0]
	}
	if pick != nil {
		f.Addr, f.Size = pick.Addr, pick.Size
		if pick.Index >= 0 {
			idx := pick.Index
			f.TensorIndex = &idx
		}
	}
	return f
}

// traceDirs are the places a run's traces may be: the log directory, the directories the logs were
// found in, its swapagent-out, its parent and the parent's swapagent-out (SWAPAGENT_OUT defaults to
// ./swapagent-out of the launch directory, which usually holds the log directory).
func traceDirs(dir string, logs []logFile) []string {
	cands := []string{dir, filepath.Join(dir, "swapagent-out")}
	for _, lf := range logs {
		cands = append(cands, filepath.Dir(lf.path))
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if abs, err := filepath.Abs(dir); err == nil {
		parent = filepath.Dir(abs)
	}
	cands = append(cands, parent, filepath.Join(parent, "swapagent-out"))
	seen := map[string]bool{}
	var out []string
	for _, c := range cands {
		key := c
		if abs, err := filepath.Abs(c); err == nil {
			key = abs
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			out = append(out, c)
		}
	}
	return out
}

func loadTraces(dir string, logs []logFile, res *Result) []*traceIndex {
	var out []*traceIndex
	seen := map[string]bool{}
	for _, d := range traceDirs(dir, logs) {
		paths, err := findTraces(d)
		if err != nil {
			res.Notes = append(res.Notes, "traces in "+d+": "+oneLine(err))
			continue
		}
		for _, p := range paths {
			key := p
			if abs, err := filepath.Abs(p); err == nil {
				key = abs
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			ix, err := loadTrace(p)
			if err != nil {
				res.Notes = append(res.Notes, "skipped trace: "+oneLine(err))
				continue
			}
			if ix.readErr != nil {
				res.Notes = append(res.Notes, "trace read up to its last good batch: "+oneLine(ix.readErr))
			}
			if ix.badFault > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("trace %s: %d fault events with unreadable JSON", p, ix.badFault))
			}
			res.Traces = append(res.Traces, p)
			out = append(out, ix)
		}
	}
	return out
}

// tracesFor returns the traces of a rank: those whose header names it, else the only trace there is
// when its rank (or the log's) is unknown.
func tracesFor(rank int, all []*traceIndex) []*traceIndex {
	var out []*traceIndex
	if rank >= 0 {
		for _, ix := range all {
			if ix.hdr.Rank == rank {
				out = append(out, ix)
			}
		}
	}
	if len(out) == 0 && len(all) == 1 && (all[0].hdr.Rank < 0 || rank < 0) {
		out = all
	}
	return out
}

func attachTraces(res *Result, all []*traceIndex) {
	if len(all) == 0 {
		return
	}
	used := map[*traceIndex]map[int]bool{}
	for i := range res.Faults {
		f := &res.Faults[i]
		for _, ix := range tracesFor(f.Rank, all) {
			if tf, ok := ix.match(f.Addr, f.Size); ok {
				f.StorageRef = ix.fromFault(tf)
				if f.Kernel == "" {
					f.Kernel = tf.Kernel
				}
				markUsed(used, ix, tf)
				break
			}
			if ref := ix.findStorage(f.Addr, f.Size); ref != nil {
				f.StorageRef = ref
				break
			}
		}
		f.fillFromRef()
	}
	// Faults only the agent saw (caught at launch, or logs lost): report them too.
	for _, ix := range all {
		for k, tf := range ix.faults {
			if used[ix][k] || rankHasLogFault(res, ix.hdr.Rank) {
				continue
			}
			addr, size := uint64(tf.Addr), uint64(tf.Size)
			f := Fault{Rank: ix.hdr.Rank, Source: "trace", Log: ix.path, Kernel: tf.Kernel, Addr: &addr, Size: &size,
				TensorIndex: tf.TensorIndex, StorageRef: ix.fromFault(tf)}
			f.Op = acllog.KernelOp(strings.TrimPrefix(tf.Kernel, "aclnn"))
			f.fillFromRef()
			res.Faults = append(res.Faults, f)
		}
	}
}

func markUsed(used map[*traceIndex]map[int]bool, ix *traceIndex, tf TraceFault) {
	for k := range ix.faults {
		if ix.faults[k] == tf {
			if used[ix] == nil {
				used[ix] = map[int]bool{}
			}
			used[ix][k] = true
			return
		}
	}
}

func rankHasLogFault(res *Result, rank int) bool {
	for _, f := range res.Faults {
		if f.Source == "log" && f.Rank == rank && rank >= 0 {
			return true
		}
	}
	return false
}

func (f *Fault) fillFromRef() {
	if f.StorageRef == nil {
		return
	}
	if f.StorageRef.Base != 0 {
		b := f.StorageRef.Base
		f.Storage = &b
	}
	f.ReleasedBy, f.Owner = f.StorageRef.ReleasedBy, f.StorageRef.Owner
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// oneLine keeps an error message to one line.
func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return s
}
