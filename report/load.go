// load.go owns which trace files a path names for the commands that read them (report, run's summary,
// replay), and reading each by package trace's read rule (trace.Read).
package report

import (
	"fmt"
	"os"
	"path/filepath"

	"swapagent/timeline"
	"swapagent/trace"
)

// Stdin is the path that names standard input ("-", as Go tools and pprof read it).
const Stdin = "-"

// OutDir is the agent's default output directory name (SWAPAGENT_OUT=./swapagent-out), where an msrun
// job run as the README shows keeps its traces: LOG_DIR/swapagent-out.
const OutDir = "swapagent-out"

// Inputs resolves a path given on the command line to trace files: "-" is standard input; a file (or a
// pipe, as process substitution gives) is itself; a directory gives its *.swtrace files, sorted, or,
// when it has none, those of its swapagent-out subdirectory (an msrun log directory). found says where
// they were found when that is not path itself.
func Inputs(path string) (files []string, found string, err error) {
	if path == Stdin {
		return []string{Stdin}, "", nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, "", trace.PathError(path, err)
	}
	files, err = trace.FindTraces(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v", path, err)
	}
	if len(files) > 0 {
		return files, "", nil
	}
	out := filepath.Join(path, OutDir)
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		if more, err := trace.FindTraces(out); err == nil && len(more) > 0 {
			return more, out, nil
		}
	}
	return nil, "", fmt.Errorf("%s: no trace files (*%s), nor in %s/", path, trace.FileSuffix, OutDir)
}

// Load summarizes every trace under path (see Inputs), sorted by file name. A file named by path itself
// that cannot be read is an error; in a directory such a file is skipped (skipped holds one line for
// each, naming the file) and only a directory where no trace could be read is an error (that file's own
// error when it holds one trace file, else one line for the directory after the skipped). found is as
// Inputs says. keep is what the summaries keep beyond the figures (LoadFile).
func Load(path string, keep *Keep) (sums []*Summary, skipped []error, found string, err error) {
	files, found, err := Inputs(path)
	if err != nil {
		return nil, nil, "", err
	}
	named := path == Stdin
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		named = true
	}
	for _, f := range files {
		s, err := LoadFile(f, keep)
		if err != nil {
			if named {
				return nil, nil, "", err
			}
			skipped = append(skipped, err)
			continue
		}
		sums = append(sums, s)
	}
	if len(sums) == 0 {
		if len(skipped) == 1 { // one file, unreadable: its own line, as when it is named
			return nil, nil, found, skipped[0]
		}
		return nil, skipped, found, fmt.Errorf("%s: none of the %d trace files could be read", path, len(files))
	}
	return sums, skipped, found, nil
}

// Keep is what summaries keep beyond the figures text and JSON print, for the timeline formats: the memory
// curves and copy spans (SVG, Perfetto), and runtime-call events for Perfetto's tracks.
type Keep struct {
	// Calls is how many more runtime-call events the summaries may keep; Load takes from it trace by trace,
	// and a summary counts those it could not keep in CallsLeft. Perfetto shows MaxPerfettoEvents at most.
	Calls int
}

