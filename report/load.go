// load.go owns reading traces for the commands that read them (report, run's summary, replay): which
// files a path names, reading each through package trace with salvage, and one-line errors that name
// the file.
package report

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
		return nil, "", pathError(path, err)
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
// each, naming the file) and only a directory where no trace could be read is an error. found is as
// Inputs says.
func Load(path string) (sums []*Summary, skipped []error, found string, err error) {
	files, found, err := Inputs(path)
	if err != nil {
		return nil, nil, "", err
	}
	named := path == Stdin
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		named = true
	}
	for _, f := range files {
		s, err := LoadFile(f)
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
		return nil, skipped, found, fmt.Errorf("%s: none of the %d trace files could be read", path, len(files))
	}
	return sums, skipped, found, nil
}

// LoadFile summarizes one trace file ("-": standard input); see ReadTrace for what it tolerates.
func LoadFile(file string) (*Summary, error) {
	t, err := ReadTrace(file)
	if err != nil {
		return nil, err
	}
	s := Summarize(t.Path, t.Header, t.Events, t.Truncated)
	s.Gaps = t.Gaps
	return s, nil
}

// Trace is one trace as read: the events that could be decoded, the damaged stretches skipped, and
// whether it ends mid-batch.
type Trace struct {
	Path      string
	Header    trace.Header
	Events    []trace.Event
	Gaps      []trace.Gap // damaged batches skipped (trace.Reader.Resync)
	Truncated bool        // ends inside a batch: a killed process; Events is what was read
}

// ReadTrace reads one trace file ("-": standard input) through trace.Salvage. A damaged batch is
// skipped and recorded in Gaps; a trace that ends mid-batch after at least one event is what a killed
// process leaves and is returned with Truncated set. Everything else is an error naming the file: a
// missing file, a directory, an empty file, not a trace or a bad header, and a trace from which no event
// could be read.
func ReadTrace(file string) (*Trace, error) {
	var in io.Reader = os.Stdin
	name := file
	if file == Stdin {
		name = "standard input"
	} else {
		fi, err := os.Stat(file)
		switch {
		case err != nil:
			return nil, pathError(file, err)
		case fi.IsDir():
			return nil, fmt.Errorf("%s: is a directory", file)
		case fi.Mode().IsRegular() && fi.Size() == 0: // a pipe has no size: read it
			return nil, fmt.Errorf("%s: empty file, not a trace", file)
		}
		f, err := os.Open(file)
		if err != nil {
			return nil, pathError(file, err)
		}
		defer f.Close()
		in = f
	}
	h, events, gaps, err := salvage(in)
	why := ""
	if err != nil {
		why = strings.TrimPrefix(err.Error(), "trace: ")
	}
	t := &Trace{Path: file, Header: h, Events: events, Gaps: gaps}
	switch {
	case errors.Is(err, trace.ErrFormat):
		if strings.Contains(why, "empty file") {
			return nil, fmt.Errorf("%s: empty, not a trace", name)
		}
		return nil, fmt.Errorf("%s: not a readable trace (%s)", name, why)
	case err != nil && !errors.Is(err, trace.ErrTruncated):
		return nil, fmt.Errorf("%s: %s", name, why)
	case len(events) == 0 && len(gaps) > 0:
		return nil, fmt.Errorf("%s: corrupt trace, no event could be read (%s)", name, gaps[0])
	case errors.Is(err, trace.ErrTruncated) && len(events) == 0:
		return nil, fmt.Errorf("%s: trace ends inside its first batch, no events to report (%s)", name, why)
	}
	t.Truncated = err != nil
	return t, nil
}

// Notes are the lines a command prints on stderr about what it could not read of this trace: a cut
// end (a killed process) and every damaged stretch skipped.
func (s *Summary) Notes() []string {
	var out []string
	if n := s.TruncationNote(); n != "" {
		out = append(out, n)
	}
	for _, g := range s.Gaps {
		out = append(out, GapNote(s.Path, g))
	}
	return out
}

// GapNote is the line that says where a trace lost events, for every command that skips damage.
func GapNote(path string, g trace.Gap) string {
	return fmt.Sprintf("%s: corrupt %s", displayPath(path), g)
}

// TruncationNote is the line printed when a trace ends mid-batch, or "" when it does not.
func (s *Summary) TruncationNote() string {
	if !s.Truncated {
		return ""
	}
	return fmt.Sprintf("%s: trace ends mid-batch (process killed?): %d events read", displayPath(s.Path), len(s.Events))
}

func displayPath(p string) string {
	if p == Stdin {
		return "standard input"
	}
	return p
}

func pathError(path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is already named once
	}
	return fmt.Errorf("%s: %v", path, err)
}

// salvage is trace.Salvage with a guard: the reader is fuzzed and should never panic, but if it does the
// CLI still owes the user one line rather than a stack trace.
func salvage(in io.Reader) (h trace.Header, events []trace.Event, gaps []trace.Gap, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("trace reader failed: %v", r)
		}
	}()
	return trace.Salvage(in)
}
