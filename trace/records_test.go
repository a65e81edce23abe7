// records_test.go pins the bytes of the three Text records (fault, stats, meta) and what readers accept.
package trace

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// A fault record as the agent writes it (a decoder-sim run's), byte for byte.
const agentFault = `{"kernel":"aclnnMul","tensor_index":0,"addr":140038516353536,"size":1048576,` +
	`"storage":"0x7f5d4205aa00#1","generation":1,"nbytes":1048576,"released_by":"layer.0",` +
	`"owner":"keyword input of layer.0","detected":"race","repeats":1,"detail":"aclnnMul uses tensor 0"}`

func TestFaultWrittenBytes(t *testing.T) {
	f := Fault{Kernel: "aclnnMul", TensorIndex: 0, Addr: 140038516353536, Size: 1048576,
		Storage: "0x7f5d4205aa00#1", Generation: 1, Nbytes: 1048576, ReleasedBy: "layer.0",
		Owner: "keyword input of layer.0", Detected: "race", Repeats: 1, Detail: "aclnnMul uses tensor 0"}
	b, err := json.Marshal(f)
	if err != nil || string(b) != agentFault {
		t.Fatalf("marshal: %s (%v)\nwant %s", b, err, agentFault)
	}
	var back Fault
	if err := json.Unmarshal(b, &back); err != nil || back != f {
		t.Fatalf("read back %+v (%v), want %+v", back, err, f)
	}
	// A sync fault with nothing found: the always-written keys only.
	b, _ = json.Marshal(Fault{Kernel: "aclrtSynchronizeStream", TensorIndex: -1, Detected: "sync"})
	const want = `{"kernel":"aclrtSynchronizeStream","tensor_index":-1,"addr":0,"size":0,"storage":"",` +
		`"released_by":"","owner":"","detected":"sync"}`
	if string(b) != want {
		t.Errorf("empty sync fault %s, want %s", b, want)
	}
}

// Readers take what older and hand-written records hold: numbers as strings, a storage as a number, no
// tensor_index, the reader-only handle and keep_reason.
func TestFaultReadsOtherForms(t *testing.T) {
	for _, c := range []struct {
		text    string
		addr    Uint
		storage uint64
		index   int
		handle  int64
	}{
		{`{"kernel":"k","addr":"0x10","size":"4096","storage":"0x7f00#3","handle":5,"tensor_index":0}`, 0x10, 0x7f00, 0, 5},
		{`{"kernel":"k","addr":16,"storage":20615843020800,"keep_reason":"internal"}`, 16, 20615843020800, -1, 0},
		{`{"kernel":"k","addr":null,"storage":"4096","tensor_index":null}`, 0, 4096, -1, 0},
		{`{"kernel":"k","storage":null,"tensor_index":3}`, 0, 0, 3, 0},
	} {
		var f Fault
		if err := json.Unmarshal([]byte(c.text), &f); err != nil {
			t.Errorf("%s: %v", c.text, err)
			continue
		}
		if f.Addr != c.addr || f.Storage.Addr() != c.storage || f.TensorIndex != c.index || f.Handle != c.handle {
			t.Errorf("%s: read %+v", c.text, f)
		}
	}
	for _, bad := range []string{`{"addr":"zz"}`, `{"storage":"0xzz#1"}`, `{"storage":true}`, `{"tensor_index":"1"}`, `[]`} {
		var f Fault
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("%s: read as %+v, want an error", bad, f)
		}
	}
}

