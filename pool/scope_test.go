package pool

import (
	"testing"

	"swapagent/internal/tracetest"
	"swapagent/trace"
)

// TestScopesEndBlocks: a block ends where the scope it was last used in closes when that scope holds its
// making too (a function's temporaries), else where the scope open at its last use just inside the innermost
// one holding both closes (a gradient its consumer took; a tensor a forward saved, at its layer's backward);
// a scope around them all, closed or never, changes nothing.
func TestScopesEndBlocks(t *testing.T) {
	for _, wrap := range []string{"none", "around the step", "never exited"} {
		const dev, host = 0x10000000, 0x7f0000000000
		b := tracetest.New()
		for _, g := range []string{"fwd", "rope", "bwd", "node", "step"} {
			b.Group(g)
		}
		for _, f := range []string{"aclrtMalloc", "aclrtMemcpyAsync"} {
			b.Fn(f)
		}
		b.Malloc(dev, 2<<20)
		made := func(p uint64) { b.Call("aclrtMemcpyAsync", 0, p, host, 4096) } // a copy from the host: a new block
		used := func(p uint64) { b.Call("aclrtMemcpyAsync", 0, host, p, 4096) }
		at := map[string]int{}
		mark := func(name string, kind trace.Kind, group string) {
			at[name] = len(b.Events)
			b.ABI(kind, group, 0, nil)
		}
		if wrap != "none" {
			mark("step", trace.KindScopeEnter, "step")
		}
		mark("fwd", trace.KindScopeEnter, "fwd")
		mark("rope", trace.KindScopeEnter, "rope")
		made(dev)         // 1: a temporary of rope
		made(dev + 8192)  // 2: rope's result, read by fwd
		made(dev + 16384) // 3: saved for bwd
		mark("rope exit", trace.KindScopeExit, "rope")
		used(dev + 8192)
		mark("fwd exit", trace.KindScopeExit, "fwd")
		mark("bwd", trace.KindScopeEnter, "bwd")
		mark("node", trace.KindScopeEnter, "node")
		used(dev + 16384)
		made(dev + 24576) // 4: a gradient the second node takes
		mark("node exit", trace.KindScopeExit, "node")
		mark("node 2", trace.KindScopeEnter, "node")
		used(dev + 24576)
		mark("node 2 exit", trace.KindScopeExit, "node")
		mark("bwd exit", trace.KindScopeExit, "bwd")
		if wrap == "around the step" {
			mark("step exit", trace.KindScopeExit, "step")
		}

		first := NewBlocks(nil, nil)
		for i := range b.Events {
			first.Add(&b.Events[i])
		}
		got := map[int64]int{}
		for _, f := range first.Schedule().frees {
			got[f.id] = f.at
		}
		for id, want := range map[int64]string{1: "rope exit", 2: "fwd exit", 3: "bwd exit", 4: "node 2 exit"} {
			if got[id] != at[want] {
				t.Errorf("scope %s: block %d ends at event %d, want %d (%s); schedule %v", wrap, id, got[id], at[want],
					want, got)
			}
		}
	}
}

// TestEmptyCacheMark: the job's own word that its pool emptied its cache unmaps the model's free tail, where
// the recording had nothing to unmap.
func TestEmptyCacheMark(t *testing.T) {
	const seg, host = 0x20000000, 0x7f0000000000
	b := tracetest.New()
	b.Call("aclrtMapMem", 0, seg, 2<<20)
	b.Call("aclrtMemcpyAsync", 0, seg, host, 4096)
	b.Call("aclrtMapMem", 0, seg+2<<20, 2<<20)
	b.Call("aclrtMemcpyAsync", 0, seg+(2<<20), host, 3<<20)
	b.ABI(trace.KindScopeEnter, "step", 0, nil)
	b.Call("aclrtMemcpyAsync", 0, host, seg+(2<<20), 3<<20) // last use, in a scope: ends at its exit
	b.ABI(trace.KindScopeExit, "step", 0, nil)
	b.ABI(trace.KindEmptyCache, "pool", 0, nil)
	s := ScheduleOf(nil, b.Events)
	m := NewBlocks(nil, s)
	for i := range b.Events {
		m.Add(&b.Events[i])
	}
	if m.M == nil || m.M.Config().Kind != VMM || m.M.HeldPeak() != 4<<20 || m.M.Held() != 2<<20 {
		t.Fatalf("model %+v: want a VMM pool that held 4 MiB and keeps 2 after the empty cache", m.M)
	}
}
