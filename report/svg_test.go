// svg_test.go checks the SVG as a document and as a picture: it parses as XML, holds the marks a reader
// needs (axis titles and ticks, the in-use and reserved curves, step marks, one lane per swap group,
// labelled faults, a legend), keeps the structure pinned in testdata/svg-structure.golden, and renders
// to a PNG with rsvg-convert (Debian's librsvg2-bin).
package report

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"swapagent/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/svg-structure.golden")

// svgWorkload is two steps of two swapped groups: each step allocates while a group is swapped out, so
// the trace implies a saving.
func svgWorkload() []trace.Event {
	evs := []trace.Event{
		fn(fnMalloc, "aclrtMalloc"), fn(fnFree, "aclrtFree"),
		{Kind: trace.KindGroup, Group: 1, Text: "layer.0"},
		{Kind: trace.KindGroup, Group: 2, Text: "layer.1"},
		call(100, fnMalloc, 0, 0xA0000, 4<<20, 0),
	}
	ts := int64(1000)
	for step := range 2 {
		for g := uint32(1); g <= 2; g++ {
			h := int64(step*10) + int64(g)
			evs = append(evs,
				trace.Event{Kind: trace.KindRegionEnter, TS: ts, Group: g},
				trace.Event{Kind: trace.KindSave, TS: ts + 50, Group: g, Handle: h, Args: [6]uint64{0xC0000 + uint64(h)<<21, 2 << 20}},
				trace.Event{Kind: trace.KindRegionExit, TS: ts + 100, Group: g},
				state(ts+200, h, 0, 1, 2<<20), state(ts+900, h, 1, 2, 2<<20))
			ts += 1000
		}
		evs = append(evs, call(ts, fnMalloc, 0, uint64(0xB0000+step<<24), 3<<20, 0))
		ts += 500
		for g := uint32(2); g >= 1; g-- {
			h := int64(step*10) + int64(g)
			evs = append(evs, trace.Event{Kind: trace.KindBackwardEnter, TS: ts, Group: g},
				state(ts+100, h, 2, 3, 2<<20), state(ts+600, h, 3, 0, 2<<20))
			ts += 1000
		}
		evs = append(evs, call(ts, fnFree, 0, uint64(0xB0000+step<<24)))
		ts += 500
	}
	return append(evs, trace.Event{Kind: trace.KindFault, TS: ts - 2000, Text: faultJSON})
}

func svgSummary(t *testing.T) []*Summary {
	t.Helper()
	h2 := header()
	h2.PID, h2.Rank, h2.StartUnix = 4243, 4, h2.StartUnix+3000 // starts later: one shared time scale
	return []*Summary{Summarize("a", header(), svgWorkload(), false), Summarize("b", h2, svgWorkload(), false)}
}

func renderSVG(t *testing.T, sums []*Summary) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, sums); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// svgStructure describes an SVG's structure in a few lines: for each kind of element (tag.class) that
// has children, the kinds of its children in order of first appearance, with their counts. Identical
// lines (two panels alike) are written once.
func svgStructure(t *testing.T, svg []byte) string {
	t.Helper()
	var root svgNode
	if err := xml.Unmarshal(svg, &root); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	kind := func(n *svgNode) string {
		if c := n.attr("class"); c != "" {
			return n.XMLName.Local + "." + c
		}
		return n.XMLName.Local
	}
	var lines []string
	seen := map[string]bool{}
	root.walk(func(n *svgNode) {
		if len(n.Nodes) == 0 {
			return
		}
		var order []string
		count := map[string]int{}
		for i := range n.Nodes {
			k := kind(&n.Nodes[i])
			if count[k] == 0 {
				order = append(order, k)
			}
			count[k]++
		}
		parts := make([]string, len(order))
		for i, k := range order {
			parts[i] = k
			if count[k] > 1 {
				parts[i] += fmt.Sprintf(" x%d", count[k])
			}
		}
		line := kind(n) + ": " + strings.Join(parts, ", ")
		if !seen[line] {
			seen[line] = true
			lines = append(lines, line)
		}
	})
	return strings.Join(lines, "\n") + "\n"
}

