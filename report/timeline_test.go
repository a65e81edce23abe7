// timeline_test.go checks the Perfetto and SVG renderers: their output parses and holds the memory
// curve, the swap spans and the fault markers.
package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
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
		case ph == "C" && name == "device memory held (runtime allocations)":
			count["memory"]++
		case ph == "C" && name == "device memory in use":
			count["in use"]++
		case ph == "i" && name == "memory figures":
			count["figures"]++
			if args := e["args"].(map[string]any); args["peak_in_use_bytes"] != float64(300) || args["saved_bytes"] != float64(0) {
				t.Errorf("memory figures %v", args)
			}
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
			if args := e["args"].(map[string]any); args["released_by"] != "layer.0" || args["addr"] != "0x0" || args["storage"] != "0x7f00" {
				t.Errorf("fault args %v", args)
			}
		case ph == "M" && name == "thread_name" && strings.HasPrefix(e["args"].(map[string]any)["name"].(string), "stream "):
			count["stream tracks"]++
		}
		if e["pid"].(float64) == 99 && e["ph"] != "M" && e["ts"].(float64) < 1000 {
			t.Errorf("second process not offset by its start time: %v", e)
		}
	}
	for k, want := range map[string]int{"memory": 8, "in use": 12, "figures": 2, "offload": 2, "restore": 2, "launch": 3, "fault": 2, "stream tracks": 4} {
		if count[k] != want {
			t.Errorf("%s: %d events, want %d (all: %v)", k, count[k], want, count)
		}
	}
}

// TestPerfettoSamePIDOnTwoHosts: two ranks on two nodes with the same pid are two processes.
func TestPerfettoSamePIDOnTwoHosts(t *testing.T) {
	h1, h2 := header(), header()
	h2.Host, h2.Rank = "node2", 4
	var buf bytes.Buffer
	if err := WritePerfetto(&buf, []*Summary{Summarize("a", h1, workload(), false), Summarize("b", h2, workload(), false)}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			PID  int            `json:"pid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	faults := map[int]int{}
	for _, e := range doc.TraceEvents {
		switch e.Name {
		case "process_name":
			names[e.PID] = e.Args["name"].(string)
		case "fault in aclnnMul":
			faults[e.PID]++
		}
	}
	if len(names) != 2 || len(faults) != 2 {
		t.Fatalf("processes %v, faults per process %v: want two processes", names, faults)
	}
	var hosts []string
	for _, n := range names {
		if !strings.HasPrefix(n, "pid 4242 ") {
			t.Errorf("process name %q does not keep the real pid", n)
		}
		hosts = append(hosts, n)
	}
	if !(strings.Contains(hosts[0]+hosts[1], "on node1") && strings.Contains(hosts[0]+hosts[1], "on node2")) {
		t.Errorf("process names %v", hosts)
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

func TestDownsample(t *testing.T) {
	var pts []MemPoint
	for i := range 1000 {
		pts = append(pts, MemPoint{TS: int64(i), Bytes: uint64(i % 97)})
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
