// summary_test.go checks Summarize, Load and the text and JSON renderers over synthetic traces
// written with the real trace writer.
package report

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/trace"
)

// Function ids of the synthetic traces.
const (
	fnMalloc = iota + 1
	fnFree
	fnMallocHost
	fnLaunch
	fnMemcpyAsync
)

func header() trace.Header {
	return trace.Header{Version: trace.Version, PID: 4242, Host: "node1", Rank: 3, StartUnix: 1_700_000_000_000_000_000,
		Argv: []string{"python", "train.py", "--layers", "2"}}
}

func fn(id uint16, name string) trace.Event {
	return trace.Event{Kind: trace.KindFunc, Fn: id, Text: name}
}

func call(ts int64, id uint16, ret int64, args ...uint64) trace.Event {
	ev := trace.Event{Kind: trace.KindCall, TS: ts, TID: 7, Fn: id, Ret: ret}
	copy(ev.Args[:], args)
	return ev
}

func state(ts, h int64, from, to, nbytes uint64) trace.Event {
	return trace.Event{Kind: trace.KindState, TS: ts, Handle: h, Args: [6]uint64{from, to, 0x1000, nbytes}}
}

func classify(ts int64, g uint32, h int64, reason, nbytes uint64) trace.Event {
	return trace.Event{Kind: trace.KindClassify, TS: ts, Group: g, Handle: h, Args: [6]uint64{0x1000 * uint64(h), nbytes, reason, 1}}
}

const faultJSON = `{"kernel":"aclnnMul","addr":"0x0","size":4096,"storage":"0x7f00","released_by":"layer.0","owner":"input of layer.1"}`

// workload is a small swap story: allocations, one group offloaded and restored, one external storage
// kept, one fault.
func workload() []trace.Event {
	return []trace.Event{
		{Kind: trace.KindMeta, Text: "policy=safe\nprefetch=1"},
		fn(fnMalloc, "aclrtMalloc"), fn(fnFree, "aclrtFree"), fn(fnMallocHost, "aclrtMallocHost"),
		fn(fnLaunch, "aclnnMul"), fn(fnMemcpyAsync, "aclrtMemcpyAsync"),
		call(1000, fnMalloc, 0, 0xA000, 100, 0),
		call(2000, fnMalloc, 0, 0xB000, 200, 0),
		call(2500, fnMalloc, 507899, 0, 1<<40, 0), // failed: not allocated
		call(3000, fnFree, 0, 0xA000),
		call(3500, fnFree, 0, 0xDEAD), // never allocated: ignored
		call(4000, fnMalloc, 0, 0xC000, 50, 0),
		call(4100, fnMallocHost, 0, 0x5000, 64),
		{Kind: trace.KindGroup, Group: 1, Text: "layer.0"},
		{Kind: trace.KindGroup, Group: 2, Text: "layer.1"},
		{Kind: trace.KindRegionEnter, TS: 5000, Group: 1, Ptrs: []uint64{0xB000}, Args: [6]uint64{1}},
		{Kind: trace.KindSave, TS: 5100, Group: 1, Handle: 1, Args: [6]uint64{0xC000, 50, 0, 1}},
		{Kind: trace.KindSave, TS: 5200, Group: 1, Handle: 2, Args: [6]uint64{0xB000, 200, 0, 1}},
		{Kind: trace.KindRegionExit, TS: 5300, Group: 1},
		classify(5300, 1, 1, 0, 50),
		classify(5300, 1, 2, 1, 200),
		call(5400, fnLaunch, 0, 0, 0, 0x99, 0x51, 3),
		call(5500, fnMemcpyAsync, 0, 0x5000, 0xC000, 50, 2, 50, 0x52),
		state(5400, 1, 0, 1, 50),
		state(6000, 1, 1, 2, 50),
		{Kind: trace.KindBackwardEnter, TS: 7000, Group: 1},
		state(7100, 1, 2, 3, 50),
		state(7500, 1, 3, 0, 50),
		{Kind: trace.KindUnpack, TS: 7600, Handle: 1, Ret: 0xC000},
		{Kind: trace.KindBackwardExit, TS: 7700, Group: 1},
		{Kind: trace.KindFault, TS: 8000, Text: faultJSON},
		{Kind: trace.KindLog, TS: 8100, Text: "bad SWAPAGENT_PREFETCH"},
		{Kind: trace.KindLost, TS: 8200, Args: [6]uint64{5}},
	}
}

