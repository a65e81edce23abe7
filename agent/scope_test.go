// scope_test.go checks SWAPAGENT_CALL_SCOPE_ENTER, SCOPE_EXIT and EMPTY_CACHE: recorded in their place with
// their group, nothing of the scope saved, kept or moved, and a bad group refused like any group call's.
package agent

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"swapagent/offload"
	"swapagent/trace"
)

func TestScopeIsRecordedAndNeverMoved(t *testing.T) {
	n := &fakeNative{t0: time.Now()}
	out := t.TempDir()
	a := New(Config{Policy: offload.PolicyOutputsOnly, Out: out, Prefetch: 0, MinBytes: 64, Level: zapcore.ErrorLevel,
		Rank: -1}, n, io.Discard, nil)
	// a scope needs no engine: nothing of it moves
	if got := a.Run(&Call{Kind: trace.CallScopeEnter, Group: "before"}); got != trace.CodeOK {
		t.Errorf("scope_enter without an engine: %d", got)
	}
	a.Run(&Call{Kind: trace.CallScopeExit, Group: "before"})
	a.StartEngine(offload.NewMemcpyMover())
	a.SetStorageOps(&resizeOps{released: map[int64]bool{}})
	dev := make([]byte, 4096)
	base := addr(dev)
	n.push(fnMalloc, base, 4096)
	for _, c := range []struct {
		what string
		call Call
		want int64
	}{
		{"scope_enter", Call{Kind: trace.CallScopeEnter, Group: "layer.1"}, trace.CodeOK},
		{"nested scope_enter", Call{Kind: trace.CallScopeEnter, Group: "layer.1.rope"}, trace.CodeOK},
		{"scope_exit", Call{Kind: trace.CallScopeExit, Group: "layer.1.rope"}, trace.CodeOK},
		{"scope_exit", Call{Kind: trace.CallScopeExit, Group: "layer.1"}, trace.CodeOK},
		{"empty_cache", Call{Kind: trace.CallEmptyCache, Group: "pool"}, trace.CodeOK},
		{"scope_enter of no group", Call{Kind: trace.CallScopeEnter}, trace.CodeEINVAL},
	} {
		if got := a.Run(&c.call); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	// a scope is no group of the engine's: its backward is unknown
	if c := a.BackwardEnter("layer.1"); c != trace.CodeEGROUP {
		t.Errorf("backward_enter of a scope: %d, want EGROUP", c)
	}
	var st trace.Stats
	if err := json.Unmarshal(a.StatsJSON(), &st); err != nil {
		t.Fatal(err)
	}
	a.Shutdown()
	if st.Saves != 0 || st.OffloadedStorages != 0 || st.OffloadedBytes != 0 {
		t.Errorf("a scope moved memory: %+v", st)
	}
	evs := onlyTrace(t, out)
	names := map[uint32]string{}
	var got []string
	for _, ev := range evs {
		switch ev.Kind {
		case trace.KindGroup:
			names[ev.Group] = ev.Text
		case trace.KindScopeEnter, trace.KindScopeExit, trace.KindEmptyCache:
			got = append(got, ev.Kind.String()+" "+names[ev.Group])
		case trace.KindSave, trace.KindState, trace.KindClassify:
			t.Errorf("a scope's trace holds %s", ev.Kind)
		}
	}
	want := []string{"scope_enter before", "scope_exit before", "scope_enter layer.1", "scope_enter layer.1.rope", "scope_exit layer.1.rope", "scope_exit layer.1",
		"empty_cache pool"}
	if len(got) != len(want) {
		t.Fatalf("scope events %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("scope event %d: %q, want %q", i, got[i], want[i])
		}
	}
}
