// report.go owns `swapagent report`: load traces through package report, pick a renderer, write it.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"swapagent/internal/cli"
	"swapagent/report"
)

var reportCmd = cli.Command{
	Name:     "report",
	Synopsis: "TRACE|DIR|- [TRACE|DIR|-...] [--format text|json|perfetto|svg] [-o FILE]",
	About: `Summarises traces, or renders them as JSON, a Perfetto timeline or an SVG chart. A directory gives
its *.swtrace files (an msrun log directory: those in its swapagent-out); - reads one trace from
standard input. Damaged batches are skipped and named; a bad file in a directory is named and skipped.

Exit: 0 written; 1 the output could not be written; 2 bad usage, or nothing readable;
3 written, but some input was left out (a bad file in a directory, or events lost in damaged batches).`,
}

// renderers maps --format to its renderer; each is a small function in package report.
var renderers = map[string]func(io.Writer, []*report.Summary) error{
	"text":     report.WriteText,
	"json":     report.WriteJSON,
	"perfetto": report.WritePerfetto,
	"svg":      report.WriteSVG,
}

func cmdReport(args []string) int {
	c := reportCmd
	fs := c.Flags()
	format := fs.String("format", "text", "output `FORMAT`: text, json, perfetto (Chrome trace JSON) or svg")
	out := fs.StringP("output", "o", "", "write to `FILE` instead of standard output")
	if code, stop := c.Parse(fs, args, os.Stdout, os.Stderr); stop {
		return code
	}
	render, ok := renderers[*format]
	if !ok {
		return c.UsageError(os.Stderr, "unknown --format %q (want text, json, perfetto or svg)", *format)
	}
	if fs.NArg() == 0 {
		return c.UsageError(os.Stderr, "missing TRACE, DIR or - (standard input)")
	}
	var sums []*report.Summary
	code := exitOK
	for _, p := range fs.Args() {
		s, skipped, found, err := report.Load(p)
		for _, e := range skipped {
			c.Errorf(os.Stderr, "skipped %v", e)
			code = exitPartial
		}
		if err != nil {
			c.Errorf(os.Stderr, "%v", err)
			return exitUsage
		}
		if found != "" {
			c.Errorf(os.Stderr, "note: %s has no traces; reading those in %s", p, found)
		}
		sums = append(sums, s...)
	}
	for _, s := range sums {
		for _, n := range s.Warnings {
			c.Errorf(os.Stderr, "%s", n)
		}
		if len(s.Gaps) > 0 {
			code = exitPartial
		}
	}
	if *out == "" {
		if err := render(os.Stdout, sums); err != nil {
			c.Errorf(os.Stderr, "writing output: %v", err)
			return exitFail
		}
		return code
	}
	if err := writeFileAtomic(*out, func(w io.Writer) error { return render(w, sums) }); err != nil {
		c.Errorf(os.Stderr, "%v", err)
		return exitFail
	}
	return code
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
