// abi_test.go checks the agent's answers of docs/design.md's table "Bad arguments at the ABI" (the C
// conversions in front of them are shim/exports.go's, exercised by sa-fuzz), and that every refusal is
// counted in the stats' "rejected".
package agent

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
)

func TestBadArgumentAnswers(t *testing.T) {
	n := &fakeNative{t0: time.Now()}
	a := New(Config{Policy: offload.PolicySafe, Out: t.TempDir(), Prefetch: 1, MinBytes: 64, Level: zapcore.ErrorLevel, Rank: -1},
		n, io.Discard, nil)
	defer a.Shutdown()
	want := map[int]int{}
	check := func(what string, got, code int) {
		t.Helper()
		if got != code {
			t.Errorf("%s: %d, want %d", what, got, code)
		}
		if got < 0 {
			want[got]++
		}
	}
	check("region_enter without an engine", a.RegionEnter("g", nil, 0), trace.CodeEDISABLED)
	a.StartEngine(offload.NewMemcpyMover())
	dev := make([]byte, 8192)
	n.push(fnMalloc, addr(dev), 4096) // the runtime handed out the first half
	vmm := make([]byte, 4*4096)
	n.push(fnReserve, addr(vmm), uint64(len(vmm)))
	n.push(fnMap, addr(vmm), 4096)
	n.push(fnMap, addr(vmm)+4096, 4096)
	host := make([]byte, 4096)
	check("region_enter of no group", a.RegionEnter("", nil, 0), trace.CodeEINVAL)
	check("region_enter of 5000 bytes", a.RegionEnter(strings.Repeat("x", 5000), nil, 0), trace.CodeEINVAL)
	check("region_enter of a control character", a.RegionEnter("layer\n0", nil, 0), trace.CodeEINVAL)
	check("region_enter with n_positional > n", a.RegionEnter("g", []uint64{1}, 2), trace.CodeEINVAL)
	check("save outside a region", int(a.Save("g", addr(dev), 4096, 0)), trace.CodeEORDER)
	check("backward_enter of an unknown group", a.BackwardEnter("nobody"), trace.CodeEGROUP)
	check("backward_exit of an unknown group", a.BackwardExit("nobody"), trace.CodeEGROUP)
	check("protect in an unknown group", a.Protect("nobody", nil), trace.CodeEGROUP)
	check("group_streams of a group not entered yet", a.GroupStreams("later", []uint64{0}), trace.CodeOK)
	check("region_enter", a.RegionEnter("g", []uint64{0, addr(dev)}, 1), trace.CodeOK)
	check("region_enter again", a.RegionEnter("g", nil, 0), trace.CodeEORDER)
	for _, c := range []struct {
		what string
		p, n uint64
	}{
		{"garbage", 0x12345678, 4096},
		{"address 0", 0, 4096},
		{"no bytes", addr(dev), 0},
		{"past its allocation", addr(dev), 4097},
		{"VMM space with nothing mapped", addr(vmm) + 8192, 64},
		{"from a mapping into nothing", addr(vmm) + 4096, 8192},
		{"a range that wraps", ^uint64(0) - 8, 64},
	} {
		check("save of "+c.what, int(a.Save("g", c.p, c.n, 0)), trace.CodeEINVAL)
	}
	var hs []int64
	for _, c := range []struct {
		what string
		p, n uint64
	}{{"device", addr(dev), 4096}, {"VMM across two mappings", addr(vmm), 8192}, {"host", addr(host), 4096}} {
		h := a.Save("g", c.p, c.n, 0)
		if h <= 0 {
			t.Fatalf("save of %s memory: %d", c.what, h)
		}
		hs = append(hs, h)
	}
	check("backward_enter in its region", a.BackwardEnter("g"), trace.CodeEORDER)
	check("backward_exit in its region", a.BackwardExit("g"), trace.CodeEORDER)
	check("region_exit", a.RegionExit("g", nil), trace.CodeOK)
	check("region_exit again", a.RegionExit("g", nil), trace.CodeEORDER)
	check("state of an unknown handle", a.State(-1), trace.CodeEHANDLE)
	check("keep_reason of an unknown handle", a.KeepReason(0), trace.CodeEHANDLE)
	if b := a.Unpack(1 << 50); b != 0 {
		t.Errorf("unpack of an unknown handle: %#x", b)
	}
	want[trace.CodeEHANDLE]++
	if b := a.Unpack(hs[0]); b != addr(dev) {
		t.Errorf("unpack of a live handle: %#x, want %#x", b, addr(dev))
	}
	check("backward_exit of an exited group", a.BackwardExit("g"), trace.CodeOK)
	if b := a.Unpack(hs[1]); b != 0 {
		t.Errorf("unpack of a finished step's handle: %#x", b)
	}
	want[trace.CodeEHANDLE]++
	check("state of a finished step's handle", a.State(hs[2]), trace.CodeEHANDLE)
	check("backward_enter of a finished group", a.BackwardEnter("g"), trace.CodeOK)
	check("a C argument that could not be read", a.Invalid("save", "NULL group"), trace.CodeEINVAL)

	var st trace.Stats
	if err := json.Unmarshal(a.StatsJSON(), &st); err != nil {
		t.Fatal(err)
	}
	for code := -1; code >= -8; code-- {
		if got := int(st.Rejected[codeNames[-code-1]]); got != want[code] {
			t.Errorf("rejected.%s = %d, want %d", codeNames[-code-1], got, want[code])
		}
	}
	if st.Rejected["unpack"] != 2 {
		t.Errorf("rejected.unpack = %d, want 2", st.Rejected["unpack"])
	}
}
