// Package doctor owns `swapagent doctor`: post-mortem diagnosis of null-address and aicore faults from an
// msrun log directory, and from the swapagent traces beside it when there are any.
//
// doctor.go finds the logs and traces, builds one Fault per fault record and explains it; the log lines
// are parsed and sizes explained by package acllog, logmeta.go reads a log's pid and times, match.go says
// which trace belongs to which log, traces.go reads traces (folded by package timeline), render.go prints,
// main.go is the subcommand.
package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"swapagent/acllog"
	"swapagent/trace"
)

// Result is a diagnosis of one directory. It marshals to the JSON `doctor --format json` prints.
type Result struct {
	Dir    string   `json:"dir"`
	Logs   []string `json:"logs"`   // log files read, relative to Dir
	Traces []string `json:"traces"` // trace files read
	Faults []Fault  `json:"faults"` // one per fault record, in rank order
	Notes  []string `json:"notes,omitempty"`
	// tracesFound counts the trace files found, read or not (those not read are notes).
	tracesFound int
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
	Time        *time.Time       `json:"time,omitempty"`     // when the log says it happened
	LogPIDs     []int            `json:"log_pids,omitempty"` // the pids the log names (RUNTIME(<pid>,...))
	Source      string           `json:"source"`             // "log", or "trace" for a fault only the agent recorded
	Detected    string           `json:"detected,omitempty"` // for a trace fault: launch, sync or region_enter
	Op          string           `json:"op,omitempty"`
	TensorIndex *int             `json:"tensor_index"`
	Record      *acllog.Record   `json:"record,omitempty"`
	AddrKind    string           `json:"addr_kind"` // null, near-null, non-null, unknown
	SizeInfo    *acllog.SizeInfo `json:"size_info,omitempty"`
	StorageRef  *StorageRef      `json:"storage_ref,omitempty"`
	Causes      []string         `json:"causes"` // most likely first
	Advice      []string         `json:"advice"`

	// Trace is the trace used for this fault ("" when none fits); TracesChecked every trace looked at,
	// with why each did not fit (match.go).
	Trace         string       `json:"trace,omitempty"`
	TracesChecked []TraceCheck `json:"traces_checked,omitempty"`
	// AgentFaults are what the agent caught in that process besides this fault, which the log cannot
	// show: reads of released storages at launch, region inputs with no device memory.
	AgentFaults []trace.Fault `json:"agent_faults,omitempty"`
	Note        string        `json:"note,omitempty"`
	// Count is how many faults of this cause the block stands for (fold; 1 for a fault of its own), Also
	// the others, one line each.
	Count int      `json:"count"`
	Also  []string `json:"also,omitempty"`
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

// findLogs finds the logs of a run (docs/doctor.md, "Where it looks"): msrun's worker_<rank>.log and
// scheduler.log in dir; else, one, two and three directories down, msrun logs and the *.log files of
// rank_<N>/ or rank<N>/ directories (dir/log/, dir/msrun_log/, dir/rank_0/; MindFormers' run directory:
// output/msrun_log/ and output/log/rank_0/), the first depth with any winning; else any *.log in dir.
func findLogs(dir string) ([]logFile, []string, error) {
	var notes []string
	if _, err := os.ReadDir(dir); err != nil {
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
			p := filepath.Join(d, e.Name())
			switch {
			case !accept(e.Name()) || e.IsDir():
			case isFile(p, e):
				out = append(out, logFile{path: p, rank: rankOf(p)})
			default: // a FIFO, socket or device with a log's name: named, never opened to wait on
				if f, err := trace.Open(p); err != nil {
					notes = append(notes, "skipped "+oneLine(err))
				} else {
					f.Close()
				}
			}
		}
		return out
	}
	anyLog := func(n string) bool { return strings.HasSuffix(n, ".log") }
	if logs := collect(dir, isMsrunLog); len(logs) > 0 {
		return logs, notes, nil
	}
	level := subdirs(dir)
	for depth := 1; depth <= 3 && len(level) > 0; depth++ {
		var logs []logFile
		var next []string
		for _, sd := range level {
			logs = append(logs, collect(sd, isMsrunLog)...)
			if reRankDir.MatchString(filepath.Base(sd)) {
				logs = append(logs, collect(sd, func(n string) bool { return anyLog(n) && !isMsrunLog(n) })...)
			}
			next = append(next, subdirs(sd)...)
		}
		if len(logs) > 0 {
			return logs, notes, nil
		}
		level = next
	}
	return collect(dir, func(n string) bool { return anyLog(n) && !agentLog(dir, n) }), notes, nil
}

// agentLog says whether name in dir is the agent's own log (<host>[.rank<R>].<pid>.log beside its trace),
// not a log of the job: it repeats the faults the trace holds. Any segment of that trace is beside it
// (trace.FirstSegment's rule: <stem>+<k>.swtrace), whether or not the first was dropped under a limit.
func agentLog(dir, name string) bool {
	first := filepath.Join(dir, strings.TrimSuffix(name, ".log")) + trace.FileSuffix
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if strings.HasSuffix(e.Name(), trace.FileSuffix) && trace.FirstSegment(filepath.Join(dir, e.Name())) == first {
			return true
		}
	}
	return false
}

