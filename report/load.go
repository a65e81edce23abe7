// load.go owns reading traces for the report: every trace under a path, through package trace, with
// one-line errors that name the file.
package report

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"swapagent/trace"
)

// Load summarizes every trace under path (a trace file or a directory of them), sorted by file name.
// A trace that ends mid-batch after at least one complete batch (a killed process) is summarized with
// Truncated set; any other problem is an error naming the file, and nothing is returned.
func Load(path string) ([]*Summary, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, pathError(path, err)
	}
	files, err := trace.FindTraces(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no trace files (*%s)", path, trace.FileSuffix)
	}
	out := make([]*Summary, 0, len(files))
	for _, f := range files {
		s, err := LoadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// LoadFile summarizes one trace file; see Load for which read errors are tolerated.
func LoadFile(file string) (*Summary, error) {
	if fi, err := os.Stat(file); err != nil {
		return nil, pathError(file, err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("%s: is a directory", file)
	} else if fi.Size() == 0 {
		return nil, fmt.Errorf("%s: empty file, not a trace", file)
	}
	h, events, err := readFile(file)
	why := ""
	if err != nil {
		// The reader already says where; keep the line to one mention of the file.
		why = strings.TrimPrefix(strings.TrimPrefix(err.Error(), file+": "), "trace: ")
	}
	switch {
	case err == nil:
		return Summarize(file, h, events, false), nil
	case errors.Is(err, trace.ErrTruncated) && len(events) > 0:
		return Summarize(file, h, events, true), nil
	case errors.Is(err, trace.ErrTruncated):
		return nil, fmt.Errorf("%s: trace ends inside its first batch, no events to report (%s)", file, why)
	case errors.Is(err, trace.ErrCorrupt):
		return nil, fmt.Errorf("%s: corrupt trace after %d events (%s)", file, len(events), why)
	case errors.Is(err, trace.ErrFormat):
		return nil, fmt.Errorf("%s: not a readable trace (%s)", file, why)
	default:
		return nil, fmt.Errorf("%s: %s", file, why)
	}
}

// TruncationNote is the line printed when a trace ends mid-batch, or "" when it does not.
func (s *Summary) TruncationNote() string {
	if !s.Truncated {
		return ""
	}
	return fmt.Sprintf("%s: trace ends mid-batch (process killed?): %d events read", s.Path, len(s.Events))
}

func pathError(path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is already named once
	}
	return fmt.Errorf("%s: %v", path, err)
}

// readFile is trace.ReadFile with a guard: the reader is fuzzed and should never panic, but if it does
// the CLI still owes the user one line rather than a stack trace.
func readFile(file string) (h trace.Header, events []trace.Event, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("trace reader failed: %v", r)
		}
	}()
	return trace.ReadFile(file)
}
