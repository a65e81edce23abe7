package offload

import (
	"encoding/json"
	"testing"

	"swapagent/tracker"
)

// Kept's JSON is keyed by the keep reasons' names, internal aside, and reads back.
func TestKeptJSON(t *testing.T) {
	var k Kept
	for r := tracker.Input; r < tracker.NumReasons; r++ {
		k.add(r, int64(r)*10)
	}
	k.add(tracker.Internal, 5) // not counted
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
		`"input":10,"unknown":1}`), &back); err != nil || back != k {
		t.Fatalf("read back %+v (%v), want %+v", back, err, k)
	}
}