// writeTrace writes events to dir/name, flushing a batch after each index in flushAfter (and at the end).
func writeTrace(t testing.TB, dir, name string, h trace.Header, events []trace.Event, flushAfter ...int) string {
	t.Helper()
	return tracetest.Write(t, filepath.Join(dir, name), h, events, flushAfter...)
}

// headerLen is the size of the file header: the first batch frame starts there.
// headerLen is where the first block starts: after the header and its copy.
func headerLen(t testing.TB, h trace.Header) int {
	b := tracetest.Encode(t, h, nil)
	return 2 * (20 + int(binary.LittleEndian.Uint32(b[12:])))
}

func TestSummarize(t *testing.T) {
	s := Summarize("x.swtrace", header(), workload(), false)
	checks := []struct {
		name      string
		got, want any
	}{
		{"malloc calls", s.Calls["aclrtMalloc"], uint64(4)},
		{"free calls", s.Calls["aclrtFree"], uint64(2)},
		{"launches", s.Calls["aclnnMul"], uint64(1)},
		{"allocated bytes", s.Device.AllocatedBytes, uint64(350)},
		{"allocs", s.Device.Allocs, uint64(3)},
		{"frees matched", s.Device.Frees, uint64(1)},
		{"peak", s.Device.PeakBytes, uint64(300)},
		{"peak at", s.Device.PeakAtNS, int64(2000)},
		{"live at end", s.Device.LiveBytes, uint64(250)},
		{"series length", len(s.Device.Series), 4},
		{"host pinned", s.HostPinned.PeakBytes, uint64(64)},
		{"groups", strings.Join(s.ABI.Groups, ","), "layer.0,layer.1"},
		{"saves", s.ABI.Saves, uint64(2)},
		{"unpacks", s.ABI.Unpacks, uint64(1)},
		{"internal", s.ABI.KeepReasons["internal"], uint64(1)},
		{"input", s.ABI.KeepReasons["input"], uint64(1)},
		{"transition", s.ABI.Transitions["d2h->host"], uint64(1)},
		{"stats source", s.HasStats, false},
		{"offloaded storages", s.Stats.OffloadedStorages, uint64(1)},
		{"offloaded bytes", s.Stats.OffloadedBytes, uint64(50)},
		{"restored bytes", s.Stats.RestoredBytes, uint64(50)},
		{"kept input", s.Stats.Kept["input"], uint64(1)},
		{"kept has every reason", len(s.Stats.Kept), 7},
		{"released external", s.Stats.ReleasedExternal, uint64(0)},
		{"stats peak", s.Stats.PeakDeviceBytes, uint64(300)},
		{"faults", len(s.Stats.Faults), 1},
		{"fault kernel", s.Faults[0].Fields["kernel"], "aclnnMul"},
		{"lost", s.Lost, uint64(5)},
		{"meta", s.Meta["policy"], "safe"},
		{"logs", len(s.Logs), 1},
		{"end", s.EndNS, int64(8200)},
		{"spans", len(s.Spans), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(s.Spans) == 2 {
		off, res := s.Spans[0], s.Spans[1]
		if off.Group != "layer.0" || off.Restore || off.Start != 5400 || off.End != 6000 || off.Bytes != 50 {
			t.Errorf("offload span %+v", off)
		}
		if !res.Restore || res.Start != 7100 || res.End != 7500 {
			t.Errorf("restore span %+v", res)
		}
	}
}

func TestSummarizeReleasedExternalDerived(t *testing.T) {
	evs := []trace.Event{
		{Kind: trace.KindGroup, Group: 1, Text: "layer.0"},
		classify(10, 1, 9, 1, 1<<20), // an input...
		state(20, 9, 0, 1, 1<<20),
		state(30, 9, 1, 2, 1<<20), // ...released: the bug the safe policy prevents
	}
	s := Summarize("x", header(), evs, false)
	if s.Stats.ReleasedExternal != 1 {
		t.Errorf("released_external = %d, want 1", s.Stats.ReleasedExternal)
	}
}

func TestSummarizeStatsFromTrace(t *testing.T) {
	cases := []struct {
		name      string
		stats     string
		offloaded uint64
		peak      uint64
		kept      uint64 // kept["output"]
		faults    int
	}{
		{"full", `{"offloaded_storages":9,"offloaded_bytes":900,"restored_bytes":900,"kept":{"output":4},"released_external":0,"peak_device_bytes":12345,"faults":[]}`, 9, 12345, 4, 1},
		{"missing fields derived", `{"offloaded_storages":7}`, 7, 300, 0, 1},
		{"snapshot before the peak", `{"peak_device_bytes":0}`, 1, 300, 0, 1},
		{"more faults in stats", `{"faults":[{"kernel":"a"},{"kernel":"b"}]}`, 1, 300, 0, 2},
		{"not json", `garbage`, 1, 300, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := append(workload(), trace.Event{Kind: trace.KindStats, TS: 9000, Text: `{"offloaded_storages":1}`},
				trace.Event{Kind: trace.KindStats, TS: 9100, Text: c.stats})
			s := Summarize("x", header(), evs, false)
			if !s.HasStats {
				t.Fatal("stats not taken from the trace")
			}
			if s.Stats.OffloadedStorages != c.offloaded || s.Stats.PeakDeviceBytes != c.peak ||
				s.Stats.Kept["output"] != c.kept || len(s.Stats.Faults) != c.faults {
				t.Errorf("stats %+v", s.Stats)
			}
		})
	}
}

func TestSummarizeUnknownIDs(t *testing.T) {
	// Calls and groups the trace never named, reasons and states out of range: counted, no panic.
	evs := []trace.Event{
		call(1, 99, 0, 1, 2),
		classify(2, 42, 1, 200, 10),
		state(3, 1, 9, 8, 10),
		{Kind: trace.KindFault, Text: "not json"},
		{Kind: trace.Kind(200)},
	}
	s := Summarize("x", header(), evs, false)
	if s.Calls["fn#99"] != 1 || s.ABI.KeepReasons["#200"] != 1 || s.ABI.Transitions["#9->#8"] != 1 {
		t.Errorf("calls %v reasons %v transitions %v", s.Calls, s.ABI.KeepReasons, s.ABI.Transitions)
	}
	var out bytes.Buffer
	for _, render := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return WriteText(b, []*Summary{s}) },
		func(b *bytes.Buffer) error { return WriteJSON(b, []*Summary{s}) },
		func(b *bytes.Buffer) error { return WritePerfetto(b, []*Summary{s}) },
		func(b *bytes.Buffer) error { return WriteSVG(b, []*Summary{s}) },
	} {
		out.Reset()
		if err := render(&out); err != nil {
			t.Error(err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	h := header()
	evs := workload()
	good := writeTrace(t, dir, "good.swtrace", h, evs, 10)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	hl := headerLen(t, h)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	repaired := append([]byte(nil), data...)
	repaired[hl+20] ^= 0xFF                           // inside the first batch's payload: its parity puts it right
	corrupt := tracetest.BeyondRepair(t, data, hl+20) // and with its parity damaged too, it is lost
	absurd := tracetest.BeyondRepair(t, data, hl+20)
	binary.LittleEndian.PutUint32(absurd[hl+4:], 0xFFFFFFF0) // first batch claims ~4 GiB
	absurdHeader := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(absurdHeader[12:], 0xFFFFFFF0)
	binary.LittleEndian.PutUint32(absurdHeader[hl/2+12:], 0xFFFFFFF0) // and its copy's
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}

	onlyBatch := writeTrace(t, dir, "one.swtrace", h, evs)
	oneData, err := os.ReadFile(onlyBatch)
	if err != nil {
		t.Fatal(err)
	}
	oneData = tracetest.BeyondRepair(t, oneData, hl+20)

	repairedPath := filepath.Join(dir, "repaired.swtrace")
	// The last data block (its batch's 22 events; the close mark and its parity after it): a killed process
	// cut it.
	lastBatch := bytes.LastIndex(data[:bytes.LastIndex(data, []byte("SWZB"))], []byte("SWZB"))
	cases := []struct {
		name      string
		path      string
		wantErr   string // substring of the one-line error; "" for success
		truncated bool
		events    int
		gaps      int
	}{
		{"good", good, "", false, len(evs), 0},
		{"truncated after a good batch", write("killed.swtrace", data[:lastBatch+30]), "", true, 11, 0},
		{"truncated in first batch", write("early.swtrace", data[:hl+10]), "first batch", false, 0, 0},
		{"corrupt first batch: repaired", write("repaired.swtrace", repaired), "", false, len(evs), 0},
		{"corrupt first batch: salvaged", write("corrupt.swtrace", corrupt), "", false, len(evs) - 11, 1},
		{"absurd batch length: salvaged", write("absurd.swtrace", absurd), "", false, len(evs) - 11, 1},
		{"corrupt only batch", write("corrupt1.swtrace", oneData), "no event could be read", false, 0, 0},
		{"absurd header length", write("absurdh.swtrace", absurdHeader), "not a readable trace", false, 0, 0},
		{"empty file", write("empty.swtrace", nil), "empty", false, 0, 0},
		{"header only", write("hdr.swtrace", data[:hl]), "", false, 0, 0},
		{"not a trace", write("notes.txt", []byte("hello, world\n")), "not a readable trace", false, 0, 0},
		{"missing", filepath.Join(dir, "nope.swtrace"), "no such file", false, 0, 0},
		{"dir without traces", emptyDir, "no trace files", false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sums, _, _, err := Load(c.path, nil)
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %q", c.wantErr)
				}
				msg := err.Error()
				if !strings.Contains(msg, c.wantErr) || !strings.Contains(msg, c.path) || strings.Contains(msg, "\n") {
					t.Errorf("error %q: want one line naming %s and saying %q", msg, c.path, c.wantErr)
				}
				if strings.Count(msg, c.path) != 1 {
					t.Errorf("error %q names the file more than once", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := sums[0]
			if s.Truncated != c.truncated || s.NumEvents != c.events || len(s.Gaps) != c.gaps {
				t.Errorf("truncated %v events %d gaps %d, want %v %d %d", s.Truncated, s.NumEvents, len(s.Gaps),
					c.truncated, c.events, c.gaps)
			}
			if c.gaps > 0 && (len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "batch 0 at offset")) {
				t.Errorf("warnings %q", s.Warnings)
			}
			if want := c.path == repairedPath; want != (len(s.Repairs) == 1) || want && (len(s.Warnings) != 1 ||
				!strings.Contains(s.Warnings[0], "repaired from its group's parity: its 11 events read, nothing lost")) {
				t.Errorf("repairs %v, warnings %q", s.Repairs, s.Warnings)
			}
			if c.truncated && (len(s.Warnings) != 1 ||
				!strings.Contains(s.Warnings[0], "trace not closed (process killed?): events after #11 ")) {
				t.Errorf("warnings %q", s.Warnings)
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeTrace(t, dir, "b.2.swtrace", header(), workload())
	writeTrace(t, dir, "a.1.swtrace", header(), workload()[:3])
	if err := os.WriteFile(filepath.Join(dir, "a.1.log"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.3.swtrace"), []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	sums, skipped, found, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || filepath.Base(sums[0].Path) != "a.1.swtrace" || found != "" {
		t.Fatalf("got %d summaries, found %q", len(sums), found)
	}
	// One bad file is named and skipped.
	if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "c.3.swtrace: not a readable trace") {
		t.Errorf("skipped %v", skipped)
	}
	// An msrun log directory: its traces are in swapagent-out.
	logs := t.TempDir()
	if err := os.WriteFile(filepath.Join(logs, "worker_0.log"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(logs, OutDir)
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTrace(t, out, "node1.rank0.9.swtrace", header(), workload())
	sums, _, found, err = Load(logs, nil)
	if err != nil || len(sums) != 1 || found != out {
		t.Errorf("msrun log dir: %d summaries, found %q, %v", len(sums), found, err)
	}
	// Only bad files: an error; one bad file is that file's error alone (one line, as when it is named).
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.1.swtrace"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, skipped, _, err := Load(bad, nil); err == nil || len(skipped) != 0 ||
		!strings.Contains(err.Error(), "x.1.swtrace: not a readable trace") {
		t.Errorf("directory of one bad file: %v, skipped %v", err, skipped)
	}
	if err := os.WriteFile(filepath.Join(bad, "x.2.swtrace"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, skipped, _, err := Load(bad, nil); err == nil || len(skipped) != 2 ||
		!strings.Contains(err.Error(), "none of the 2 trace files could be read") {
		t.Errorf("directory of bad files: %v, skipped %v", err, skipped)
	}
}

func TestWriteJSON(t *testing.T) {
	sums := []*Summary{
		Summarize("a.swtrace", header(), workload(), false),
		Summarize("b.swtrace", header(), append(workload(), trace.Event{Kind: trace.KindStats,
			Text: `{"offloaded_storages":3,"extra":true}`}), true),
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, sums); err != nil {
		t.Fatal(err)
	}
	// Written a process at a time, it is what encoding/json writes of the whole report; with none too.
	for _, ss := range [][]*Summary{sums, sums[:1], nil} {
		var got, want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(JSON(ss)); err != nil || WriteJSON(&got, ss) != nil || got.String() != want.String() {
			t.Errorf("%d processes: written\n%s\nencoding/json writes\n%s", len(ss), got.String(), want.String())
		}
	}
	var doc struct {
		Processes []map[string]json.RawMessage `json:"processes"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if len(doc.Processes) != 2 {
		t.Fatalf("%d processes", len(doc.Processes))
	}
	for _, p := range doc.Processes {
		for _, k := range []string{"offloaded_storages", "offloaded_bytes", "restored_bytes", "kept",
			"released_external", "peak_device_bytes", "faults", "pid", "rank", "host", "argv", "calls",
			"device", "abi", "stats_source", "truncated"} {
			if _, ok := p[k]; !ok {
				t.Errorf("field %s missing", k)
			}
		}
		var kept map[string]uint64
		if err := json.Unmarshal(p["kept"], &kept); err != nil || len(kept) != 7 {
			t.Errorf("kept = %s", p["kept"])
		}
		var faults []map[string]any
		if err := json.Unmarshal(p["faults"], &faults); err != nil || len(faults) != 1 || faults[0]["released_by"] != "layer.0" {
			t.Errorf("faults = %s", p["faults"])
		}
	}
	if string(doc.Processes[0]["stats_source"]) != `"derived"` || string(doc.Processes[1]["stats_source"]) != `"trace"` ||
		string(doc.Processes[1]["offloaded_storages"]) != "3" || string(doc.Processes[1]["truncated"]) != "true" {
		t.Errorf("second process: %s %s", doc.Processes[1]["stats_source"], doc.Processes[1]["offloaded_storages"])
	}
}

func TestWriteText(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteText(&buf, []*Summary{Summarize("a.swtrace", header(), workload(), false)}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"process 4242 rank 3 on node1: python train.py --layers 2",
		"350 B allocated in 3 calls, peak 300 B",
		"1 storages offloaded (50 B)",
		"kept: input 1, output 0",
		"faults: 1",
		"kernel=aclnnMul addr=0x0 size=4096 storage=0x7f00 released_by=layer.0 owner=\"input of layer.1\"",
		"aclrtMalloc", "lost: 5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1 << 20, "1.0 MiB"}, {3 << 29, "1.5 GiB"}, {^uint64(0), "16384.0 PiB"}} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
