package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// peakRSSEnv makes this test binary a measuring hop (TestMain).
const peakRSSEnv = "SWAPAGENT_TEST_PEAK_RSS"

// TestMain runs the tests; with peakRSSEnv set it runs the command its arguments name instead and prints
// the command's peak RSS and its own, in KB. Linux counts, in a child's peak, the memory of the parent it
// was started from (Go starts children sharing the parent's memory until they exec): a fresh process is
// small, so the command's figure is its own as long as it exceeds the hop's.
func TestMain(m *testing.M) {
	if os.Getenv(peakRSSEnv) != "1" {
		os.Exit(m.Run())
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Its own peak since it started (VmHWM: its rusage would count its parent's too).
	var own int64
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		if i := strings.Index(string(b), "VmHWM:"); i >= 0 {
			_, _ = fmt.Sscan(string(b[i+len("VmHWM:"):]), &own)
		}
	}
	fmt.Println(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, own)
	os.Exit(0)
}

// report folds each trace as it reads it and keeps only the figures text and JSON print, retiring each
// storage's record once its group is done: its memory grows neither with the number of traces (50 copies
// of a 20-step trace against one, asserted here) nor with their length (a 60-step trace against the 20-step
// one, printed: the difference is below the noise of the Go heap's growth; report's
// TestRetiringFoldHoldsOneStep asserts it). Peak RSS is printed by `make bench-report`.
// Before, report kept every event of every trace: 1.8 GB for the 50 copies.
func TestReportMemoryDoesNotGrowWithTraces(t *testing.T) {
	record := func(steps string) ([]byte, string) {
		out := t.TempDir()
		r := swapagent(t, nil, "run", "--out", out, "--", testenv.Path(t, testenv.DecoderSim), "--steps", steps)
		files, err := trace.FindTraces(out)
		if r.Code != 0 || err != nil || len(files) != 1 {
			t.Fatalf("run: exit %d, traces %v (%v)", r.Code, files, err)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		return data, files[0]
	}
	data, _ := record("20")
	long, longPath := record("60")
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
	peak := func(format, path string) int64 { // KB
		// Through a fresh copy of this test binary (see TestMain): a child of this process would have this
		// process's memory counted in its peak.
		cmd := exec.Command(os.Args[0], cli, "report", "--format", format, "-o", os.DevNull, path)
		cmd.Env = append(testenv.CleanEnv(), peakRSSEnv+"=1")
		b, err := cmd.Output()
		var kb, hop int64
		if _, serr := fmt.Sscan(string(b), &kb, &hop); err != nil || serr != nil {
			t.Fatalf("report %s: %v %v\n%s", path, err, serr, b)
		}
		if kb <= hop {
			t.Fatalf("report %s: peak %d KB, not above the measuring process's own %d KB", path, kb, hop)
		}
		return kb
	}
	size, longSize := int64(len(data))>>10, int64(len(long))>>10
	for _, format := range []string{"text", "json"} {
		p1, p50, pl := peak(format, one), peak(format, many), peak(format, longPath)
		fmt.Printf("report --format %s: peak RSS %d KB for one %d KB trace, %d KB for 50 copies (%d KB read), "+
			"%d KB for a 60-step trace of %d KB\n", format, p1, size, p50, 50*size, pl, longSize)
		if p50-p1 > 50*size/2 {
			t.Errorf("%s: 49 more traces of %d KB took %d KB more memory: it grows with the traces read", format,
				size, p50-p1)
		}
	}
}
