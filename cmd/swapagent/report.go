// report.go owns `swapagent report`: load traces through package report, pick a renderer, write it.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"swapagent/internal/cli"
	"swapagent/report"
)

var reportCmd = cli.Command{
	Name:     "report",
	Synopsis: "TRACE|DIR|- [TRACE|DIR|-...] [--format text|json|perfetto|svg] [--baseline TRACE|DIR] [-o FILE]",
	About: `Summarises traces, or renders them as JSON, a Perfetto timeline or an SVG chart. A directory gives
its *.swtrace files (an msrun log directory: those in its swapagent-out); - reads one trace from
standard input. Damaged batches are skipped and named; a bad file in a directory is named and skipped.

--baseline compares measured peaks instead: each process of the traces given is matched with the process
of the baseline (the same job under --policy off, say) that ran the same command with the same rank, and
the report gives both peaks and the saving measured between them (text or json).

Exit: 0 written; 1 the output could not be written; 2 bad usage, or nothing readable;
3 written, but an input was left out or damaged (a bad file in a directory, events lost in damaged
batches, or damaged blocks repaired from parity);
4 (--baseline) written, but a run faulted before a whole step, so no saving is claimed for it.`,
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
	baseline := fs.String("baseline", "", "compare with the baseline run's traces in `PATH` (a trace or a directory): measured peaks and saving")
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
	inputs := fs.Args()
	if fs.Changed("baseline") {
		inputs = append(inputs, *baseline)
	}
	if i := slices.Index(inputs, report.Stdin); i >= 0 && slices.Contains(inputs[i+1:], report.Stdin) {
		// Read once, standard input has nothing left for its second name.
		return c.UsageError(os.Stderr, "- (standard input) given twice: it can be read once")
	}
	// Text and JSON print figures: each trace is folded as it is read and only its figures kept. SVG draws
	// curves and spans too; Perfetto also runtime calls, as many as it shows.
	var keep *report.Keep
	switch *format {
	case "svg":
		keep = &report.Keep{}
	case "perfetto":
		keep = &report.Keep{Calls: report.MaxPerfettoEvents}
	}
	sums, code := loadSummaries(c, fs.Args(), keep)
	if code == exitUsage {
		return code
	}
	if fs.Changed("baseline") {
		if *format != "text" && *format != "json" {
			return c.UsageError(os.Stderr, "--baseline gives text or json, not %s", *format)
		}
		base, bcode := loadSummaries(c, []string{*baseline}, nil)
		if bcode == exitUsage {
			return bcode
		}
		cmp := report.Compare(base, sums)
		render = func(w io.Writer, _ []*report.Summary) error {
			if *format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(cmp)
			}
			return report.WriteBaselineText(w, cmp)
		}
		code = max(code, bcode)
		if cmp.Refused() && code == exitOK {
			code = exitNoClaim
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

// loadSummaries loads every path's traces, naming what was skipped; the code is exitUsage when a path
// could not be read at all, exitPartial when some input was left out.
func loadSummaries(c cli.Command, paths []string, keep *report.Keep) ([]*report.Summary, int) {
	var sums []*report.Summary
	code := exitOK
	for _, p := range paths {
		s, skipped, found, err := report.Load(p, keep)
		for _, e := range skipped {
			c.Errorf(os.Stderr, "skipped %v", e)
			code = exitPartial
		}
		if err != nil {
			c.Errorf(os.Stderr, "%v", err)
			return nil, exitUsage
		}
		if found != "" {
			c.Errorf(os.Stderr, "note: %s has no traces; reading those in %s", p, found)
		}
		sums = append(sums, s...)
	}
	sums, copies := report.DropCopies(sums)
	for _, d := range copies {
		c.Errorf(os.Stderr, "skipped %s", d)
		code = exitPartial
	}
	for _, s := range sums {
		for _, n := range s.Warnings {
			c.Errorf(os.Stderr, "%s", n)
		}
		if s.Damaged {
			code = exitPartial
		}
	}
	return sums, code
}

// writeFileAtomic writes through a temporary file beside path and renames it, so a failed render never
// leaves half a report behind. A path that is not a regular file (a device such as /dev/null or
// /dev/stdout, a FIFO) is written in place: the rename would replace the device node with a file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("writing %s: %v", path, err)
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %v", path, err)
		}
		return nil
	}
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
