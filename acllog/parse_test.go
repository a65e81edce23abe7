// parse_test.go proves the log parser on the shapes real logs take, the size explanation, and fuzzes
// the parser (FuzzParseLog).
package acllog

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseString(t testing.TB, s string) []Record {
	t.Helper()
	recs, err := ParseLog(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestParsePrefixesAndFields(t *testing.T) {
	cases := []struct {
		name   string
		log    string
		kernel string
		addr   uint64
		size   uint64
		tidx   int
	}{
		{"issue text, bare lines", "RuntimeError: SyncStream failed for op aclnnMul\n" +
			"The DDR address of the MTE instruction is out of range.\n" +
			"fault kernel_name=Mul_ee98c6628030785f610b924ab1557b31_high_performance\n" +
			"tensor index:0\naddr:0\nsize:1048576 bytes\n",
			"Mul_ee98c6628030785f610b924ab1557b31_high_performance", 0, 1048576, 0},
		{"runtime prefixes", "[ERROR] RUNTIME(12345,python):2026-01-01-10:00:00.123.456 [device_error_proc.cc:1268]12345 there is an aicore error exception, error code = 0x800000\n" +
			"[ERROR] RUNTIME(12345,python):2026-01-01-10:00:00.123.457 [davinci_kernel_task.cc:1421]12345 Kernel task happen error, retCode=0x26, [aicore exception].\n" +
			"[ERROR] RUNTIME(12345,python):2026-01-01-10:00:00.123.458 [device_error_proc.cc:1307]12345 fault kernel_name=Add_0123456789abcdef0123456789abcdef_mix_aiv, program id=3\n" +
			"[ERROR] RUNTIME(12345,python):2026-01-01-10:00:00.123.459 [dump.cc:1]12345 tensor index:2, addr:0x40, size:8388608 bytes\n",
			"Add_0123456789abcdef0123456789abcdef_mix_aiv", 0x40, 8388608, 2},
		{"CRLF and tabs", "\t[ERROR] there is an aicore error exception\r\n\tfault kernel_name = Mul_ffffffffffffffff\r\n\ttensor index: 1\r\n\taddr: 0x12c0a4200000\r\n\tsize: 64 bytes\r\n",
			"Mul_ffffffffffffffff", 0x12c0a4200000, 64, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs := parseString(t, tc.log)
			if len(recs) != 1 {
				t.Fatalf("%d records: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.KernelName != tc.kernel || len(r.Tensors) != 1 {
				t.Fatalf("record %+v", r)
			}
			tn := r.Tensors[0]
			if tn.Index != tc.tidx || tn.Addr == nil || *tn.Addr != tc.addr || tn.Size == nil || *tn.Size != tc.size {
				t.Errorf("tensor %+v", tn)
			}
		})
	}
}

func TestParseSyncOnlyAndGrouping(t *testing.T) {
	log := "[ERROR] ME(1:2,MainProcess):x [a.cc:1] Call runtime aclrtSynchronizeStreamWithTimeout error. Error code is 507035\n" +
		"RuntimeError: Sync stream error!\n" +
		strings.Repeat("step line\n", recordGap+5) +
		"[ERROR] ME(1:2,MainProcess):x [b.cc:2] Call aclrtMemcpy failed, ret: 507899\n"
	recs := parseString(t, log)
	if len(recs) != 2 {
		t.Fatalf("want 2 records (far apart), got %d: %+v", len(recs), recs)
	}
	if !recs[0].SyncFailed || recs[0].PythonError != "RuntimeError: Sync stream error!" || len(recs[0].Codes) != 1 || recs[0].Codes[0] != 507035 {
		t.Errorf("first %+v", recs[0])
	}
	if len(recs[1].Codes) != 1 || recs[1].Codes[0] != 507899 {
		t.Errorf("second %+v", recs[1])
	}
	// Two kernels close together are two faults.
	recs = parseString(t, "fault kernel_name=Mul_0123456789abcdef\ntensor index:0 addr:0 size:4 bytes\nfault kernel_name=Add_0123456789abcdef\n")
	if len(recs) != 2 || recs[1].KernelName != "Add_0123456789abcdef" {
		t.Fatalf("%+v", recs)
	}
	// addr/size outside a record are not faults.
	if recs := parseString(t, "addr:0\nsize:1048576 bytes\ntensor index:0\n"); len(recs) != 0 {
		t.Fatalf("%+v", recs)
	}
}

func TestParseHugeLine(t *testing.T) {
	huge := "fault kernel_name=Mul_0123456789abcdef " + strings.Repeat("x", 3*MaxLineBytes) + " addr:0x99\naddr:0\nsize:4 bytes\n"
	recs := parseString(t, huge)
	if len(recs) != 1 || len(recs[0].Tensors) != 1 || *recs[0].Tensors[0].Addr != 0 {
		t.Fatalf("%+v", recs)
	}
	// The line after the huge one is line 2.
	if recs[0].LastLine != 3 {
		t.Errorf("last line %d", recs[0].LastLine)
	}
}

func TestKernelOp(t *testing.T) {
	for in, want := range map[string]string{
		"Mul_ee98c6628030785f610b924ab1557b31_high_performance": "Mul",
		"MatMul_V2_0123456789abcdef0123_mix_aic":                "MatMul_V2",
		"Mul":                                                   "Mul",
		"Add_abc_def":                                           "Add_abc_def",
	} {
		if got := KernelOp(in); got != want {
			t.Errorf("KernelOp(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExplainSize(t *testing.T) {
	cases := []struct {
		bytes uint64
		top   string
		rope  bool
	}{
		{1048576, "4096 x 64 float32", true},
		{2097152, "4096 x 128 float32", true},
		{4096 * 7168 * 2, "4096 x 7168 bf16/fp16", false},
		{3 * 1024, "3 x 16 x 16 float32", false},
	}
	for _, tc := range cases {
		si := ExplainSize(tc.bytes)
		if len(si.Shapes) == 0 || si.Shapes[0].String() != tc.top || si.Shapes[0].RoPE != tc.rope {
			t.Errorf("ExplainSize(%d) = %+v, want top %s", tc.bytes, si.Shapes, tc.top)
		}
	}
	if si := ExplainSize(7); len(si.Shapes) != 0 || si.Elements != nil {
		t.Errorf("odd size: %+v", si)
	}
}

func FuzzParseLog(f *testing.F) {
	for _, name := range []string{"worker_0.log", "worker_1.log", "scheduler.log"} {
		fh, err := os.Open(filepath.Join(ropeFixture, name))
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		var all []string
		for sc.Scan() {
			f.Add(sc.Text())
			all = append(all, sc.Text())
		}
		fh.Close()
		f.Add(strings.Join(all, "\n"))
	}
	f.Add("tensor index:99999999999999999999 addr:0xffffffffffffffffff size:99999999999999999999999 bytes")
	f.Add("fault kernel_name=\x00\xff_0123456789abcdef\r\naddr:0\n")
	f.Fuzz(func(t *testing.T, s string) {
		recs, err := ParseLog(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > maxRecords {
			t.Fatalf("%d records", len(recs))
		}
		for _, r := range recs {
			if len(r.Tensors) > maxTensors || len(r.Codes) > maxCodes || len(r.KernelName) > maxText ||
				len(r.ErrorStr) > maxText || len(r.PythonError) > maxText {
				t.Fatalf("unbounded record %+v", r)
			}
			if r.KernelName != "" {
				_ = KernelOp(r.KernelName)
			}
			for _, tn := range r.Tensors {
				if tn.Size != nil {
					_ = ExplainSize(*tn.Size)
				}
			}
		}
	})
}

const ropeFixture = "../doctor/testdata/msrun-rope"
