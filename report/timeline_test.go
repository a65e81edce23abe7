// timeline_test.go checks the Perfetto and SVG renderers: their output parses and holds the memory
// curve, the swap spans and the fault markers.
package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"swapagent/trace"
)

func TestWritePerfetto(t *testing.T) {
	evs := append(workload(), call(9000, fnLaunch, 0, 0, 0, 0x99, 0x51, 1), call(9500, fnMemcpyAsync, 0, 1, 2, 3, 1, 3, 0x52))
	sums := []*Summary{Summarize("a", header(), evs, false)}
	h2 := header()
	h2.PID, h2.StartUnix = 99, h2.StartUnix+1_000_000
	sums = append(sums, Summarize("b", h2, workload(), false))
	var buf bytes.Buffer
	if err := WritePerfetto(&buf, sums); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	count := map[string]int{}
	for _, e := range doc.TraceEvents {
		for _, k := range []string{"name", "ph", "ts", "pid", "tid"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("event lacks %q: %v", k, e)
			}
		}
		ph, name := e["ph"].(string), e["name"].(string)
		count[ph]++
		switch {
		case ph == "C" && name == "device memory":
			count["memory"]++
		case ph == "X" && strings.HasPrefix(name, "offload layer.0"):
			count["offload"]++
		case ph == "X" && strings.HasPrefix(name, "restore layer.0"):
			count["restore"]++
		case ph == "X" && name == "aclnnMul":
			count["launch"]++
			if e["dur"].(float64) <= 0 {
				t.Errorf("launch without duration: %v", e)
			}
		case ph == "i" && e["name"] == "fault in aclnnMul":
			count["fault"]++
			if args := e["args"].(map[string]any); args["released_by"] != "layer.0" {
				t.Errorf("fault args %v", args)
			}
		case ph == "M" && name == "thread_name" && strings.HasPrefix(e["args"].(map[string]any)["name"].(string), "stream "):
			count["stream tracks"]++
		}
		if e["pid"].(float64) == 99 && e["ph"] != "M" && e["ts"].(float64) < 1000 {
			t.Errorf("second process not offset by its start time: %v", e)
		}
	}
	for k, want := range map[string]int{"memory": 8, "offload": 2, "restore": 2, "launch": 3, "fault": 2, "stream tracks": 4} {
		if count[k] != want {
			t.Errorf("%s: %d events, want %d (all: %v)", k, count[k], want, count)
		}
	}
}

func TestWritePerfettoCap(t *testing.T) {
	evs := []trace.Event{fn(fnLaunch, "aclnnMul")}
	const limit = 1000
	for i := range limit + 10 {
		evs = append(evs, call(int64(i), fnLaunch, 0, 0, 0, 0, 0x51, 0))
	}
	evs = append(evs, trace.Event{Kind: trace.KindFault, TS: 1, Text: faultJSON})
	var buf bytes.Buffer
	if err := writePerfetto(&buf, []*Summary{Summarize("a", header(), evs, false)}, limit); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string `json:"name"`
			Ph   string `json:"ph"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.TraceEvents) != limit {
		t.Errorf("%d events, want the cap %d", len(doc.TraceEvents), limit)
	}
	var note, fault bool
	for _, e := range doc.TraceEvents {
		note = note || strings.HasPrefix(e.Name, "note: output capped")
		fault = fault || e.Name == "fault in aclnnMul"
	}
	if !note || !fault {
		t.Errorf("note %v fault %v: the cap must keep faults and say what it dropped", note, fault)
	}
}

// svgNode is a generic XML element for walking the SVG.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []svgNode  `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n *svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *svgNode) walk(f func(*svgNode)) {
	f(n)
	for i := range n.Nodes {
		n.Nodes[i].walk(f)
	}
}

func TestWriteSVG(t *testing.T) {
	s := Summarize("a", header(), workload(), false)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, []*Summary{s, s}); err != nil {
		t.Fatal(err)
	}
	var root svgNode
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("not XML: %v\n%s", err, buf.String())
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if cd, ok := tok.(xml.CharData); err != nil || !ok || strings.TrimSpace(string(cd)) != "" {
			t.Fatalf("content after the root element: %v %v", tok, err)
		}
	}
	if root.XMLName.Local != "svg" || root.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root %v", root.XMLName)
	}
	count := map[string]int{}
	root.walk(func(n *svgNode) {
		class := n.attr("class")
		count[n.XMLName.Local+"."+class]++
		if n.XMLName.Local == "polyline" && class == "memory" {
			pts := strings.Fields(n.attr("points"))
			// start, two per change (4 changes), end
			if len(pts) != 10 {
				t.Errorf("memory curve has %d points: %v", len(pts), pts)
			}
		}
		if n.XMLName.Local == "circle" && class == "fault" {
			var title string
			for _, c := range n.Nodes {
				if c.XMLName.Local == "title" {
					title = c.Text
				}
			}
			if !strings.Contains(title, `owner="input of layer.1"`) {
				t.Errorf("fault title %q", title)
			}
		}
	})
	for k, want := range map[string]int{"polyline.memory": 2, "circle.fault": 2, "rect.offload": 2, "rect.restore": 2, "g.process": 2} {
		if count[k] != want {
			t.Errorf("%s: %d, want %d", k, count[k], want)
		}
	}
}

func TestDownsample(t *testing.T) {
	var pts []MemPoint
	for i := range 1000 {
		pts = append(pts, MemPoint{int64(i), uint64(i % 97)})
	}
	pts[500].Bytes = 10_000
	out := downsample(pts, 50, 500)
	if len(out) > 52 || out[0] != pts[0] || out[len(out)-1] != pts[999] {
		t.Fatalf("%d points, ends %v %v", len(out), out[0], out[len(out)-1])
	}
	found := false
	for i, p := range out {
		found = found || p.Bytes == 10_000
		if i > 0 && p.TS < out[i-1].TS {
			t.Fatalf("not sorted at %d", i)
		}
	}
	if !found {
		t.Error("peak dropped")
	}
}
