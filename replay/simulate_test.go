// simulate_test.go proves the simulation on synthetic traces: violations and their attribution, the
// null-address match, memory figures, exit codes and bad input.
package replay

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/offload"
	"swapagent/trace"
)

func TestOutputsOnlyReportsRoPE(t *testing.T) {
	p := decoderTrace(4, false).write(t, t.TempDir())
	code, out, errs := runMain(p, "--policy", "outputs-only")
	if code != ExitViolation {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	at := strings.Index(out, "violation 1:")
	if at < 0 {
		t.Fatalf("no violation 1 in the output:\n%s", out)
	}
	first := out[at:]
	first = first[:strings.Index(first+"\n\n", "\n\n")]
	for _, want := range []string{"(1048576 bytes) released by layer.0", "keyword input of layer.0..layer.3",
		"read by:   aclnnMul, tensor 0 of 3", "during region_exit(layer.1)"} {
		if !strings.Contains(first, want) {
			t.Errorf("first violation lacks %q:\n%s", want, first)
		}
	}
	h, evs, err := trace.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r := Simulate(h, evs, Options{Policy: offload.PolicyOutputsOnly})
	// cos and sin (read by later Muls) first, then the positional inputs nobody reads while released.
	if len(r.Violations) < 2 || r.Violations[0].FirstRead == nil || r.Violations[1].FirstRead == nil {
		t.Fatalf("violations: %+v", r.Violations)
	}
	if r.Violations[0].Base != cosAddr || r.Violations[1].Base != sinAddr {
		t.Errorf("order: %#x, %#x; want cos then sin", r.Violations[0].Base, r.Violations[1].Base)
	}
	for _, v := range r.Violations[2:] {
		if v.FirstRead != nil || !strings.HasPrefix(v.Owner, "positional input of") {
			t.Errorf("unexpected later violation %+v", v)
		}
	}
	if r.Stats.ReleasedExternal == 0 {
		t.Error("engine stats: released_external 0 under outputs-only")
	}
}

func TestSafeHasNoViolationsAndSaves(t *testing.T) {
	p := decoderTrace(4, false).write(t, t.TempDir())
	code, out, _ := runMain(p, "--policy", "safe")
	if code != ExitClean || !strings.Contains(out, "violations: 0") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	h, evs, _ := trace.ReadFile(p)
	r := Simulate(h, evs, Options{Policy: offload.PolicySafe})
	// Internal per layer: act 0, 1, 2 (128 KiB each); they leave at the next layer's exit and come back
	// in backward.
	if r.Released == 0 || r.BytesOut != r.Released*actSz || r.BytesIn != r.BytesOut {
		t.Errorf("released %d, out %d, in %d", r.Released, r.BytesOut, r.BytesIn)
	}
	if r.Stats.ReleasedExternal != 0 {
		t.Errorf("released_external %d under safe", r.Stats.ReleasedExternal)
	}
	off := Simulate(h, evs, Options{Policy: offload.PolicyOff})
	if off.Released != 0 || off.PeakSimulated != off.PeakRecorded {
		t.Errorf("off: released %d, peak %d vs recorded %d", off.Released, off.PeakSimulated, off.PeakRecorded)
	}
}

// TestMemoryModel: the peak is taken at allocations, minus what the simulation holds released then.
func TestMemoryModel(t *testing.T) {
	b := newBuilder("off")
	b.Malloc(chunk, 16<<20)
	b.ABI(trace.KindRegionEnter, "layer.0", 0, []uint64{chunk}, 1)
	b.Save("layer.0", chunk+0x100000, 4<<20, 0)
	b.ABI(trace.KindRegionExit, "layer.0", 0, []uint64{chunk + 0x800000})
	b.ABI(trace.KindRegionEnter, "layer.1", 0, []uint64{chunk + 0x800000}, 1)
	b.Save("layer.1", chunk+0x900000, 2<<20, 0)
	b.ABI(trace.KindRegionExit, "layer.1", 0, []uint64{chunk + 0xc00000}) // completes layer.0: 4 MiB released
	b.Malloc(chunk+(32<<20), 16<<20)                                      // peak point: 32 MiB live, 4 MiB released
	b.ABI(trace.KindBackwardEnter, "layer.1", 0, nil)
	b.ABI(trace.KindBackwardEnter, "layer.0", 0, nil)
	p := b.write(t, t.TempDir())
	h, evs, _ := trace.ReadFile(p)
	r := Simulate(h, evs, Options{Policy: offload.PolicySafe})
	if r.PeakRecorded != 32<<20 || r.PeakSimulated != 28<<20 || r.SavedVsRecord != 4<<20 {
		t.Errorf("peak recorded %d simulated %d saved %d", r.PeakRecorded, r.PeakSimulated, r.SavedVsRecord)
	}
	if r.BytesOut != 6<<20 || r.BytesIn != 6<<20 {
		t.Errorf("moved out %d in %d", r.BytesOut, r.BytesIn)
	}
}

// TestNullAddressMatch: a recording that released the RoPE storage itself shows address-0 tensors; they
// match the simulated release by extent.
func TestNullAddressMatch(t *testing.T) {
	p := decoderTrace(4, true).write(t, t.TempDir())
	h, evs, _ := trace.ReadFile(p)
	r := Simulate(h, evs, Options{Policy: offload.PolicyOutputsOnly})
	if len(r.Violations) == 0 || r.Violations[0].FirstRead == nil {
		t.Fatalf("no read violation: %+v", r.Violations)
	}
	v := r.Violations[0]
	// layer.1's own Mul reads cos at its recorded address before layer.1 exits, so the first read while
	// released is layer.2's Mul, recorded at address 0.
	if v.Size != ropeSz || v.FirstRead.Addr != 0 || v.FirstRead.Match != "null-extent" || v.FirstRead.Kernel != "aclnnMul" {
		t.Errorf("violation %+v read %+v", v, v.FirstRead)
	}
	safe := Simulate(h, evs, Options{Policy: offload.PolicySafe})
	if len(safe.Violations) != 0 || safe.Released == 0 {
		t.Errorf("safe: %d violations, %d released", len(safe.Violations), safe.Released)
	}
}

func TestNoSwapActivity(t *testing.T) {
	b := newBuilder("safe")
	b.Malloc(chunk, 1<<20)
	b.op("aclnnMul", [2]uint64{chunk, 4096}, [2]uint64{chunk, 4096}, [2]uint64{chunk + 4096, 4096})
	b.Free(chunk)
	code, out, errs := runMain(b.write(t, t.TempDir()), "--policy", "outputs-only")
	if code != ExitClean || !strings.Contains(out, "no swap activity recorded") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}

func TestJSON(t *testing.T) {
	p := decoderTrace(3, false).write(t, t.TempDir())
	code, out, _ := runMain(p, "--policy", "outputs-only", "--format", "json")
	if code != ExitViolation {
		t.Fatalf("exit %d", code)
	}
	var doc struct {
		Replays []struct {
			Policy     string `json:"policy"`
			Violations []struct {
				Size      uint64 `json:"size"`
				Owner     string `json:"owner"`
				FirstRead *struct {
					Kernel string `json:"kernel"`
				} `json:"first_read"`
			} `json:"violations"`
			Stats map[string]any `json:"stats"`
		} `json:"replays"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(doc.Replays) != 1 || doc.Replays[0].Policy != "outputs-only" || len(doc.Replays[0].Violations) == 0 {
		t.Fatalf("%+v", doc)
	}
	v := doc.Replays[0].Violations[0]
	if v.Size != ropeSz || v.FirstRead == nil || v.FirstRead.Kernel != "aclnnMul" || v.Owner != "keyword input of layer.0..layer.2" {
		t.Errorf("%+v", v)
	}
	if _, ok := doc.Replays[0].Stats["released_external"]; !ok {
		t.Error("stats JSON lacks released_external")
	}
}

func TestFlagsOverrideRecordedConfig(t *testing.T) {
	p := decoderTrace(3, false).write(t, t.TempDir())
	h, evs, _ := trace.ReadFile(p)
	r := Simulate(h, evs, Options{Policy: offload.PolicySafe})
	if r.MinBytes != 65536 || r.Prefetch != 1 {
		t.Errorf("as recorded: min %d prefetch %d", r.MinBytes, r.Prefetch)
	}
	// Everything at 128 KiB is small under a 1 MiB threshold: nothing internal moves.
	r = Simulate(h, evs, Options{Policy: offload.PolicySafe, MinBytes: 1 << 20, MinBytesSet: true, Prefetch: 0, PrefetchSet: true})
	if r.MinBytes != 1<<20 || r.Prefetch != 0 || r.Released != 0 {
		t.Errorf("override: min %d prefetch %d released %d", r.MinBytes, r.Prefetch, r.Released)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	good := decoderTrace(2, false).write(t, dir)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage"+trace.FileSuffix)
	if err := os.WriteFile(garbage, []byte("this is not a trace at all, not even close"), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(t.TempDir(), "corrupt"+trace.FileSuffix)
	// Inside the only batch, and its parity damaged too: nothing can be read.
	bad := tracetest.BeyondRepair(t, data, bytes.Index(data, []byte("SWZB"))+30)
	if err := os.WriteFile(corrupt, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	cases := []struct {
		name  string
		args  []string
		usage bool // bad usage: the error line, then the usage
	}{
		{"missing file", []string{filepath.Join(dir, "nope.swtrace")}, false},
		{"not a trace", []string{garbage}, false},
		{"corrupt only batch", []string{corrupt}, false},
		{"empty directory", []string{empty}, false},
		{"no trace argument", nil, true},
		{"two traces", []string{good, good}, true},
		{"bad policy", []string{good, "--policy", "yolo"}, true},
		{"policy in capitals", []string{good, "--policy", "SAFE"}, true}, // rejected, as the agent and run reject it
		{"bad format", []string{good, "--format", "xml"}, true},
		{"bad flag", []string{good, "--frobnicate"}, true},
		{"negative prefetch", []string{good, "--prefetch", "-1"}, true},
	}
	for _, c := range cases {
		code, out, errs := runMain(c.args...)
		if code != ExitBadInput || out != "" {
			t.Errorf("%s: exit %d, want 2\n%s%s", c.name, code, out, errs)
		}
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if !strings.HasPrefix(lines[0], "swapagent replay: ") || c.usage != (len(lines) == 3) ||
			c.usage && !strings.HasPrefix(lines[1], "Usage: swapagent replay ") || !c.usage && len(lines) != 1 {
			t.Errorf("%s: stderr %q", c.name, errs)
		}
	}
	code, out, errs := runMain("--help")
	if code != ExitClean || errs != "" || strings.Count(out, "Usage:") != 1 {
		t.Errorf("--help: exit %d stdout %q stderr %q", code, out, errs)
	}
}

// TestSalvageAndStdin: a damaged middle batch is skipped and named (exit 3), a bad file in a directory
// is named and skipped (exit 3), and - reads the trace from standard input.
func TestSalvageAndStdin(t *testing.T) {
	b := decoderTrace(3, false)
	var buf bytes.Buffer
	// Every batch its own compressed chunk: the damage below costs that batch alone.
	w, err := trace.NewWriterOptions(&buf, trace.Header{Version: trace.Version, PID: 4242, Host: "test", Rank: -1},
		trace.Options{ChunkBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	for i := range b.Events {
		if i%50 == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			starts = append(starts, buf.Len())
		}
		if err := w.Add(&b.Events[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if len(starts) < 4 {
		t.Fatalf("only %d batches", len(starts))
	}
	damaged := tracetest.BeyondRepair(t, data, starts[2]+40)
	dir := t.TempDir()
	p := filepath.Join(dir, "damaged"+trace.FileSuffix)
	if err := os.WriteFile(p, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runMain(p, "--policy", "safe")
	if code != ExitPartial || !strings.Contains(errs, "batch 2 at offset") || !strings.Contains(errs, "events (#") ||
		!strings.Contains(out, "storages released") {
		t.Errorf("damaged batch: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	// The same byte alone: the parity puts it right, and replay still says the file is damaged.
	repaired := bytes.Clone(data)
	repaired[starts[2]+40] ^= 0x20
	rp := filepath.Join(t.TempDir(), "repaired"+trace.FileSuffix)
	if err := os.WriteFile(rp, repaired, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runMain(rp, "--policy", "safe")
	if code != ExitPartial || !strings.Contains(errs, "repaired from its group's parity: its 50 events read, nothing lost") {
		t.Errorf("repaired block: exit %d, stderr %s", code, errs)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk"+trace.FileSuffix), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runMain(dir)
	if code != ExitPartial || !strings.Contains(errs, "skipped "+filepath.Join(dir, "junk"+trace.FileSuffix)) {
		t.Errorf("directory with a bad file: exit %d, stderr %s", code, errs)
	}

	// Standard input.
	old := os.Stdin
	defer func() { os.Stdin = old }()
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { wp.Write(data); wp.Close() }()
	os.Stdin = r
	code, out, errs = runMain("-", "--policy", "safe")
	if code != ExitClean || !strings.Contains(out, "replay -") || !strings.Contains(out, "storages released") {
		t.Errorf("stdin: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

// TestTruncatedTraceIsUsable: a trace cut inside a batch (killed process) replays what it has.
func TestTruncatedTraceIsUsable(t *testing.T) {
	b := decoderTrace(3, false)
	dir := t.TempDir()
	data := tracetest.Encode(t, tracetest.Header(), b.Events, len(b.Events)/2-1) // two batches
	p := filepath.Join(dir, "cut"+trace.FileSuffix)
	// Cut 10 bytes before the close mark: inside the last batch's block.
	if err := os.WriteFile(p, data[:bytes.LastIndex(data, []byte("SWZB"))-10], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runMain(p, "--policy", "outputs-only")
	if code != ExitViolation || !strings.Contains(out, "trace not closed (process killed?): events after #") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
}

// TestArbitraryEventsNeverPanic: a valid file can still hold nonsense (ABI calls out of order, unknown
// handles and functions, launches claiming more tensors than exist); the simulation reports, never panics.
func TestArbitraryEventsNeverPanic(t *testing.T) {
	base := decoderTrace(3, false).Events
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		evs := make([]trace.Event, 0, len(base))
		for i := 0; i < len(base); i++ {
			ev := base[rng.IntN(len(base))]
			switch rng.IntN(7) {
			case 4:
				ev.Args[4] = rng.Uint64() // a launch's tensor count
			case 0:
				ev.Kind = trace.Kind(rng.IntN(20))
			case 1:
				ev.Args[rng.IntN(6)] = rng.Uint64()
			case 2:
				ev.Handle = rng.Int64N(100) - 50
			case 3:
				ev.Fn = uint16(rng.IntN(40))
			}
			evs = append(evs, ev)
		}
		for _, p := range []offload.Policy{offload.PolicySafe, offload.PolicyOutputsOnly, offload.PolicyOff} {
			_ = Simulate(trace.Header{}, evs, Options{Policy: p})
		}
	}
}
