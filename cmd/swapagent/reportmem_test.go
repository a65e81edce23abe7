package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// report folds each trace as it reads it and keeps only the figures text and JSON print: 50 copies of a
// 20-step trace need little more memory than one (peak RSS, printed; `make bench-report` shows it). Before,
// it kept every event of every trace: 1.8 GB for the 50 copies.
func TestReportMemoryDoesNotGrowWithTraces(t *testing.T) {
	out := t.TempDir()
	r := swapagent(t, nil, "run", "--out", out, "--", testenv.Path(t, testenv.DecoderSim), "--steps", "20")
	files, err := trace.FindTraces(out)
	if r.Code != 0 || err != nil || len(files) != 1 {
		t.Fatalf("run: exit %d, traces %v (%v)", r.Code, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	one, many := t.TempDir(), t.TempDir()
	for i := range 50 {
		for _, d := range []string{one, many} {
			if d == one && i > 0 {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("h.%d%s", i, trace.FileSuffix)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cli := testenv.Path(t, testenv.CLI)
	peak := func(format, dir string) int64 { // KB
		cmd := exec.Command(cli, "report", "--format", format, "-o", os.DevNull, dir)
		cmd.Env = testenv.CleanEnv()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("report %s: %v\n%s", dir, err, b)
		}
		return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
	}
	size := int64(len(data)) >> 10
	for _, format := range []string{"text", "json"} {
		p1, p50 := peak(format, one), peak(format, many)
		fmt.Printf("report --format %s: peak RSS %d KB for one %d KB trace, %d KB for 50 copies (%d KB read)\n",
			format, p1, size, p50, 50*size)
		if p50-p1 > 50*size/2 {
			t.Errorf("%s: 49 more traces of %d KB took %d KB more memory: it grows with the traces read", format,
				size, p50-p1)
		}
	}
}
