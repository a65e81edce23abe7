// doctor_test.go proves `swapagent doctor` end to end: the msrun fixture, traces beside it, the exit
// codes and the one-line errors for bad input.
package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"swapagent/trace"
)

const ropeFixture = "testdata/msrun-rope"

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRopeFixtureText(t *testing.T) {
	code, out, errs := runMain(t, ropeFixture)
	if code != ExitDiagnosed {
		t.Fatalf("exit %d, want 1; stderr %q", code, errs)
	}
	for _, want := range []string{
		"2 fault(s) in 9 logs",
		"rank 0 (worker_0.log:", "rank 3 (worker_3.log:",
		"kernel Mul_ee98c6628030785f610b924ab1557b31_high_performance (op Mul)",
		"error code 0x800000", "The DDR address of the MTE instruction is out of range", "subErrType 4",
		"retCode 0x26", "507015", "RuntimeError: SyncStream failed for op aclnnMul",
		"index 0, addr 0x0 (null), size 1048576 bytes",
		"262144 float32 elements = 4096 x 64 float32: the size of one RoPE cos/sin table at seq 4096, rope dim 64",
		"swapagent run --policy safe", "input-protection fix",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
	for _, r := range []string{"rank 1 ", "rank 2 ", "rank 4 ", "rank 7 ", "unknown rank"} {
		if strings.Contains(out, r) {
			t.Errorf("output reports %q, which has no fault", r)
		}
	}
}

func TestRopeFixtureResult(t *testing.T) {
	res, err := Diagnose(ropeFixture)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Diagnosed() || len(res.Faults) != 2 {
		t.Fatalf("want 2 faults, got %d", len(res.Faults))
	}
	for i, rank := range []int{0, 3} {
		f := res.Faults[i]
		if f.Rank != rank || f.Op != "Mul" || f.Addr == nil || *f.Addr != 0 || f.Size == nil || *f.Size != 1048576 ||
			f.TensorIndex == nil || *f.TensorIndex != 0 || f.AddrKind != "null" {
			t.Errorf("fault %d: %+v", i, f)
		}
		if f.SizeInfo == nil || len(f.SizeInfo.Shapes) == 0 {
			t.Fatalf("fault %d: no size explanation", i)
		}
		top := f.SizeInfo.Shapes[0]
		if top.DType != "float32" || top.String() != "4096 x 64 float32" || !top.RoPE {
			t.Errorf("fault %d: top shape %v %+v", i, top, top)
		}
		if !strings.Contains(f.Causes[0], "RoPE") {
			t.Errorf("fault %d: first cause is not the RoPE one: %s", i, f.Causes[0])
		}
	}
	// JSON carries the stats-JSON fault keys.
	code, out, _ := runMain(t, "--format", "json", ropeFixture)
	if code != ExitDiagnosed {
		t.Fatalf("json exit %d", code)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("json: %v", err)
	}
	faults, _ := doc["faults"].([]any)
	if len(faults) != 2 {
		t.Fatalf("json faults: %v", doc["faults"])
	}
	f0 := faults[0].(map[string]any)
	for _, k := range []string{"kernel", "addr", "size", "storage", "released_by", "owner", "rank"} {
		if _, ok := f0[k]; !ok && k != "released_by" && k != "owner" {
			t.Errorf("json fault lacks %q", k)
		}
	}
	if f0["size"].(float64) != 1048576 || f0["addr"].(float64) != 0 {
		t.Errorf("json fault: %v", f0)
	}
}

func TestNoFaults(t *testing.T) {
	code, out, errs := runMain(t, "testdata/msrun-clean")
	if code != ExitClean || errs != "" {
		t.Fatalf("exit %d stderr %q", code, errs)
	}
	if strings.TrimSpace(out) != "no null-address or aicore faults found in 3 logs" {
		t.Fatalf("output %q", out)
	}
}

func TestBadInput(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "worker_0.log")
	if err := os.WriteFile(file, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"empty dir":   {empty},
		"missing dir": {filepath.Join(tmp, "nope")},
		"file":        {file},
		"no args":     {},
		"two args":    {empty, empty},
		"bad flag":    {"--bogus", empty},
		"bad format":  {"--format", "xml", ropeFixture},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runMain(t, args...)
			if code != ExitBadInput {
				t.Fatalf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "swapagent doctor: ") {
				t.Errorf("stderr not one line: %q", errs)
			}
		})
	}
}

