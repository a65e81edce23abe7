// report.go owns `swapagent report`: load traces through package report, pick a renderer, write it.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"swapagent/report"
)

const reportSynopsis = "TRACE|DIR [TRACE|DIR...] [--format text|json|perfetto|svg] [-o FILE]"

// renderers maps --format to its renderer; each is a small function in package report.
var renderers = map[string]func(io.Writer, []*report.Summary) error{
	"text":     report.WriteText,
	"json":     report.WriteJSON,
	"perfetto": report.WritePerfetto,
	"svg":      report.WriteSVG,
}

func cmdReport(args []string) int {
	fs := newFlags("report")
	format := fs.String("format", "text", "output `FORMAT`: text, json, perfetto (Chrome trace JSON) or svg")
	out := fs.StringP("output", "o", "", "write to `FILE` instead of standard output")
	if code, stop := parseFlags(fs, args, reportSynopsis); stop {
		return code
	}
	render, ok := renderers[*format]
	if !ok {
		return usageError("report", "unknown format %q (want text, json, perfetto or svg)", *format)
	}
	if fs.NArg() == 0 {
		return usageError("report", "missing TRACE or DIR (usage: swapagent report %s)", reportSynopsis)
	}
	var sums []*report.Summary
	for _, p := range fs.Args() {
		s, err := report.Load(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "swapagent report: %v\n", err)
			return exitUsage
		}
		sums = append(sums, s...)
	}
	for _, s := range sums {
		if note := s.TruncationNote(); note != "" {
			fmt.Fprintf(os.Stderr, "swapagent report: %s\n", note)
		}
	}
	if *out == "" {
		if err := render(os.Stdout, sums); err != nil {
			fmt.Fprintf(os.Stderr, "swapagent report: writing output: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	if err := writeFileAtomic(*out, func(w io.Writer) error { return render(w, sums) }); err != nil {
		fmt.Fprintf(os.Stderr, "swapagent report: %v\n", err)
		return exitFail
	}
	return exitOK
}

// writeFileAtomic writes through a temporary file beside path and renames it, so a failed render never
// leaves half a report behind.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %v", path, err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %v", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %v", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %v", path, err)
	}
	return nil
}
