package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"swapagent/internal/testenv"
	"swapagent/trace"
)

// A real trace (decoder-sim, 20 steps, under the agent) with one byte flipped at each of 10 offsets spread
// over it: each time report reads every event of the intact trace, says what it repaired, and exits 3.
func TestDamagedDecoderTrace(t *testing.T) {
	out := t.TempDir()
	r := swapagent(t, nil, "run", "--out", out, "--", testenv.Path(t, testenv.DecoderSim), "--steps", "20")
	if r.Code != 0 {
		t.Fatalf("run: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	files, err := trace.FindTraces(out)
	if err != nil || len(files) != 1 {
		t.Fatalf("traces %v (%v)", files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	type process struct {
		Events     int `json:"events"`
		LostRanges []struct {
			Events int `json:"events"`
		} `json:"lost_ranges"`
		RepairedBlocks []struct {
			Offset int64 `json:"offset"`
			Events int   `json:"events"`
		} `json:"repaired_blocks"`
	}
	report := func(path string) (process, result) {
		t.Helper()
		r := swapagent(t, nil, "report", path, "--format", "json")
		var doc struct{ Processes []process }
		if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil || len(doc.Processes) != 1 {
			t.Fatalf("report %s: exit %d, %v\n%s", path, r.Code, err, r.Stderr)
		}
		return doc.Processes[0], r
	}
	intact, r := report(files[0])
	if r.Code != 0 || intact.Events < 100000 {
		t.Fatalf("intact trace: exit %d, %d events", r.Code, intact.Events)
	}
	headerEnd := 20 + int(binary.LittleEndian.Uint32(data[12:]))
	dir := t.TempDir()
	for i := 1; i <= 10; i++ {
		off := headerEnd + (len(data)-headerEnd)*i/11
		bad := append([]byte(nil), data...)
		bad[off] ^= 0x10
		p := filepath.Join(dir, fmt.Sprintf("flip%d%s", i, trace.FileSuffix))
		if err := os.WriteFile(p, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		got, r := report(p)
		lost := intact.Events - got.Events
		counted := 0
		for _, g := range got.LostRanges {
			counted += g.Events
		}
		if r.Code != 3 || lost != 0 || counted != 0 || len(got.RepairedBlocks) != 1 ||
			!strings.Contains(r.Stderr, "nothing lost") {
			t.Errorf("flip at %d of %d: exit %d, %d events lost, %d counted, repairs %+v\n%s", off, len(data), r.Code,
				lost, counted, got.RepairedBlocks, r.Stderr)
		}
		text := swapagent(t, nil, "report", p)
		if !strings.Contains(text.Stdout, fmt.Sprintf("(%d events over", intact.Events)) ||
			!strings.Contains(text.Stdout, "1 damaged blocks repaired (nothing lost)") {
			t.Errorf("flip at %d: text\n%s", off, text.Stdout)
		}
	}
}
