// load.go owns which trace files a path names for the commands that read them (report, run's summary,
// replay), and reading each by package trace's read rule (trace.Read).
package report

import (
	"fmt"
	"os"
	"path/filepath"

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
	s := Summarize(file, t.Header, t.Events, t.Truncated)
	s.Gaps, s.Repairs, s.Warnings = t.Gaps, t.Repairs, t.Warnings()
	if file != Stdin {
		s.TraceBytes = uint64(t.Bytes)
	}
	s.Segments, s.FirstSegment, s.FromNS = len(t.Segments), t.Header.Segment, t.From
	return s, nil
}

// ReadTrace reads one trace file ("-": standard input) by the read rule every command follows
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
