// doctor_test.go proves `swapagent doctor` end to end: the msrun fixture, traces beside it, the exit
// codes and the one-line errors for bad input.
package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"swapagent/internal/tracetest"
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
		"2 faults under ", ", in 9 logs",
		"rank 0 (worker_0.log:", "rank 3 (worker_3.log:",
		"kernel Mul_ee98c6628030785f610b924ab1557b31_high_performance (op Mul)",
		"error code 0x800000", "The DDR address of the MTE instruction is out of range", "subErrType 4",
		"retCode 0x26", "507015", "RuntimeError: SyncStream failed for op aclnnMul",
		"index 0, addr 0x0 (null), size 1048576 bytes",
		"size:    1048576 bytes (262144 float32 or 524288 bf16/fp16 elements), guessed from the size as one of (most likely first):\n" +
			"             4096 x 64 float32: the size of one RoPE cos/sin table at seq 4096, rope dim 64\n",
		"swapagent run --policy safe", "issue #294 is open", "swap less in this job",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
	for _, r := range []string{"rank 1 ", "rank 2 ", "rank 4 ", "rank 7 ", "unknown rank",
		"in the report", "completed", "handle 0"} {
		if strings.Contains(out, r) {
			t.Errorf("output says %q", r)
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
	cases := map[string]struct {
		args  []string
		usage bool // bad usage: the error line, then the usage
	}{
		"empty dir":   {[]string{empty}, false},
		"missing dir": {[]string{filepath.Join(tmp, "nope")}, false},
		"file":        {[]string{file}, false},
		"no args":     {nil, true},
		"two args":    {[]string{empty, empty}, true},
		"bad flag":    {[]string{"--bogus", empty}, true},
		"bad format":  {[]string{"--format", "xml", ropeFixture}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runMain(t, c.args...)
			if code != ExitBadInput {
				t.Fatalf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
			if !strings.HasPrefix(errs, "swapagent doctor: ") || c.usage != (len(lines) == 3) || !c.usage && len(lines) != 1 ||
				c.usage && lines[1] != "Usage: swapagent doctor [--format text|json] DIR" {
				t.Errorf("stderr %q", errs)
			}
		})
	}
	code, out, errs := runMain(t, "--help")
	if code != ExitClean || errs != "" || strings.Count(out, "Usage:") != 1 {
		t.Errorf("--help: exit %d stdout %q stderr %q", code, out, errs)
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

// TestEveryLayout: every layout docs/doctor.md lists under "Where it looks" is found.
func TestEveryLayout(t *testing.T) {
	// msrun's file names in a directory below the one given.
	for _, sub := range []string{".", "log", "msrun_log", "output/msrun_log"} {
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
			if res.Faults[0].Log != filepath.Join(sub, "worker_0.log") || res.Faults[0].Rank != 0 || res.Faults[1].Rank != 3 {
				t.Errorf("fault 0 in %q rank %d", res.Faults[0].Log, res.Faults[0].Rank)
			}
		})
	}
	// Per-rank directories of *.log files, one, two and three levels down (MindFormers' output/log/rank_0).
	for _, sub := range []string{"rank_%d", "rank%d", "log/rank_%d", "output/log/rank_%d"} {
		t.Run(sub, func(t *testing.T) {
			root := t.TempDir()
			for _, r := range []int{0, 3} {
				d := filepath.Join(root, fmt.Sprintf(sub, r))
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(ropeFixture, fmt.Sprintf("worker_%d.log", r)))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "mindformer.log"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			res, err := Diagnose(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Logs) != 2 || len(res.Faults) != 2 || res.Faults[0].Rank != 0 || res.Faults[1].Rank != 3 {
				t.Fatalf("logs %v faults %+v", res.Logs, res.Faults)
			}
		})
	}
	// Any *.log in the directory, rank from the name.
	root := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(ropeFixture, "worker_3.log"))
	if err := os.WriteFile(filepath.Join(root, "job.rank3.log"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Diagnose(root)
	if err != nil || len(res.Faults) != 1 || res.Faults[0].Rank != 3 {
		t.Fatalf("plain *.log: %v %+v", err, res)
	}
}

// Addresses of the synthetic run below.
const (
	ropeCos   = 0x12c000000000
	ropeSin   = 0x12c000100000
	hiddenIn  = 0x12c010000000
	attnScore = 0x12c020000000
)

// fixtureStart is when rank 0's process of the fixture started (its first log line), in local time as
// the logs are read.
var fixtureStart = time.Date(2026, 1, 1, 10, 0, 1, 0, time.Local)

// writeRopeTrace writes the trace of rank 0 of the faulting run (pid 31200, running from fixtureStart
// past the fault): layers 0..10 get the RoPE tables as keyword inputs; layer.0 saves and classifies the
// cos table as internal and releases it.
func writeRopeTrace(t *testing.T, path string, rank int, withFault bool) {
	t.Helper()
	writeTrace(t, path, trace.Header{Version: 1, PID: 31200, Host: "node-1", Rank: rank, StartUnix: fixtureStart.UnixNano(),
		Argv: []string{"python", "run_mindformer.py"}}, withFault)
}

// writeTrace writes that run's trace; described adds the companion's descriptions (region inputs and
// layer.0's saved cos table) as SWAPAGENT_CALL_REGION_ENTER and SWAPAGENT_CALL_DESCRIBE record them.
func writeTrace(t *testing.T, path string, h trace.Header, withFault bool, extra ...trace.Event) {
	writeTraceDescribed(t, path, h, withFault, false, extra...)
}

func writeTraceDescribed(t *testing.T, path string, h trace.Header, withFault, described bool, extra ...trace.Event) {
	t.Helper()
	var evs []trace.Event
	add := func(ev trace.Event) { evs = append(evs, ev) }
	for g := uint32(0); g < 12; g++ {
		add(trace.Event{Kind: trace.KindGroup, Group: g, Text: "layer." + strconv.Itoa(int(g))})
	}
	hd := int64(1)
	for g := uint32(0); g <= 10; g++ {
		enter := trace.Event{Kind: trace.KindRegionEnter, Group: g, Ptrs: []uint64{hiddenIn + uint64(g)<<20, ropeCos, ropeSin}, Args: [6]uint64{1}}
		if described {
			enter.Text = "args[0]\tbfloat16\t2,4096,7168\nrotary_cos_sin[0]\tfloat32\t4096,1,1,64\nrotary_cos_sin[1]\tfloat32\t4096,1,1,64"
		}
		add(enter)
		// an internal activation of the same size as a RoPE table, released too (matching by size must
		// prefer the storage somebody else owns)
		add(trace.Event{Kind: trace.KindClassify, Group: g, Handle: hd, Args: [6]uint64{attnScore + uint64(g)<<24, 1048576, 0, 1}})
		add(trace.Event{Kind: trace.KindState, Handle: hd, Args: [6]uint64{0, 1, attnScore + uint64(g)<<24, 1048576}})
		add(trace.Event{Kind: trace.KindState, Handle: hd, Args: [6]uint64{1, 2, 0, 1048576}})
		hd++
		if g == 0 {
			add(trace.Event{Kind: trace.KindSave, Group: g, Handle: 100, Args: [6]uint64{ropeCos, 1048576, 0, 3}})
			if described {
				add(trace.Event{Kind: trace.KindDescribe, Group: g, Ptrs: []uint64{ropeCos}, Text: "\tfloat32\t4096,1,1,64"})
			}
			add(trace.Event{Kind: trace.KindClassify, Group: g, Handle: 100, Args: [6]uint64{ropeCos, 1048576, 0, 3}})
			add(trace.Event{Kind: trace.KindState, Handle: 100, Args: [6]uint64{0, 1, ropeCos, 1048576}})
			add(trace.Event{Kind: trace.KindState, Handle: 100, Args: [6]uint64{1, 2, 0, 1048576}})
		}
		add(trace.Event{Kind: trace.KindRegionExit, Group: g, Ptrs: []uint64{hiddenIn + uint64(g+1)<<20}})
	}
	if withFault {
		add(trace.Event{Kind: trace.KindFault, TS: 75e9, Text: `{"kernel":"aclnnMul","addr":0,"size":1048576,"tensor_index":0,` +
			`"storage":"0x12c000000000","generation":3,"handle":100,"nbytes":1048576,"released_by":"layer.0",` +
			`"owner":"keyword input of layer.0..layer.10","keep_reason":"internal","detected":"sync","code":507015}`})
	}
	for _, ev := range extra {
		add(ev)
	}
	add(trace.Event{Kind: trace.KindLog, TS: 76e9, Text: "exit"}) // the process ran until after the fault
	tracetest.Write(t, path, h, evs)
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
			if err := res.Render(&out); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"storage: 0x12c000000000 generation 3, 1048576 bytes", "released by layer.0",
				"owner:   keyword input of layer.0..layer.10"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q\n%s", want, out.String())
				}
			}
		})
	}
}

