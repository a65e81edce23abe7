package report

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/timeline"
	"swapagent/trace"
)

// The figures fold retires each handle at its group's backward_exit and keeps no history; every figure
// text and JSON print must be what the fold that keeps everything gives, on synthetic traces and on real
// runs under each policy (the engine's releases, the holders' evidence, external releases under unsafe).
func TestRetiringFoldPrintsTheSameFigures(t *testing.T) {
	traces := map[string]struct {
		h   trace.Header
		evs []trace.Event
	}{
		"workload":    {header(), workload()},
		"guard":       {header(), guardWorkload()},
		"failed exit": {header(), append(workload()[:len(workload())-4], trace.Event{Kind: trace.KindBackwardExit, Group: 1, Ret: int64(trace.CodeEORDER)})},
	}
	for _, policy := range []string{"safe", "unsafe", "off"} {
		out := t.TempDir()
		r := testenv.Run(t, 2*time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_POLICY="+policy),
			testenv.Path(t, testenv.DecoderSim), "--steps", "3", "--launch", "thread", "--sync", "step")
		files, err := trace.FindTraces(out)
		if r.Code != 0 || err != nil || len(files) != 1 {
			t.Fatalf("decoder-sim under %s: exit %d, traces %v (%v)\n%s", policy, r.Code, files, err, r.Stderr)
		}
		f, err := trace.Load(files[0])
		if err != nil {
			t.Fatal(err)
		}
		traces["decoder-sim "+policy] = struct {
			h   trace.Header
			evs []trace.Event
		}{f.Header, f.Events}
	}
	for name, tr := range traces {
		full := summarize("x", timeline.Fold(tr.h, tr.evs, timeline.Options{NoSeries: true}), &handleFigures{},
			nil, false)
		hf, retired := &handleFigures{}, 0
		var tl *timeline.Timeline
		tl = timeline.New(tr.h, timeline.Options{NoSeries: true, Retire: func(h *timeline.Handle) {
			retired++
			hf.add(tl, h)
		}})
		for i := range tr.evs {
			tl.Add(&tr.evs[i])
		}
		bounded := summarize("x", tl, hf, nil, false)
		var a, b bytes.Buffer
		if err := WriteJSON(&a, []*Summary{full}); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&b, []*Summary{bounded}); err != nil {
			t.Fatal(err)
		}
		var ta, tb bytes.Buffer
		if err := WriteText(&ta, []*Summary{full}); err != nil {
			t.Fatal(err)
		}
		if err := WriteText(&tb, []*Summary{bounded}); err != nil {
			t.Fatal(err)
		}
		if a.String() != b.String() || ta.String() != tb.String() {
			t.Errorf("%s: the retiring fold prints other figures:\nfull:\n%s\nretiring:\n%s", name, ta.String(), tb.String())
		}
		if retired == 0 && name != "failed exit" {
			t.Errorf("%s: nothing retired", name)
		}
		if name == "failed exit" && retired != 0 {
			t.Errorf("%s: %d handles retired at a backward_exit that failed", name, retired)
		}
		t.Logf("%s: %d handles retired, %d held at the end", name, retired, len(tl.Handles))
	}
}

// The retiring fold's memory does not grow with the trace's length: on a real run it never holds more
// than one step's handles, and it keeps no per-change history.
func TestRetiringFoldHoldsOneStep(t *testing.T) {
	out := t.TempDir()
	const steps = 12
	r := testenv.Run(t, 2*time.Minute, testenv.AgentEnv(t, out), testenv.Path(t, testenv.DecoderSim),
		"--steps", fmt.Sprint(steps), "--launch", "thread", "--sync", "step", "--streams", "2")
	files, err := trace.FindTraces(out)
	if r.Code != 0 || err != nil || len(files) != 1 {
		t.Fatalf("decoder-sim: exit %d, traces %v (%v)\n%s", r.Code, files, err, r.Stderr)
	}
	most := 0
	tl := timeline.New(trace.Header{}, timeline.Options{NoSeries: true, Retire: func(*timeline.Handle) {}})
	if _, err := trace.Scan(files[0], func(ev *trace.Event) {
		tl.Add(ev)
		most = max(most, len(tl.Handles))
	}); err != nil {
		t.Fatal(err)
	}
	perStep := int(tl.Count(trace.KindSave)) / steps
	if most == 0 || most > perStep || len(tl.Handles) != 0 {
		t.Errorf("held up to %d handles (%d at the end); a step saves %d", most, len(tl.Handles), perStep)
	}
	if len(tl.Transitions)+len(tl.Released)+len(tl.Inputs)+len(tl.Outputs) != 0 || tl.Moved.Releases == 0 {
		t.Errorf("history kept: %d transitions, %d released, %d inputs, %d outputs; %d releases summed",
			len(tl.Transitions), len(tl.Released), len(tl.Inputs), len(tl.Outputs), tl.Moved.Releases)
	}
}

