package offload

import (
	"errors"
	"strings"
	"testing"

	"swapagent/tracker"
)

// guardedStep runs one guarded group's forward as the guard reports it: the RoPE table and the hidden
// state as inputs, an activation saved inside, the output; then the job's own swap asks to release each.
func guardedStep(t *testing.T, p Policy) (e *Engine, rope, act, out *tensor, got map[string]Decision) {
	t.Helper()
	return guardedStepHeld(t, p, nil)
}

// guardedStepHeld is guardedStep with the framework's evidence of other holders per tensor (absent:
// unknown).
func guardedStepHeld(t *testing.T, p Policy, held map[string]tracker.Holders) (e *Engine, rope, act, out *tensor,
	got map[string]Decision) {
	t.Helper()
	f := newFW(t)
	e = NewEngine(Config{Policy: p, Prefetch: 1, MinBytes: 1024}, NewMemcpyMover(), f, nil)
	rope, act, out = f.tensor("rope", 4096), f.tensor("act", 8192), f.tensor("out", 4096)
	if err := e.Guard("swap_group_0"); err != nil {
		t.Fatal(err)
	}
	if err := e.RegionEnter("swap_group_0", []uint64{rope.ptr()}, 0); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*tensor{rope, act, out} {
		if _, err := e.Save("swap_group_0", x.ptr(), uint64(len(x.buf)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RegionExit("swap_group_0", []uint64{out.ptr()}); err != nil {
		t.Fatal(err)
	}
	got = map[string]Decision{}
	for _, x := range []*tensor{rope, act, out} {
		h, ok := held[x.name]
		if !ok {
			h = tracker.HoldersUnknown
		}
		d, err := e.GuardRelease("", x.ptr(), uint64(len(x.buf)), h)
		if err != nil {
			t.Fatal(err)
		}
		got[x.name] = d
	}
	return e, rope, act, out, got
}

// The policy table of docs/guard.md, and the engine moving nothing of a guarded group itself.
func TestGuardReleasePolicies(t *testing.T) {
	for _, c := range []struct {
		p     Policy
		allow map[string]bool
	}{
		{PolicySafe, map[string]bool{"rope": false, "act": true, "out": false}},
		{PolicyOutputsOnly, map[string]bool{"rope": true, "act": true, "out": true}},
		{PolicyOff, map[string]bool{"rope": false, "act": false, "out": false}},
	} {
		e, _, _, _, got := guardedStep(t, c.p)
		for name, want := range c.allow {
			if d := got[name]; d.Allow != want || !d.Known {
				t.Errorf("%v: release of %s: allow %v (known %v, reason %v, why %q), want %v", c.p, name, d.Allow,
					d.Known, d.Reason, d.Why, want)
			}
		}
		st := e.Stats()
		allowed := uint64(0)
		for _, a := range c.allow {
			if a {
				allowed++
			}
		}
		if st.GuardReleased != allowed || st.OffloadedStorages != allowed || st.GuardKept != 3-allowed {
			t.Errorf("%v: stats released %d offloaded %d kept %d, want %d allowed", c.p, st.GuardReleased,
				st.OffloadedStorages, st.GuardKept, allowed)
		}
		if c.p == PolicySafe && (st.ReleasedExternal != 0 || got["rope"].Reason != tracker.Input ||
			got["out"].Reason != tracker.Output) {
			t.Errorf("safe: released external %d, rope %v, out %v", st.ReleasedExternal, got["rope"].Reason, got["out"].Reason)
		}
		if c.p == PolicyOutputsOnly && st.ReleasedExternal != 2 {
			t.Errorf("outputs-only: released external %d, want 2 (the input and the output)", st.ReleasedExternal)
		}
	}
}

// Under safe an input or output goes once the framework shows nothing but the group's saved tensors
// holds it, and stays while anything else does or nothing is known; it is not counted as external.
func TestGuardReleaseByHolders(t *testing.T) {
	e, _, _, _, got := guardedStepHeld(t, PolicySafe, map[string]tracker.Holders{"rope": 2, "act": 0, "out": 0})
	if d := got["rope"]; d.Allow || d.ByHolders || !strings.Contains(d.Why, "2 references outside its saved tensors") {
		t.Errorf("rope held twice elsewhere: %+v, want kept, saying by what", d)
	}
	if d := got["out"]; !d.Allow || !d.ByHolders || d.Reason != tracker.Output {
		t.Errorf("output nobody else holds: %+v, want released by holders", d)
	}
	if d := got["act"]; !d.Allow || d.ByHolders {
		t.Errorf("internal activation: %+v, want released, not by holders", d)
	}
	if st := e.Stats(); st.ReleasedExternal != 0 || st.GuardReleased != 2 || st.GuardKept != 1 {
		t.Errorf("stats: released external %d, released %d, kept %d; want 0, 2, 1", st.ReleasedExternal,
			st.GuardReleased, st.GuardKept)
	}
	_, _, _, _, got = guardedStepHeld(t, PolicyOff, map[string]tracker.Holders{"rope": 0, "act": 0, "out": 0})
	for name, d := range got {
		if d.Allow {
			t.Errorf("off: %s released with no other holder: %+v", name, d)
		}
	}
}

// An allowed release comes back by its token, not by its old address; an unknown storage is not the
// agent's to decide; a token without a framework release is refused.
func TestGuardRestoreByToken(t *testing.T) {
	e, rope, act, _, got := guardedStep(t, PolicySafe)
	d := got["act"]
	if _, err := e.GuardRestore(d.Handle, act.ptr()+1<<20, uint64(len(act.buf))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if st := e.Stats(); st.RestoredBytes != uint64(len(act.buf)) || st.SavedBytes != 0 {
		t.Errorf("after the restore: restored %d bytes, %d still released", st.RestoredBytes, st.SavedBytes)
	}
	if _, err := e.GuardRestore(d.Handle, act.ptr(), uint64(len(act.buf))); !errors.Is(err, ErrState) {
		t.Errorf("second restore: %v, want ErrState", err)
	}
	if _, err := e.GuardRestore(got["rope"].Handle, rope.ptr(), 4096); !errors.Is(err, ErrState) {
		t.Errorf("restore of a kept storage: %v, want ErrState", err)
	}
	other := newFW(t).tensor("other", 4096)
	if d, err := e.GuardRelease("", other.ptr(), 4096, tracker.HoldersUnknown); err != nil || !d.Allow || d.Known {
		t.Errorf("a storage no group saved: %+v, %v; want allowed, unknown", d, err)
	}
}

// The engine's holder rule (Engine.Holders): a layer input the layer saved goes once the framework counts
// no holder outside the group's saved tensors, counted once and restored bitwise for its backward; one
// something else holds, one with no count, a protected one and any under off stay.
func TestHoldersReleaseUnheldInputs(t *testing.T) {
	for _, p := range []Policy{PolicySafe, PolicyOff} {
		f := newFW(t)
		e := NewEngine(Config{Policy: p, Prefetch: 1, MinBytes: 1024}, NewMemcpyMover(), f, nil)
		ls := f.stack(4, 1, 4096)
		for _, l := range ls {
			l.saves = append(l.saves, l.pos[0]) // the layer's first operation saves its input
		}
		counts := []int64{0, 2, -1, 0}
		for i, l := range ls {
			f.forward(t, e, l)
			if i == 3 {
				if err := e.Protect(l.name, ptrs(l.pos)); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Holders(l.name, ptrs(l.pos), counts[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		e.completePending()
		for i, l := range ls {
			in := l.pos[0]
			want := 0
			if p == PolicySafe && i == 0 {
				want = 1
			}
			if got := f.released(in); got != want {
				t.Errorf("%v: input of %s (holders %d) released %d times, want %d", p, l.name, counts[i], got, want)
			}
			r, _ := e.KeepReason(l.hs[1])
			if wantR := tracker.Input; want == 1 {
				if tracker.Reason(r) != tracker.Internal {
					t.Errorf("%v: released input of %s has keep reason %v", p, l.name, tracker.Reason(r))
				}
			} else if i < 3 && tracker.Reason(r) != wantR {
				t.Errorf("%v: kept input of %s has keep reason %v, want %v", p, l.name, tracker.Reason(r), wantR)
			}
		}
		if st := e.Stats(); st.ReleasedExternal != 0 {
			t.Errorf("%v: %d external releases", p, st.ReleasedExternal)
		}
		for i := len(ls) - 1; i >= 0; i-- {
			f.backward(t, e, ls[i])
		}
		if err := e.Holders("g0", ptrs(ls[0].pos), []int64{0, 1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("mismatched counts: %v, want ErrInvalid", err)
		}
	}
}

// A layer input below the engine's threshold that nothing else holds loses its role but stays: small.
func TestHoldersKeepSmallInputs(t *testing.T) {
	f := newFW(t)
	e := NewEngine(Config{Policy: PolicySafe, Prefetch: 1, MinBytes: 1024}, NewMemcpyMover(), f, nil)
	in := f.tensor("in", 512)
	l := &layer{name: "g0", pos: []*tensor{in}, saves: []*tensor{in}, outs: []*tensor{f.tensor("out", 512)}}
	f.forward(t, e, l)
	if err := e.Holders("g0", ptrs(l.pos), []int64{0}); err != nil {
		t.Fatal(err)
	}
	e.completePending()
	if r, _ := e.KeepReason(l.hs[0]); tracker.Reason(r) != tracker.Small || f.released(in) != 0 {
		t.Errorf("small unheld input: reason %v, released %d times; want small, kept", tracker.Reason(r), f.released(in))
	}
	f.backward(t, e, l)
}
