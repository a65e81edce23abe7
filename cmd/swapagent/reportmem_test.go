package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// peakHop is a small C program that runs the command its arguments name and prints the command's peak RSS
// in KB and its exit code. Linux starts a child's peak at the memory of the process it was made from, and
// Go makes children sharing its own until they exec: a child of this test would have the test's memory
// (12 MB and more) counted in its peak. The hop is a few hundred KB and forks.
const peakHop = `#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[1], argv + 1);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (pid < 0 || wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status)) return 1;
  printf("%ld %d\n", ru.ru_maxrss, WEXITSTATUS(status));
  return 0;
}
`

// buildPeakHop compiles peakHop into dir.
func buildPeakHop(t *testing.T, dir string) string {
	t.Helper()
	src, bin := filepath.Join(dir, "peak.c"), filepath.Join(dir, "peak")
	if err := os.WriteFile(src, []byte(peakHop), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("building the measuring hop: %v\n%s", err, out)
	}
	return bin
}

// report folds each trace as it reads it and keeps only the figures text and JSON print, retiring each
// storage's record once its group is done: its memory grows neither with the number of traces (50 copies
// of a 20-step trace against one, asserted here) nor with their length (a 60-step trace against the 20-step
// one, printed: what differs is when the Go heap's collector ran, the fold's live heap stays flat; report's
// TestRetiringFoldHoldsOneStep asserts it holds one step). Peak RSS is printed by `make bench-report`, with what reading
// adds to the command's own: its peak on the trace's first 4 KiB (the program, the Go runtime, a
// decompressor) is subtracted. Before, report kept every event of every trace: 1.8 GB for the 50 copies.
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
	start := filepath.Join(t.TempDir(), "start"+trace.FileSuffix) // the header and the first batch or so
	if err := os.WriteFile(start, data[:4<<10], 0o644); err != nil {
		t.Fatal(err)
	}
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
	cli, hop := testenv.Path(t, testenv.CLI), buildPeakHop(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "report")
	peak := func(format, path string) int64 { // KB
		cmd := exec.Command(hop, cli, "report", "--format", format, "-o", out, path)
		cmd.Env = testenv.CleanEnv()
		b, err := cmd.Output()
		var kb int64
		var code int
		// Exit 3 is a report written from a cut input (the first 4 KiB): measured like any other.
		if _, serr := fmt.Sscan(string(b), &kb, &code); err != nil || serr != nil || (code != 0 && code != exitPartial) {
			t.Fatalf("report %s: %v %v, output %q", path, err, serr, b)
		}
		return kb
	}
	size, longSize := int64(len(data))>>10, int64(len(long))>>10
	for _, format := range []string{"text", "json"} {
		p0, p1, p50, pl := peak(format, start), peak(format, one), peak(format, many), peak(format, longPath)
		fmt.Printf("report --format %s: peak RSS %d KB for a trace's first 4 KiB; %d KB (+%d) for one %d KB trace, "+
			"%d KB (+%d) for 50 copies (%d KB read), %d KB (+%d) for a 60-step trace of %d KB\n",
			format, p0, p1, p1-p0, size, p50, p50-p0, 50*size, pl, pl-p0, longSize)
		if p50-p1 > 50*size/2 {
			t.Errorf("%s: 49 more traces of %d KB took %d KB more memory: it grows with the traces read", format,
				size, p50-p1)
		}
	}
}