// LoadFile summarizes one trace file ("-": standard input) by package trace's read rule (trace.Scan:
// damaged batches skipped, a cut end kept, one-line errors naming the file), folding the events as they
// are read. With keep nil the summary keeps the figures text and JSON print, not the events nor what the
// fold kept per storage, so a report of many traces needs the memory of one fold, not of every event.
func LoadFile(file string, keep *Keep) (*Summary, error) {
	// The fold reads no header field: it is set once the reader has it. For figures only it retires each
	// handle into them once its group is done, so its memory does not grow with the trace's length.
	hf := &handleFigures{}
	var t *timeline.Timeline
	opt := timeline.Options{}
	if keep == nil {
		opt = timeline.Options{NoSeries: true, Retire: func(h *timeline.Handle) { hf.add(t, h) }}
	}
	t = timeline.New(trace.Header{}, opt)
	var events []trace.Event
	left := 0
	emit := func(ev *trace.Event) {
		t.Add(ev)
		switch {
		case keep == nil || ev.Kind != trace.KindCall:
		case keep.Calls > 0:
			events = append(events, *ev)
			keep.Calls--
		default:
			left++
		}
	}
	var f *trace.File
	var err error
	once := ReadOnce(file)
	if file == Stdin {
		f, err = trace.ScanReader("standard input", os.Stdin, emit)
	} else {
		f, err = trace.Scan(file, emit)
	}
	if err != nil {
		return nil, err
	}
	if !once && t.Foot.Pool.Followed() {
		// The pool model needs where each block was last used, which only the end of the trace says: it
		// follows the trace a second time with the first pass's schedule. (A pipe is read once: there the
		// model frees a block only where another is placed over it.)
		t.Foot.RefoldPool(t.Foot.Pool.Schedule())
		if _, err := trace.Scan(file, t.Foot.FollowPool); err != nil {
			return nil, err
		}
		t.Foot.EndPool()
	}
	t.Header = f.Header
	s := summarize(file, t, hf, events, f.Truncated)
	s.Gaps, s.Repairs, s.Joined, s.Warnings, s.Damaged = f.Gaps, f.Repairs, f.Joined, f.Warnings(), f.Damaged()
	s.Indexed, s.Closed, s.End = f.Indexed, f.Finished(), f.End
	if file != Stdin {
		s.TraceBytes = uint64(f.Bytes)
	}
	s.Segments, s.FirstSegment, s.FromNS = len(f.Segments), f.Header.Segment, f.From
	if f.Header.Segment > 0 && s.Mem.Partial == "" && wholeSteps(t.Steps, f.From) == 0 {
		// The oldest segments were dropped: the peak the kept window shows is not the run's (its allocations
		// before the window are known only as the snapshot's live set), so without a whole step in it no
		// saving may be read from it.
		s.Mem.Withhold(PartialWindow)
	}
	s.CallsLeft = left
	if keep == nil {
		t.Forget()
		s.Spans = nil
	}
	return s, nil
}

// ReadOnce says whether file can be read only once: standard input, or a pipe named by its path (process
// substitution's /dev/fd/N). A reader that reads a file twice reads these once; a second read would find
// the pipe drained.
func ReadOnce(file string) bool {
	if file == Stdin {
		return true
	}
	fi, err := os.Stat(file)
	return err == nil && !fi.Mode().IsRegular()
}

// ReadTrace reads one trace file ("-": standard input) whole, by the read rule every command follows
// (trace.Read: damaged batches skipped, a cut end kept, one-line errors naming the file).
func ReadTrace(file string) (*trace.File, error) {
	if file == Stdin {
		return trace.Read("standard input", os.Stdin)
	}
	return trace.Load(file)
}

func displayPath(p string) string {
	if p == Stdin {
		return "standard input"
	}
	return p
}

// wholeSteps counts the whole steps a trace shows from TS from on: the stretches between two step starts.
func wholeSteps(steps []int64, from int64) int {
	n := 0
	for _, st := range steps {
		if st >= from {
			n++
		}
	}
	return max(n-1, 0)
}

// DropCopies leaves out a summary of a process already summarized (the same host, pid and start time: a
// copy of its trace under another name, or a file named twice), keeping the first; it returns one line
// for each it left out. Read twice, a process would count twice in every figure.
func DropCopies(sums []*Summary) (kept []*Summary, dropped []string) {
	type process struct {
		host    string
		pid     int
		start   int64
		segment int // the first segment read: another is a later window of the same run, not a copy
	}
	seen := map[process]string{}
	for _, s := range sums {
		k := process{s.Header.Host, s.Header.PID, s.Header.StartUnix, s.FirstSegment}
		if first, ok := seen[k]; ok && s.Path != Stdin {
			dropped = append(dropped, fmt.Sprintf("%s: the trace of process %d on %s, read already from %s: a copy, "+
				"left out", s.Path, s.Header.PID, s.Header.Host, first))
			continue
		}
		seen[k] = s.Path
		kept = append(kept, s)
	}
	return kept, dropped
}