// subdirs lists the directories in d, sorted, leaving out where traces live (swapagent-out) and hidden ones.
func subdirs(d string) []string {
	es, _ := os.ReadDir(d)
	var out []string
	for _, e := range es {
		if e.IsDir() && e.Name() != "swapagent-out" && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	sort.Strings(out)
	return out
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
	res := &Result{Dir: dir, Notes: notes, Faults: []Fault{}, Traces: []string{}, Logs: []string{}}
	if len(logs) == 0 { // a trace directory (swapagent run --out): the traces alone
		traces, found := loadTraces(dir, nil, res)
		if found == 0 { // traces that cannot be read are notes: diagnosed, not bad input
			return nil, fmt.Errorf("%s: no log files (expected worker_<rank>.log or scheduler.log) and no traces", dir)
		}
		res.tracesFound = found
		attachTraces(res, traces, nil)
		res.finish()
		return res, nil
	}
	read := 0
	var infos []logInfo
	for _, lf := range logs {
		name := rel(dir, lf.path)
		res.Logs = append(res.Logs, name)
		recs, err := parseFile(lf.path)
		if err != nil {
			res.Notes = append(res.Notes, name+": "+oneLine(err))
			if recs == nil {
				continue
			}
		}
		read++
		meta, err := scanLogMeta(lf.path, recs)
		if err != nil {
			res.Notes = append(res.Notes, name+": "+oneLine(err))
		}
		infos = append(infos, logInfo{name: name, rank: lf.rank, meta: meta})
		for i := range recs {
			f := faultFromRecord(lf, name, &recs[i])
			if meta != nil {
				f.LogPIDs = meta.pids
				if t, ok := meta.recTimes[recs[i].Line]; ok {
					f.Time = &t
				}
			}
			res.Faults = append(res.Faults, f)
		}
	}
	if read == 0 {
		return nil, fmt.Errorf("%s: none of the %d log files could be read", dir, len(logs))
	}

	traces, found := loadTraces(dir, logs, res)
	res.tracesFound = found
	attachTraces(res, traces, infos)
	res.finish()
	return res, nil
}

// finish explains every fault, folds those of one cause (fold) and puts them in rank order.
func (r *Result) finish() {
	defer func() {
		if r.Faults == nil {
			r.Faults = []Fault{} // JSON: an empty list, not null
		}
	}()
	for i := range r.Faults {
		explain(&r.Faults[i])
	}
	r.Faults = fold(r.Faults)
	sort.SliceStable(r.Faults, func(i, j int) bool {
		ri, rj := r.Faults[i].Rank, r.Faults[j].Rank
		if ri < 0 {
			ri = int(^uint(0) >> 1)
		}
		if rj < 0 {
			rj = int(^uint(0) >> 1)
		}
		return ri < rj
	})
}

// fold keeps one block per cause, as run's summary does: the faults the agent caught in one process that
// read the same kind of argument released by swap the same way (at a kernel or at a region's entry) are
// one cause, shown by its first fault with a count and a line for each of the others. A fault of a job
// log stands alone: each has its own place in the log.
func fold(fs []Fault) []Fault {
	type key struct {
		trace, detected, role string
		rank                  int
	}
	at := map[key]int{}
	var out []Fault
	for _, f := range fs {
		f.Count = 1
		if f.Source != "trace" || f.StorageRef == nil || f.ReleasedBy == "" {
			out = append(out, f)
			continue
		}
		role, _, _ := strings.Cut(f.Owner, " of ")
		k := key{f.Trace, "kernel", role, f.Rank}
		if isRegion(trace.Fault{Kernel: f.Kernel, Detected: f.Detected}) {
			k.detected = "region"
		}
		if i, ok := at[k]; ok {
			out[i].Count++
			out[i].Also = append(out[i].Also, f.brief())
			continue
		}
		at[k] = len(out)
		out = append(out, f)
	}
	return out
}

// brief is a folded fault in one line: where, what it read, whose it was.
func (f *Fault) brief() string {
	s := f.Kernel
	if f.Addr != nil {
		s += fmt.Sprintf(" read %#x", *f.Addr)
	}
	if ref := f.StorageRef; ref != nil {
		s += fmt.Sprintf(" (storage %#x, %s, released by %s)", ref.Base, orUnknown(ref.Owner), orUnknown(ref.ReleasedBy))
	}
	return s
}

func parseFile(path string) ([]acllog.Record, error) {
	f, err := trace.Open(path) // the readers' rule: a FIFO named *.log is refused, not waited on
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

func loadTraces(dir string, logs []logFile, res *Result) (out []*traceIndex, found int) {
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
			found++
			ix, err := loadTrace(p, len(res.Faults) > 0)
			if err != nil {
				res.Notes = append(res.Notes, "skipped trace: "+oneLine(err))
				continue
			}
			res.Notes = append(res.Notes, ix.warnings...)
			if ix.badFault > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("trace %s: %d fault events with unreadable JSON", p, ix.badFault))
			}
			res.Traces = append(res.Traces, p)
			out = append(out, ix)
		}
	}
	return out, found
}

