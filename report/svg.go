// svg.go owns `report --format svg`: one panel per process with live device memory over time (a step
// polyline), the groups' offload and restore spans in a band below it, and each fault marked with a
// <circle class="fault"> on the curve. Hand-written SVG: no dependency, opens in any browser.
package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
)

// SVG geometry of one panel.
const (
	svgWidth   = 960
	svgPanel   = 280
	svgLeft    = 80
	svgRight   = 940
	svgTop     = 40
	svgBottom  = 200
	svgBand    = 212 // top of the swap band
	svgBandH   = 22
	svgMaxPts  = 4000
	svgFaultR  = 5
	svgPadding = 10
)

const svgStyle = `<style>
text{font:12px sans-serif;fill:#333}
.title{font-weight:bold}
.axis{stroke:#999;stroke-width:1}
.memory{fill:none;stroke:#1f77b4;stroke-width:1.5}
.offload{fill:#ff7f0e;fill-opacity:.7}
.restore{fill:#2ca02c;fill-opacity:.7}
.fault{fill:#d62728;stroke:#fff;stroke-width:1}
</style>`

// WriteSVG writes one SVG document with a panel per process.
func WriteSVG(w io.Writer, sums []*Summary) error {
	bw := bufio.NewWriter(w)
	height := max(len(sums), 1)*svgPanel + svgPadding
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n",
		svgWidth, height, svgWidth, height)
	bw.WriteString(svgStyle + "\n")
	for i, s := range sums {
		fmt.Fprintf(bw, `<g class="process" transform="translate(0,%d)">`+"\n", i*svgPanel)
		svgPanelOf(bw, s)
		bw.WriteString("</g>\n")
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

func svgPanelOf(w io.Writer, s *Summary) {
	end := max(s.EndNS, 1)
	peak := max(s.Device.PeakBytes, 1)
	x := func(ts int64) float64 {
		return svgLeft + float64(min(max(ts, 0), end))/float64(end)*(svgRight-svgLeft)
	}
	y := func(b uint64) float64 { return svgBottom - float64(b)/float64(peak)*(svgBottom-svgTop) }
	esc := html.EscapeString

	title := fmt.Sprintf("pid %d", s.Header.PID)
	if s.Header.Rank >= 0 {
		title += fmt.Sprintf(" rank %d", s.Header.Rank)
	}
	if s.Header.Host != "" {
		title += " on " + s.Header.Host
	}
	title += fmt.Sprintf(": device memory, peak %s, %d fault(s)", Bytes(s.Device.PeakBytes), len(s.Faults))
	fmt.Fprintf(w, `<text class="title" x="%d" y="%d">%s</text>`+"\n", svgLeft, svgTop-16, esc(title))

	// Axes and their labels.
	fmt.Fprintf(w, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", svgLeft, svgTop, svgLeft, svgBottom)
	fmt.Fprintf(w, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", svgLeft, svgBottom, svgRight, svgBottom)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-4, svgTop+4, esc(Bytes(s.Device.PeakBytes)))
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">0</text>`+"\n", svgLeft-4, svgBottom+4)
	fmt.Fprintf(w, `<text x="%d" y="%d">0</text>`+"\n", svgLeft, svgBand+svgBandH+16)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgRight, svgBand+svgBandH+16, esc(durString(s.EndNS)))
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">swap</text>`+"\n", svgLeft-4, svgBand+svgBandH-6)
	svgLegend(w)

	// The memory curve as steps: it holds its value until the next change.
	series := downsample(s.Device.Series, svgMaxPts, s.Device.PeakAtNS)
	var pts strings.Builder
	prev := uint64(0)
	fmt.Fprintf(&pts, "%.1f,%.1f", x(0), y(0))
	for _, p := range series {
		fmt.Fprintf(&pts, " %.1f,%.1f %.1f,%.1f", x(p.TS), y(prev), x(p.TS), y(p.Bytes))
		prev = p.Bytes
	}
	fmt.Fprintf(&pts, " %.1f,%.1f", x(end), y(prev))
	fmt.Fprintf(w, `<polyline class="memory" points="%s"><title>live device bytes</title></polyline>`+"\n", pts.String())

	for _, sp := range s.Spans {
		class, verb := "offload", "offload"
		if sp.Restore {
			class, verb = "restore", "restore"
		}
		fmt.Fprintf(w, `<rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`+"\n",
			class, x(sp.Start), svgBand, max(x(sp.End)-x(sp.Start), 1), svgBandH,
			esc(fmt.Sprintf("%s %s: %d storages, %s, %s", verb, sp.Group, sp.Handles, Bytes(sp.Bytes),
				durString(sp.End-sp.Start))))
	}

	for _, f := range s.Faults {
		what := faultText(f.Raw)
		fmt.Fprintf(w, `<circle class="fault" cx="%.1f" cy="%.1f" r="%d"><title>%s</title></circle>`+"\n",
			x(f.TS), y(liveAt(s.Device.Series, f.TS)), svgFaultR, esc("fault at +"+durString(f.TS)+": "+what))
	}
}

// svgLegend names the marks at the top right of a panel.
func svgLegend(w io.Writer) {
	x := float64(svgRight - 335)
	for _, it := range []struct{ class, text string }{
		{"offload", "offload (copy out, release)"}, {"restore", "restore"}, {"fault", "fault"}} {
		if it.class == "fault" {
			fmt.Fprintf(w, `<circle class="fault legend" cx="%.0f" cy="%d" r="%d"/>`, x+5, svgTop-21, svgFaultR)
		} else {
			fmt.Fprintf(w, `<rect class="%s legend" x="%.0f" y="%d" width="10" height="10"/>`, it.class, x, svgTop-26)
		}
		fmt.Fprintf(w, `<text x="%.0f" y="%d">%s</text>`+"\n", x+14, svgTop-17, it.text)
		x += 14 + 6.5*float64(len(it.text)) + 12
	}
}

// liveAt is the live byte count at ts (after every change at or before it).
func liveAt(series []MemPoint, ts int64) uint64 {
	i := sort.Search(len(series), func(i int) bool { return series[i].TS > ts })
	if i == 0 {
		return 0
	}
	return series[i-1].Bytes
}