func TestSVGMarks(t *testing.T) {
	svg := renderSVG(t, svgSummary(t))
	var root svgNode
	if err := xml.Unmarshal(svg, &root); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	count := map[string]int{}
	var axisTitles, faultLabels, lanes []string
	for i := range root.Nodes { // the legends' marks are counted apart
		for j := range root.Nodes[i].Nodes {
			if n := &root.Nodes[i].Nodes[j]; n.attr("class") == "legend" {
				count["legend items"] += len(n.Nodes) / 2
				n.Nodes = nil
			}
		}
	}
	root.walk(func(n *svgNode) {
		class := n.attr("class")
		count[n.XMLName.Local+"."+class]++
		switch class {
		case "axis-title":
			axisTitles = append(axisTitles, n.Text)
		case "fault-label":
			faultLabels = append(faultLabels, n.Text)
		case "lane":
			lanes = append(lanes, n.attr("data-group"))
		}
	})
	for k, want := range map[string]int{
		"g.process": 2, "polyline.in-use": 2, "polyline.reserved": 2, "polyline.no-swap": 2,
		"line.step": 4, "g.lane": 4, "rect.offload": 8, "rect.restore": 8, "circle.fault": 2, "g.legend": 2,
		"legend items": 14, "text.figures": 2, "text.fault-number": 2,
	} {
		if count[k] != want {
			t.Errorf("%s: %d, want %d", k, count[k], want)
		}
	}
	if count["line.tick"] < 12 || count["text.tick-label"] < 12 {
		t.Errorf("ticks %d, tick labels %d", count["line.tick"], count["text.tick-label"])
	}
	joined := strings.Join(axisTitles, "|")
	for _, w := range []string{"device memory", "time since the first process started (one scale for every panel)", "swap groups"} {
		if !strings.Contains(joined, w) {
			t.Errorf("axis titles %q lack %q", joined, w)
		}
	}
	if strings.Join(lanes, ",") != "layer.0,layer.1,layer.0,layer.1" {
		t.Errorf("lanes %v: want one per group in each panel", lanes)
	}
	if len(faultLabels) != 2 || !strings.HasPrefix(faultLabels[0], "1. at ") ||
		!strings.HasSuffix(faultLabels[0], ": fault in aclnnMul, address 0x0, storage 0x7f00, released by layer.0") {
		t.Errorf("fault labels %q", faultLabels)
	}
	// The title carries the memory figures as the text report does.
	s := svgSummary(t)[0]
	if s.Mem.SavedBytes != 4<<20 || !bytes.Contains(svg, []byte(esc(s.Mem.Text()))) {
		t.Errorf("figures %+v not in the title", s.Mem)
	}
}

// TestSVGStructureGolden pins the element structure: a change to the picture's layout shows up here
// (run with -update to accept it).
func TestSVGStructureGolden(t *testing.T) {
	got := svgStructure(t, renderSVG(t, svgSummary(t)))
	golden := filepath.Join("testdata", "svg-structure.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("SVG structure changed (go test ./report -run Golden -update to accept):\n--- got\n%s--- want\n%s", got, want)
	}
}

// TestSVGRendersToPNG checks the SVG as a picture: rsvg-convert (librsvg2-bin, installed by
// scripts/bootstrap.sh) renders it, and the PNG has the SVG's size and the curves' colours in it.
func TestSVGRendersToPNG(t *testing.T) {
	rsvg, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Fatal("rsvg-convert not found: install librsvg2-bin (scripts/bootstrap.sh does, as root)")
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "memory.svg"), filepath.Join(dir, "memory.png")
	svg := renderSVG(t, svgSummary(t))
	if err := os.WriteFile(in, svg, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(rsvg, "-o", out, in).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() == 0 {
		t.Fatalf("empty PNG: %v", err)
	}
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if img.Bounds().Dx() != svgWidth {
		t.Errorf("PNG is %d wide, want %d", img.Bounds().Dx(), svgWidth)
	}
	// The in-use curve's blue (#1f77b4) and the offload spans' orange (#ff7f0e) must be drawn.
	var blue, orange int
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			r, g, b = r>>8, g>>8, b>>8
			if b > 150 && r < 80 && g > 90 && g < 150 {
				blue++
			}
			if r > 230 && g > 100 && g < 170 && b < 90 {
				orange++
			}
		}
	}
	if blue < 100 || orange < 100 {
		t.Errorf("the picture lacks the curve (%d blue pixels) or the spans (%d orange pixels)", blue, orange)
	}
}