// logInfo is one log as matching needs it.
type logInfo struct {
	name string
	rank int
	meta *logMeta
}

// maxAgentFaults bounds the agent's own records shown next to one log fault.
const maxAgentFaults = 8

// attachTraces gives each log fault the trace of its process (pickTrace) and what that trace says, and
// adds the faults only the agent recorded, in processes whose logs show none.
func attachTraces(res *Result, all []*traceIndex, logs []logInfo) {
	if len(all) == 0 {
		return
	}
	used := map[*traceIndex]map[int]bool{}
	usedBy := map[*traceIndex]bool{}
	metaOf := map[string]*logMeta{}
	for _, l := range logs {
		metaOf[l.name] = l.meta
	}
	for i := range res.Faults {
		f := &res.Faults[i]
		var t time.Time
		if f.Time != nil {
			t = *f.Time
		}
		ix, checks := pickTrace(all, metaOf[f.Log], f.Rank, t)
		f.TracesChecked = checks
		if ix == nil {
			continue
		}
		f.Trace = ix.path
		usedBy[ix] = true
		if tf, ok := ix.match(f.Addr, f.Size); ok {
			f.StorageRef = ix.fromFault(tf)
			if f.Kernel == "" && !isRegion(tf) {
				f.Kernel = tf.Kernel
			}
			markUsed(used, ix, tf)
		} else if ref := ix.findStorage(f.Addr, f.Size); ref != nil {
			f.StorageRef = ref
		}
		f.fillFromRef()
	}
	// What the agent caught besides each log fault: shown with the first log fault of that process.
	shown := map[string]bool{}
	for i := range res.Faults {
		f := &res.Faults[i]
		if f.Trace == "" || shown[f.Trace] {
			continue
		}
		shown[f.Trace] = true
		for _, ix := range all {
			if ix.path != f.Trace {
				continue
			}
			var rest []trace.Fault
			for k, tf := range ix.faults {
				if !used[ix][k] {
					rest = append(rest, tf)
				}
			}
			for _, tf := range rest {
				markUsed(used, ix, tf)
			}
			if len(rest) > maxAgentFaults {
				f.Note = fmt.Sprintf("and %d more: the trace has them all",
					len(rest)-maxAgentFaults)
				rest = rest[:maxAgentFaults]
			}
			f.AgentFaults = rest
		}
	}
	// Faults only the agent saw, in processes whose logs show no fault (caught at launch, or logs lost).
	for _, ix := range all {
		if usedBy[ix] {
			continue
		}
		rank, logName, note := ix.Header.Rank, ix.path, ""
		if l, ok := logOf(ix, logs); ok {
			if l.rank >= 0 {
				rank = l.rank
			}
			logName = l.name
		} else if len(logs) > 0 {
			note = fmt.Sprintf("no log of this process (pid %d on %s) is among the logs", ix.Header.PID, orUnknown(ix.Header.Host))
		}
		for k, tf := range ix.faults {
			if used[ix][k] {
				continue
			}
			// The index as recorded, -1 (unknown) included, as doctor has always shown the agent's records.
			addr, size, index := uint64(tf.Addr), uint64(tf.Size), tf.TensorIndex
			f := Fault{Rank: rank, Source: "trace", Log: logName, Kernel: tf.Kernel, Addr: &addr, Size: &size,
				TensorIndex: &index, StorageRef: ix.fromFault(tf), Trace: ix.path, Note: note,
				Detected: tf.Detected}
			if !isRegion(tf) {
				f.Op = acllog.KernelOp(strings.TrimPrefix(tf.Kernel, "aclnn"))
			}
			f.fillFromRef()
			res.Faults = append(res.Faults, f)
		}
	}
}

// logOf finds the log a trace's process wrote, by pid and time (no fault time: the log's last line).
func logOf(ix *traceIndex, logs []logInfo) (logInfo, bool) {
	for _, l := range logs {
		if l.meta == nil || len(l.meta.pids) == 0 {
			continue
		}
		if ix.fit(l.meta, l.rank, l.meta.last) == "" {
			return l, true
		}
	}
	return logInfo{}, false
}

// isRegion tells a fault the agent caught at a swap region's entry (an input with no device memory)
// from one in a kernel.
func isRegion(tf trace.Fault) bool {
	return tf.Detected == "region_enter" || strings.HasPrefix(tf.Kernel, "region_enter(")
}

func markUsed(used map[*traceIndex]map[int]bool, ix *traceIndex, tf trace.Fault) {
	if used[ix] == nil {
		used[ix] = map[int]bool{}
	}
	for k := range ix.faults {
		if !used[ix][k] && sameFault(ix.faults[k], tf) {
			used[ix][k] = true
			return
		}
	}
}

func sameFault(a, b trace.Fault) bool {
	return a.Kernel == b.Kernel && a.Addr == b.Addr && a.Size == b.Size && a.Storage.Addr() == b.Storage.Addr() &&
		a.Handle == b.Handle && a.Detected == b.Detected && a.Code == b.Code
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