// TestTraceOnlyFault: a process whose log shows no fault but whose trace holds the agent's fault
// records is reported from the trace, with its log's rank; a region entry is never called a kernel.
func TestTraceOnlyFault(t *testing.T) {
	root := t.TempDir()
	es, _ := os.ReadDir("testdata/msrun-clean")
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join("testdata/msrun-clean", e.Name()))
		if err := os.WriteFile(filepath.Join(root, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// worker_1.log: pid 41001, 10:00:01..10:04:00.
	start := time.Date(2026, 1, 1, 10, 0, 1, 0, time.Local)
	writeTrace(t, filepath.Join(root, "node-1.41001.swtrace"), trace.Header{Version: 1, PID: 41001, Host: "node-1",
		Rank: -1, StartUnix: start.UnixNano()}, true, trace.Event{Kind: trace.KindFault, TS: 80e9,
		Text: `{"kernel":"region_enter(layer.3)","tensor_index":2,"addr":0,"size":1048576,"detected":"region_enter"}`})
	code, out, _ := runMain(t, root)
	if code != ExitDiagnosed || !strings.Contains(out, "rank 1 (worker_1.log): fault caught by the agent in kernel aclnnMul") ||
		!strings.Contains(out, "released by layer.0") ||
		!strings.Contains(out, "fault caught by the agent at region_enter(layer.3) (a swap region's entry, before any kernel)") ||
		strings.Contains(out, "kernel region_enter") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// TestTraceMatchesByPIDAndTime is the must-show: given a log and an unrelated trace (another pid),
// doctor does not use the trace and says why; given the matching trace, it uses it. A trace with the
// right pid from another time, or the same pid on two hosts, is not used either.
func TestTraceMatchesByPIDAndTime(t *testing.T) {
	setup := func(t *testing.T, headers ...trace.Header) (string, *Result, string) {
		root := t.TempDir()
		copyFixture(t, root)
		for _, h := range headers {
			writeTrace(t, filepath.Join(root, fmt.Sprintf("%s.rank%d.%d.swtrace", h.Host, h.Rank, h.PID)), h, false)
		}
		res, err := Diagnose(root)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := res.Render(&out); err != nil {
			t.Fatal(err)
		}
		return root, res, out.String()
	}
	good := trace.Header{Version: 1, PID: 31200, Host: "node-1", Rank: 0, StartUnix: fixtureStart.UnixNano()}
	other := good
	other.PID = 55555 // a healthy job that happened to leave its trace here

	t.Run("unrelated trace", func(t *testing.T) {
		_, res, out := setup(t, other)
		f := res.Faults[0]
		if f.StorageRef != nil || f.Trace != "" || len(f.TracesChecked) != 1 || f.TracesChecked[0].Used ||
			f.TracesChecked[0].Why != "pid 55555, not the log's 31200" {
			t.Fatalf("fault used the unrelated trace: %+v", f)
		}
		for _, w := range []string{"trace:   none used: no trace fits this log's process (logged at 2026-01-01 10:01:15",
			"pid 31200); looked at 1:", "(pid 55555 on node-1, rank 0): pid 55555, not the log's 31200"} {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q\n%s", w, out)
			}
		}
		if strings.Contains(out, "released by layer.0") {
			t.Errorf("diagnosis drawn from the unrelated trace:\n%s", out)
		}
	})
	t.Run("matching trace", func(t *testing.T) {
		_, res, out := setup(t, other, good)
		f := res.Faults[0]
		if f.StorageRef == nil || f.ReleasedBy != "layer.0" || !strings.HasSuffix(f.Trace, ".31200.swtrace") {
			t.Fatalf("the matching trace was not used: %+v", f)
		}
		if !strings.Contains(out, "same pid, rank and time as the log") || !strings.Contains(out, "released by layer.0") {
			t.Errorf("output:\n%s", out)
		}
		if res.Faults[1].Trace != "" { // rank 3, pid 31221: neither trace is its process
			t.Errorf("rank 3 used %s", res.Faults[1].Trace)
		}
	})
	t.Run("same pid, another day", func(t *testing.T) {
		old := good
		old.StartUnix = fixtureStart.Add(-24 * time.Hour).UnixNano()
		_, res, _ := setup(t, old)
		if f := res.Faults[0]; f.Trace != "" || !strings.Contains(f.TracesChecked[0].Why, "before the fault") {
			t.Errorf("%+v", f.TracesChecked)
		}
	})
	t.Run("same pid on two hosts", func(t *testing.T) {
		twin := good
		twin.Host = "node-2"
		_, res, _ := setup(t, good, twin)
		if f := res.Faults[0]; f.Trace != "" || !strings.Contains(f.TracesChecked[0].Why, "does not say its host") {
			t.Errorf("%+v", f.TracesChecked)
		}
	})
}

// TestAgentFaultsBesideTheLogFault: what the agent caught in the process besides the logged fault (reads
// of the released storage at launch, a region input with no memory) is shown next to it.
func TestAgentFaultsBesideTheLogFault(t *testing.T) {
	root := t.TempDir()
	copyFixture(t, root)
	h := trace.Header{Version: 1, PID: 31200, Host: "node-1", Rank: 0, StartUnix: fixtureStart.UnixNano()}
	writeTrace(t, filepath.Join(root, "node-1.rank0.31200.swtrace"), h, true,
		trace.Event{Kind: trace.KindFault, TS: 70e9, Text: `{"kernel":"aclnnMul","tensor_index":0,"addr":20615843020800,` +
			`"size":1048576,"storage":"0x12c000000000","released_by":"layer.0","detected":"launch","repeats":9}`},
		trace.Event{Kind: trace.KindFault, TS: 71e9, Text: `{"kernel":"region_enter(layer.11)","tensor_index":1,"addr":0,` +
			`"size":1048576,"detected":"region_enter"}`})
	code, out, _ := runMain(t, root)
	if code != ExitDiagnosed {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{
		"agent:   also caught in this process (trace only, not in the log):",
		"aclnnMul (caught at launch, before the kernel ran), tensor 0 at 0x12c000000000, 1048576 bytes, storage 0x12c000000000, released by layer.0 (and 9 more times)",
		"region_enter(layer.11): a region input, tensor 1 at 0x0, 1048576 bytes",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q\n%s", w, out)
		}
	}
	if strings.Count(out, "fault caught by the agent") != 0 {
		t.Errorf("the agent's records are shown as separate faults:\n%s", out)
	}
}

// TestControlCharactersEscaped: log text reaches the terminal escaped.
func TestControlCharactersEscaped(t *testing.T) {
	root := t.TempDir()
	log := "[ERROR] RUNTIME(7,python):2026-01-01-10:00:00.000.000 [x.cc:1]7 errorStr: evil\x1b[2J title\n" +
		"fault kernel_name=Mul_1234abcd_high_performance\n" +
		"RuntimeError: SyncStream failed for op aclnnMul \x1b]0;pwned\x07\n"
	if err := os.WriteFile(filepath.Join(root, "worker_0.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out, _ := runMain(t, root)
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("control characters reached the output:\n%q", out)
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

// TestDescribedTrace: with the companion's descriptions in the trace, the storage and its owner are named
// by argument, dtype and shape, and the size is not guessed.
func TestDescribedTrace(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	copyFixture(t, logs)
	writeTraceDescribed(t, filepath.Join(logs, "node-1.rank0.31200.swtrace"), trace.Header{Version: 1, PID: 31200,
		Host: "node-1", Rank: 0, StartUnix: fixtureStart.UnixNano()}, false, true)
	res, err := Diagnose(logs)
	if err != nil {
		t.Fatal(err)
	}
	ref := res.Faults[0].StorageRef
	if ref == nil || ref.Tensor != "float32 [4096, 1, 1, 64]" ||
		ref.Owner != "keyword input rotary_cos_sin[0] of layer.0..layer.10" {
		t.Fatalf("storage ref %+v", ref)
	}
	var out bytes.Buffer
	if err := res.Render(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"size:    1048576 bytes = float32 [4096, 1, 1, 64] (as the framework described",
		"storage: 0x12c000000000 generation 3, 1048576 bytes (float32 [4096, 1, 1, 64])",
		"owner:   keyword input rotary_cos_sin[0] of layer.0..layer.10"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q\n%s", want, out.String())
		}
	}
	rank0, _, _ := strings.Cut(out.String(), "rank 3 (") // rank 3 has no trace: its size is a guess
	if strings.Contains(rank0, "guessed") {
		t.Errorf("a described storage's size is guessed:\n%s", rank0)
	}
}

// TestUnreadableTracesAreNotes: a directory holding only traces that cannot be read (empty, garbage, cut
// inside the header, a FIFO) is diagnosed, not refused: exit 0, the clean line saying none of them could
// be read, and one note naming each. A FIFO is refused at once, never waited on.
func TestUnreadableTracesAreNotes(t *testing.T) {
	root := t.TempDir()
	good := filepath.Join(t.TempDir(), "good.swtrace")
	writeRopeTrace(t, good, 0, false)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"empty.swtrace": nil, "garbage.swtrace": []byte("not a trace at all"),
		"cut.swtrace": b[:10]}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo.swtrace"), 0o644); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		code      int
		out, errs string
	}
	done := make(chan outcome, 1)
	go func() {
		code, out, errs := runMain(t, root)
		done <- outcome{code, out, errs}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("doctor did not return within 5 s on a directory with a FIFO")
	}
	if o.code != ExitClean || o.errs != "" {
		t.Fatalf("exit %d stderr %q, want 0 and nothing on stderr\n%s", o.code, o.errs, o.out)
	}
	lines := strings.Split(strings.TrimSuffix(o.out, "\n"), "\n")
	if lines[0] != "no null-address or aicore faults found in 0 of 4 traces (no job logs; 4 could not be read)" {
		t.Errorf("first line %q", lines[0])
	}
	for _, name := range []string{"empty.swtrace", "garbage.swtrace", "cut.swtrace", "fifo.swtrace"} {
		n := 0
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "note: ") && strings.Contains(l, name) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d note lines name %s, want 1:\n%s", n, name, o.out)
		}
	}
	if !strings.Contains(o.out, "fifo.swtrace: a named pipe (FIFO), not a regular file") {
		t.Errorf("the FIFO's note does not say what it is:\n%s", o.out)
	}
	// A readable trace beside them is read and counted.
	if err := os.WriteFile(filepath.Join(root, "good.swtrace"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runMain(t, root)
	if code != ExitClean || !strings.HasPrefix(out, "no null-address or aicore faults found in 1 of 5 traces (no job logs; 4 could not be read)\n") {
		t.Errorf("exit %d\n%s", code, out)
	}
	// JSON: faults is an empty list, not null.
	code, out, _ = runMain(t, "--format", "json", root)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != ExitClean {
		t.Fatalf("json: exit %d, %v\n%s", code, err, out)
	}
	if f, ok := doc["faults"].([]any); !ok || len(f) != 0 {
		t.Errorf("json faults %v, want []", doc["faults"])
	}
}

// TestAgentLogBesideLaterSegment: the agent's own log (<host>.<pid>.log) is never a job log, also when the
// first segment of its trace was dropped under SWAPAGENT_TRACE_LIMIT and only <host>.<pid>+<k>.swtrace is
// left beside it. A log with no trace of its name beside it stays a job log.
func TestAgentLogBesideLaterSegment(t *testing.T) {
	root := t.TempDir()
	writeRopeTrace(t, filepath.Join(root, "node-1.31200+3.swtrace"), 0, false)
	agentLine := "2026-01-01T10:00:01.000Z\tWARN\tswapagent\tsomething the agent said\n"
	if err := os.WriteFile(filepath.Join(root, "node-1.31200.log"), []byte(agentLine), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Diagnose(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Logs) != 0 {
		t.Errorf("the agent's own log was read as a job log: logs %v", res.Logs)
	}
	if len(res.Traces) != 1 {
		t.Errorf("traces %v, want the one segment", res.Traces)
	}
	job := filepath.Join(root, "train.log")
	if err := os.WriteFile(job, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err = Diagnose(root); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Logs, "train.log") || slices.Contains(res.Logs, "node-1.31200.log") {
		t.Errorf("logs %v, want train.log and not node-1.31200.log", res.Logs)
	}
}

// TestFIFOLogIsANote: a FIFO with a job log's name beside real logs is named in one note and never opened
// to wait on; the real logs are diagnosed.
func TestFIFOLogIsANote(t *testing.T) {
	root := t.TempDir()
	copyFixture(t, root)
	fifo := filepath.Join(root, "worker_9.log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Result, 1)
	go func() {
		res, err := Diagnose(root)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if res == nil {
			return
		}
		if len(res.Faults) != 2 || slices.Contains(res.Logs, "worker_9.log") ||
			!slices.Contains(res.Notes, "skipped "+fifo+": a named pipe (FIFO), not a regular file") {
			t.Errorf("faults %d logs %v notes %q", len(res.Faults), res.Logs, res.Notes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("doctor did not return within 5 s with a FIFO among the logs")
	}
}