func copyFixture(t *testing.T, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(ropeFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(ropeFixture, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNestedLayouts(t *testing.T) {
	for _, sub := range []string{"log", "output/msrun_log"} {
		t.Run(sub, func(t *testing.T) {
			root := t.TempDir()
			copyFixture(t, filepath.Join(root, sub))
			res, err := Diagnose(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Logs) != 9 || len(res.Faults) != 2 {
				t.Fatalf("logs %v faults %d", res.Logs, len(res.Faults))
			}
			if res.Faults[0].Log != filepath.Join(sub, "worker_0.log") {
				t.Errorf("log name %q", res.Faults[0].Log)
			}
		})
	}
}

// Addresses of the synthetic run below.
const (
	ropeCos   = 0x12c000000000
	ropeSin   = 0x12c000100000
	hiddenIn  = 0x12c010000000
	attnScore = 0x12c020000000
)

// writeRopeTrace writes the trace of rank 0 of the faulting run: layers 0..10 get the RoPE tables as
// keyword inputs; layer.0 saves and classifies the cos table as internal and releases it.
func writeRopeTrace(t *testing.T, path string, rank int, withFault bool) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewWriter(f, trace.Header{Version: 1, PID: 31200, Host: "node-1", Rank: rank, Argv: []string{"python", "run_mindformer.py"}})
	if err != nil {
		t.Fatal(err)
	}
	add := func(ev trace.Event) {
		if err := w.Add(&ev); err != nil {
			t.Fatal(err)
		}
	}
	for g := uint32(0); g < 12; g++ {
		add(trace.Event{Kind: trace.KindGroup, Group: g, Text: "layer." + strconv.Itoa(int(g))})
	}
	h := int64(1)
	for g := uint32(0); g <= 10; g++ {
		add(trace.Event{Kind: trace.KindRegionEnter, Group: g, Ptrs: []uint64{hiddenIn + uint64(g)<<20, ropeCos, ropeSin}, Args: [6]uint64{1}})
		// an internal activation of the same size as a RoPE table, released too (matching by size must
		// prefer the storage somebody else owns)
		add(trace.Event{Kind: trace.KindClassify, Group: g, Handle: h, Args: [6]uint64{attnScore + uint64(g)<<24, 1048576, 0, 1}})
		add(trace.Event{Kind: trace.KindState, Handle: h, Args: [6]uint64{0, 1, attnScore + uint64(g)<<24, 1048576}})
		add(trace.Event{Kind: trace.KindState, Handle: h, Args: [6]uint64{1, 2, 0, 1048576}})
		h++
		if g == 0 {
			add(trace.Event{Kind: trace.KindSave, Group: g, Handle: 100, Args: [6]uint64{ropeCos, 1048576, 0, 3}})
			add(trace.Event{Kind: trace.KindClassify, Group: g, Handle: 100, Args: [6]uint64{ropeCos, 1048576, 0, 3}})
			add(trace.Event{Kind: trace.KindState, Handle: 100, Args: [6]uint64{0, 1, ropeCos, 1048576}})
			add(trace.Event{Kind: trace.KindState, Handle: 100, Args: [6]uint64{1, 2, 0, 1048576}})
		}
		add(trace.Event{Kind: trace.KindRegionExit, Group: g, Ptrs: []uint64{hiddenIn + uint64(g+1)<<20}})
	}
	if withFault {
		add(trace.Event{Kind: trace.KindFault, Text: `{"kernel":"aclnnMul","addr":0,"size":1048576,"tensor_index":0,` +
			`"storage":"0x12c000000000","generation":3,"handle":100,"nbytes":1048576,"released_by":"layer.0",` +
			`"owner":"keyword input of layer.0..layer.10","keep_reason":"internal","detected":"sync","code":507015}`})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWithTrace(t *testing.T) {
	cases := []struct {
		name      string
		tracePath string // relative to the temp root; logs are in root/logs
		rank      int
		withFault bool
		matchedBy string
	}{
		{"beside logs, by size", "logs/node-1.rank0.31200.swtrace", 0, false, "size"},
		{"swapagent-out, fault event", "logs/swapagent-out/node-1.rank0.31200.swtrace", 0, true, "fault event"},
		{"parent swapagent-out", "swapagent-out/node-1.rank0.31200.swtrace", 0, false, "size"},
		{"only trace, rank unknown", "node-1.31200.swtrace", -1, true, "fault event"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			logs := filepath.Join(root, "logs")
			copyFixture(t, logs)
			writeRopeTrace(t, filepath.Join(root, tc.tracePath), tc.rank, tc.withFault)
			res, err := Diagnose(logs)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Traces) != 1 || len(res.Faults) != 2 {
				t.Fatalf("traces %v faults %d notes %v", res.Traces, len(res.Faults), res.Notes)
			}
			f := res.Faults[0]
			ref := f.StorageRef
			if ref == nil {
				t.Fatalf("rank 0 fault not matched to the trace: %+v", f)
			}
			if ref.Base != ropeCos || ref.Generation != 3 || ref.ReleasedBy != "layer.0" ||
				ref.Owner != "keyword input of layer.0..layer.10" || ref.MatchedBy != tc.matchedBy {
				t.Errorf("storage ref %+v", ref)
			}
			if f.Storage == nil || *f.Storage != ropeCos || f.ReleasedBy != "layer.0" || f.Owner != ref.Owner {
				t.Errorf("fault fields %+v", f)
			}
			if !strings.Contains(f.Causes[0], "released by layer.0") || !strings.Contains(f.Causes[0], "keyword input of layer.0..layer.10") {
				t.Errorf("first cause %q", f.Causes[0])
			}
			if tc.rank == 0 && res.Faults[1].StorageRef != nil {
				t.Errorf("rank 3 matched to rank 0's trace")
			}
			var out bytes.Buffer
			res.Render(&out)
			for _, want := range []string{"storage: 0x12c000000000 generation 3, 1048576 bytes", "released by layer.0",
				"owner:   keyword input of layer.0..layer.10"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q\n%s", want, out.String())
				}
			}
		})
	}
}

func TestTraceOnlyFault(t *testing.T) {
	root := t.TempDir()
	es, _ := os.ReadDir("testdata/msrun-clean")
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join("testdata/msrun-clean", e.Name()))
		if err := os.WriteFile(filepath.Join(root, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeRopeTrace(t, filepath.Join(root, "node-1.rank1.31200.swtrace"), 1, true)
	code, out, _ := runMain(t, root)
	if code != ExitDiagnosed || !strings.Contains(out, "rank 1 ") || !strings.Contains(out, "fault caught by the agent") ||
		!strings.Contains(out, "released by layer.0") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func TestCorruptTraceIsANote(t *testing.T) {
	root := t.TempDir()
	copyFixture(t, root)
	if err := os.WriteFile(filepath.Join(root, "junk.rank0.1.swtrace"), []byte("not a trace at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Diagnose(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Faults) != 2 || len(res.Traces) != 0 || len(res.Notes) != 1 {
		t.Fatalf("faults %d traces %v notes %v", len(res.Faults), res.Traces, res.Notes)
	}
}

func TestCompressNames(t *testing.T) {
	for in, want := range map[string]string{
		"layer.0,layer.1,layer.2,layer.3,layer.4,layer.5,layer.6,layer.7,layer.8,layer.9,layer.10": "layer.0..layer.10",
		"layer.3,layer.1":         "layer.1, layer.3",
		"layer.1,layer.2,mlp":     "mlp, layer.1, layer.2",
		"layer.4,layer.5,layer.6": "layer.4..layer.6",
	} {
		if got := compressNames(strings.Split(in, ",")); got != want {
			t.Errorf("compressNames(%s) = %q, want %q", in, got, want)
		}
	}
}