// guardWorkload is a guarded group over two steps: its job's swap releases an unheld input (allowed) and
// asks to release the RoPE table that other layers hold (kept); a second group's engine keeps a held
// input. Each step ends with the groups' backward_exit.
func guardWorkload() []trace.Event {
	evs := []trace.Event{
		{Kind: trace.KindGroup, Group: 1, Text: "swap_group_0"},
		{Kind: trace.KindGroup, Group: 2, Text: "layer.1"},
		{Kind: trace.KindGuarded, Group: 1},
	}
	for step := range int64(2) {
		h := 10 * step
		ts := 1000 * step
		evs = append(evs,
			trace.Event{Kind: trace.KindRegionEnter, TS: ts, Group: 1, Ptrs: []uint64{0xB000, 0xE000},
				Args: [6]uint64{1}, Text: "hidden\x00f16\x002x4\x00\x00rotary_cos_sin[0]\x00f32\x004096x64\x00"},
			trace.Event{Kind: trace.KindSave, TS: ts + 1, Group: 1, Handle: h + 1, Args: [6]uint64{0xB000, 200}},
			trace.Event{Kind: trace.KindSave, TS: ts + 2, Group: 1, Handle: h + 2, Args: [6]uint64{0xE000, 4096}},
			trace.Event{Kind: trace.KindRegionExit, TS: ts + 3, Group: 1},
			classify(ts+4, 1, h+1, trace.KeepInput, 200),
			classify(ts+4, 1, h+2, trace.KeepInput, 4096),
			trace.Event{Kind: trace.KindGuard, TS: ts + 5, Group: 1, Handle: h + 1,
				Args: [6]uint64{0xB000, 200, trace.ReleaseAllow, trace.KeepInput + 1, trace.HoldersArg(0)}},
			trace.Event{Kind: trace.KindGuard, TS: ts + 6, Group: 1, Handle: h + 2,
				Args: [6]uint64{0xE000, 4096, trace.ReleaseKeep, trace.KeepInput + 1, trace.HoldersArg(3)}},
			trace.Event{Kind: trace.KindRegionEnter, TS: ts + 7, Group: 2, Ptrs: []uint64{0xE000}, Args: [6]uint64{0}},
			trace.Event{Kind: trace.KindSave, TS: ts + 8, Group: 2, Handle: h + 3, Args: [6]uint64{0xE000, 4096}},
			trace.Event{Kind: trace.KindRegionExit, TS: ts + 9, Group: 2},
			trace.Event{Kind: trace.KindClassify, TS: ts + 10, Group: 2, Handle: h + 3,
				Args: [6]uint64{0xE000, 4096, trace.KeepInput, 1, trace.HoldersArg(2)}},
			trace.Event{Kind: trace.KindGuardRestore, TS: ts + 11, Group: 1, Handle: 1},
			trace.Event{Kind: trace.KindBackwardExit, TS: ts + 12, Group: 2},
			trace.Event{Kind: trace.KindBackwardExit, TS: ts + 13, Group: 1},
		)
	}
	return evs
}

// A guarded input the framework counted two references to, both the layer's own machinery, is listed as
// released with their kinds; one with a reference beyond its own stays kept, held by that one.
func TestGuardListsTheLayersOwnHolders(t *testing.T) {
	evs := []trace.Event{
		{Kind: trace.KindGroup, Group: 1, Text: "swap_group_0"},
		{Kind: trace.KindGuarded, Group: 1},
		{Kind: trace.KindRegionEnter, TS: 1, Group: 1, Ptrs: []uint64{0xB000, 0xC000}, Args: [6]uint64{2},
			Text: "args[0]\tfloat32\t2,4\nargs[1]\tfloat32\t2,4"},
		{Kind: trace.KindSave, TS: 2, Group: 1, Handle: 1, Args: [6]uint64{0xB000, 200}},
		{Kind: trace.KindSave, TS: 3, Group: 1, Handle: 2, Args: [6]uint64{0xC000, 200}},
		{Kind: trace.KindRegionExit, TS: 4, Group: 1},
		classify(5, 1, 1, trace.KeepInput, 200),
		classify(5, 1, 2, trace.KeepInput, 200),
		{Kind: trace.KindGuard, TS: 6, Group: 1, Handle: 1, Args: [6]uint64{0xB000, 200, trace.ReleaseAllow,
			trace.KeepInput + 1, trace.HoldersArg(2), trace.OwnArg(2, trace.OwnViewBase|trace.OwnPacked)}},
		{Kind: trace.KindGuard, TS: 7, Group: 1, Handle: 2, Args: [6]uint64{0xC000, 200, trace.ReleaseKeep,
			trace.KeepInput + 1, trace.HoldersArg(2), trace.OwnArg(1, trace.OwnViewBase)}},
	}
	s := summarize("x", timeline.Fold(header(), evs, timeline.Options{NoSeries: true}), &handleFigures{}, nil, false)
	var out bytes.Buffer
	if err := WriteText(&out, []*Summary{s}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"released args[0] (input) in swap_group_0: 1 saves, 200 B; no other holder but the layer's own (view base, packed)",
		"kept args[1] (input) in swap_group_0: 1 saves, 200 B; held by 1 reference(s) outside its saved tensors",
	} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	g := s.Guard
	if g == nil || len(g.Released) != 1 || !slices.Equal(g.Released[0].Own, []string{"view base", "packed"}) ||
		len(g.Kept) != 1 || g.Kept[0].Held != 1 {
		t.Errorf("guard report: %+v", g)
	}
}
