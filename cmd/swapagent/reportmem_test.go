package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// of a 20-step trace against one, asserted here) nor with their length (a 200-step trace against the 20-step
// one: what differs is when the Go heap's collector ran, the fold's live heap stays flat; report's
// TestRetiringFoldHoldsOneStep asserts it holds one step). replay and doctor read the same way (replay reads
// a trace twice, for its settings and then for the simulation; doctor keeps a trace's history only where a
// fault needs it): each of the three stays within 64 MB on the 200-step trace and on the 50 copies. Peak RSS is
// printed by `make bench-report`, with what reading adds to the command's own: report's peak on the trace's
// first 4 KiB (the program, the Go runtime, a decompressor) is subtracted. Before, report kept every event
// of every trace (1.8 GB for the 50 copies), and replay and doctor 710 and 788 MB on one 200-step trace.
func TestReportMemoryDoesNotGrowWithTraces(t *testing.T) {
	record := func(steps string) ([]byte, string) {
		out := t.TempDir()
		// A 200-step run takes a minute or more on a loaded machine: longer than swapagent's own deadline.
		r := testenv.Run(t, 5*time.Minute, testenv.CleanEnv(), testenv.Path(t, testenv.CLI), "run", "--out", out, "--",
			testenv.Path(t, testenv.DecoderSim), "--steps", steps)
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
	long, longPath := record("200")
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
	peak := func(args ...string) int64 { // KB
		cmd := exec.Command(hop, append([]string{cli}, args...)...)
		cmd.Env = testenv.CleanEnv()
		b, err := cmd.Output()
		var kb int64
		var code int
		// Exit 3 is a report written from a cut input (the first 4 KiB): measured like any other.
		// The hop's line comes last, after what the command printed.
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if _, serr := fmt.Sscan(lines[len(lines)-1], &kb, &code); err != nil || serr != nil || (code != 0 && code != exitPartial) {
			t.Fatalf("%v: %v %v, output %.300q", args, err, serr, lines[len(lines)-1])
		}
		return kb
	}
	const most = 64 << 10 // KB: 64 MB
	size, longSize := int64(len(data))>>10, int64(len(long))>>10
	for _, format := range []string{"text", "json"} {
		p0 := peak("report", "--format", format, "-o", out, start)
		p1 := peak("report", "--format", format, "-o", out, one)
		p50 := peak("report", "--format", format, "-o", out, many)
		pl := peak("report", "--format", format, "-o", out, longPath)
		fmt.Printf("report --format %s: peak RSS %d KB for a trace's first 4 KiB; %d KB (+%d) for one %d KB trace, "+
			"%d KB (+%d) for 50 copies (%d KB read), %d KB (+%d) for a 200-step trace of %d KB\n",
			format, p0, p1, p1-p0, size, p50, p50-p0, 50*size, pl, pl-p0, longSize)
		if p50-p1 > 50*size/2 {
			t.Errorf("%s: 49 more traces of %d KB took %d KB more memory: it grows with the traces read", format,
				size, p50-p1)
		}
		if p50 > most || pl > most {
			t.Errorf("report --format %s: %d KB on 50 traces, %d KB on a 200-step one: more than 64 MB", format, p50, pl)
		}
		if format != "text" {
			continue
		}
		// 100 MB of garbage after a whole header (and its copy): what a reader holds searching damage for a good
		// block is bounded by the longest block it accepts and a repair's look-ahead (docs/trace-format.md,
		// "Limits"), not by the garbage.
		hl := 2 * (20 + int(binary.LittleEndian.Uint32(data[12:])))
		junk := make([]byte, 100<<20)
		rng := rand.New(rand.NewPCG(7, 8))
		for i := 0; i < len(junk); i += 8 {
			binary.LittleEndian.PutUint64(junk[i:], rng.Uint64())
		}
		garbage := filepath.Join(t.TempDir(), "garbage"+trace.FileSuffix)
		if err := os.WriteFile(garbage, append(bytes.Clone(data[:hl]), junk...), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(hop, cli, "report", garbage)
		b, _ := cmd.Output()
		var pg int64
		var code int
		if _, err := fmt.Sscan(string(b), &pg, &code); err != nil || code != 2 {
			t.Fatalf("report of garbage: %v, output %q (want exit 2: no event)", err, b)
		}
		fmt.Printf("report of a header and 100 MB of garbage: peak RSS %d KB (+%d)\n", pg, pg-p0)
		if pg-p0 > 4*8<<10+4<<10 {
			t.Errorf("report of 100 MB of garbage: %d KB more than its own: beyond the bound", pg-p0)
		}
		for _, cmd := range []string{"replay", "doctor"} {
			c1 := peak(cmd, one)
			c50 := peak(cmd, many)
			cl := peak(cmd, filepath.Dir(longPath))
			fmt.Printf("%s: peak RSS %d KB for one %d KB trace, %d KB for 50 copies (%d KB read), %d KB for a 200-step "+
				"trace of %d KB; report: %d, %d and %d KB\n", cmd, c1, size, c50, 50*size, cl, longSize, p1, p50, pl)
			if c50 > most || cl > most {
				t.Errorf("%s: %d KB on 50 traces, %d KB on a 200-step one: more than 64 MB", cmd, c50, cl)
			}
		}
	}
}