// Kept's JSON is keyed by the keep reasons' names, internal aside, and reads back.
func TestKeptJSON(t *testing.T) {
	var k Kept
	for r := KeepInput; r < NumKeepReasons; r++ {
		k.Add(r, int64(r)*10)
	}
	k.Add(KeepInternal, 5) // not counted
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"input":10,"output":20,"protected":30,"param":40,"shared":50,"small":60,"duplicate":70}`
	if string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var back Kept
	if err := json.Unmarshal([]byte(`{"output":20,"protected":30,"param":40,"shared":50,"small":60,"duplicate":70,`+
		`"input":10,"unknown":1}`), &back); err != nil || back != k || back.Count(KeepShared) != 50 || back.Count(KeepInternal) != 0 {
		t.Fatalf("read back %+v (%v), want %+v", back, err, k)
	}
}

func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The stats JSON's keys (architecture.md, "Stats JSON"), every one present with a zero value; rejected
// and runtime only where the agent adds them.
func TestStatsKeys(t *testing.T) {
	engine := []string{"device_copy_bytes", "device_copy_ns", "device_stall_ns", "errors", "faults", "groups", "guard_kept",
		"guard_kept_bytes", "guard_released", "guard_released_bytes", "host_allocs", "host_bytes", "host_reuses", "internal", "kept", "kept_no_ops", "offload_wait_ns", "offloaded_bytes", "offloaded_storages",
		"peak_device_bytes", "policy", "prefetch", "released_external", "restore_wait_ns", "restored_bytes",
		"restored_storages", "saved_bytes", "saved_bytes_peak", "saves", "wait_ns"}
	if got := jsonKeys(t, Stats{}); !reflect.DeepEqual(got, engine) {
		t.Errorf("engine stats keys %v, want %v", got, engine)
	}
	agent := append([]string{"asks", "rejected", "runtime"}, engine...)
	sort.Strings(agent)
	if got := jsonKeys(t, Stats{Rejected: map[string]uint64{"einval": 0}, Runtime: &Runtime{}, Asks: &Asks{}}); !reflect.DeepEqual(got, agent) {
		t.Errorf("agent stats keys %v, want %v", got, agent)
	}
	if got, want := jsonKeys(t, Runtime{}), []string{"calls", "engine", "events", "lost", "policy", "trace_bytes",
		"trace_events"}; !reflect.DeepEqual(got, want) {
		t.Errorf("runtime keys %v, want %v", got, want)
	}
	if got, want := jsonKeys(t, Asks{}), []string{"holders", "keep_inputs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("asks keys %v, want %v", got, want)
	}
	b, _ := json.Marshal(Stats{Faults: []Fault{}})
	var back Stats
	if err := json.Unmarshal(b, &back); err != nil || !strings.Contains(string(b), `"faults":[]`) {
		t.Errorf("stats %s: %v", b, err)
	}
}

func TestMeta(t *testing.T) {
	m := Meta{MetaArgv: QuoteArgv([]string{"python", "train.py", "a b"}), MetaPolicy: "safe", MetaPrefetch: "1",
		MetaMinBytes: "65536", MetaRank: "-1", MetaPID: "42", MetaVersion: "0.1.0", MetaABI: "1", MetaOut: "/o",
		"zz": "later", "host": "n1"}
	const want = "policy=safe\nprefetch=1\nmin_bytes=65536\nrank=-1\npid=42\nversion=0.1.0\nabi=1\nout=/o\n" +
		`argv="python" "train.py" "a b"` + "\nhost=n1\nzz=later"
	if got := m.String(); got != want {
		t.Fatalf("String:\n%s\nwant:\n%s", got, want)
	}
	back := Meta{}
	back.Parse(want)
	if !reflect.DeepEqual(back, m) {
		t.Errorf("Parse %v, want %v", back, m)
	}
	// Tolerant: a line without "=" says nothing, an unknown key is kept, a later value wins.
	back.Parse("garbage\nprefetch=2\nnew=x=y")
	if back[MetaPrefetch] != "2" || back["new"] != "x=y" || len(back) != len(m)+1 {
		t.Errorf("after a second record: %v", back)
	}
	if p, ok := back.Prefetch(); !ok || p != 2 {
		t.Errorf("Prefetch %d %v", p, ok)
	}
	if n, ok := back.MinBytes(); !ok || n != 65536 {
		t.Errorf("MinBytes %d %v", n, ok)
	}
	if _, ok := (Meta{MetaPrefetch: "-1"}).Prefetch(); ok {
		t.Error("a negative prefetch depth read as one")
	}
	if _, ok := (Meta{}).MinBytes(); ok {
		t.Error("an absent min_bytes read as one")
	}
}
