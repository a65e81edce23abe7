// helpers_test.go owns what every preload test needs: a clean environment with the agent preloaded,
// bounded subprocesses, the intercepted-name table parsed from shim/c/hooks.def, and trace counting.
package shimtest

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// intercepted returns the names hooks.def interposes (SA_HOOK, SA_CUSTOM, SA_LAUNCH).
func intercepted(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "shim/c/hooks.def"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^SA_(?:HOOK\([^,]+,|CUSTOM\([^,]+,|LAUNCH\()\s*(\w+)`)
	names := map[string]bool{}
	for _, m := range re.FindAllSubmatch(b, -1) {
		names[string(m[1])] = true
	}
	if len(names) < 20 {
		t.Fatalf("hooks.def: parsed only %d names", len(names))
	}
	return names
}

// isLaunch reports whether name is an aclnn launch the dlsym hook traces generically.
func isLaunch(name string) bool {
	return trace.IsLaunch(name)
}

// traceFile returns the one trace in dir.
func traceFile(t *testing.T, dir string) string {
	t.Helper()
	files, err := trace.FindTraces(dir)
	if err != nil || len(files) != 1 {
		t.Fatalf("want one trace in %s, got %v (%v)", dir, files, err)
	}
	return files[0]
}

// summary is what the tests read from a trace: KindCall counts by name and a few other facts.
type summary struct {
	calls  map[string]uint64
	kinds  map[trace.Kind]int
	lost   uint64
	logs   []string
	events int
	Err    error // what stopped the reader (nil at a clean end)
}

// readSummary streams a trace (it may hold tens of millions of events).
func readSummary(t *testing.T, path string) summary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	s := summary{calls: map[string]uint64{}, kinds: map[trace.Kind]int{}}
	names := map[uint16]string{}
	var ev trace.Event
	for {
		err := r.Next(&ev)
		if err == io.EOF {
			break
		}
		if err != nil {
			s.Err = err
			break
		}
		s.events++
		s.kinds[ev.Kind]++
		switch ev.Kind {
		case trace.KindFunc:
			names[ev.Fn] = ev.Text
		case trace.KindCall:
			name, ok := names[ev.Fn]
			if !ok {
				t.Fatalf("%s: call of fn %d before its KindFunc", path, ev.Fn)
			}
			s.calls[name]++
		case trace.KindLost:
			s.lost += ev.Args[0]
		case trace.KindLog:
			s.logs = append(s.logs, ev.Text)
		}
	}
	return s
}

// decoderCalls parses decoder-sim's `calls <fn> <n>` lines.
func decoderCalls(t *testing.T, stdout string) map[string]uint64 {
	t.Helper()
	calls := map[string]uint64{}
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "calls" {
			n, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", line)
			}
			calls[f[1]] = n
		}
	}
	if len(calls) == 0 {
		t.Fatalf("decoder-sim printed no calls lines:\n%s", stdout)
	}
	return calls
}

// agentLines returns the stderr lines the agent wrote: its own "swapagent:" lines and any zap line.
func agentLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "swapagent:") || strings.Contains(l, "\tWARN\t") || strings.Contains(l, "\tERROR\t") ||
			strings.Contains(l, "\tINFO\t") {
			out = append(out, l)
		}
	}
	return out
}
