// svg.go owns `report --format svg`: one panel per process, all on one time scale. Each panel has a
// memory chart (the in-use curve, the curve of what the pool reserved from the runtime, the no-swap
// curve the trace implies, VMM address space when reserved) with ticked and titled axes, step boundaries
// and labelled fault marks, then one lane per swap group with its offload and restore spans, and a
// legend. Hand-written SVG: no dependency, opens in any browser, renders with rsvg-convert.
package report

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"swapagent/internal/cli"
)

// SVG geometry (pixels).
const (
	svgWidth     = 1000
	svgLeft      = 96  // plot area starts here: y tick labels and the y-axis title are left of it
	svgRight     = 980 // plot area ends here
	svgTitleY    = 18  // panel title baseline: who
	svgFiguresY  = 34  // the memory figures
	svgLegendY   = 52  // legend baseline
	svgPlotTop   = 66
	svgPlotH     = 190
	svgAxisGap   = 44 // x tick labels and the x-axis title below the plot
	svgLaneH     = 12
	svgLaneGap   = 3
	svgPanelPad  = 16
	svgMaxPts    = 4000
	svgFaultR    = 5
	svgMaxLabels = 8 // fault labels per panel; the others keep their hover text
	// svgFaultNumberW: marks closer than this (px) share one number over the first ("3-5"): numbers of a
	// burst would print over each other.
	svgFaultNumberW = 14.0
	svgFaultLine    = 15
	svgMaxSteps     = 24
)

const svgStyle = `<style>
text{font:12px sans-serif;fill:#333}
.title{font-weight:bold}
.axis{stroke:#555;stroke-width:1}
.tick{stroke:#555;stroke-width:1}
.grid{stroke:#ddd;stroke-width:1}
.axis-title{font-style:italic}
.in-use{fill:none;stroke:#1f77b4;stroke-width:1.5}
.reserved{fill:none;stroke:#7f7f7f;stroke-width:1.2}
.no-swap{fill:none;stroke:#9467bd;stroke-width:1.2;stroke-dasharray:5 3}
.address-space{fill:none;stroke:#bcbd22;stroke-width:1;stroke-dasharray:2 2}
.step{stroke:#aaa;stroke-width:1;stroke-dasharray:3 3}
.lane-bg{fill:#f4f4f4}
.offload{fill:#ff7f0e;fill-opacity:.8}
.restore{fill:#2ca02c;fill-opacity:.8}
.lost{fill:#d62728;fill-opacity:.12}
.fault{fill:#d62728;stroke:#fff;stroke-width:1}
.fault-label{fill:#d62728;font-size:11px}
.fault-number{fill:#d62728;font-size:10px;font-weight:bold}
</style>`

// svgScale maps one time axis shared by every panel: nanoseconds since the earliest process start.
type svgScale struct {
	end    int64 // last time shown
	shared bool  // several processes
}

func (sc svgScale) x(ns int64) float64 {
	return svgLeft + float64(min(max(ns, 0), sc.end))/float64(max(sc.end, 1))*(svgRight-svgLeft)
}

// WriteSVG writes one SVG document with a panel per process on one shared time axis.
func WriteSVG(w io.Writer, sums []*Summary) error {
	base := int64(math.MaxInt64)
	for _, s := range sums {
		base = min(base, s.Header.StartUnix)
	}
	sc := svgScale{shared: len(sums) > 1}
	offsets := make([]int64, len(sums))
	for i, s := range sums {
		offsets[i] = s.Header.StartUnix - base
		sc.end = max(sc.end, offsets[i]+s.EndNS)
	}
	heights := make([]int, len(sums))
	total := svgPanelPad
	for i, s := range sums {
		heights[i] = svgPanelHeight(s)
		total += heights[i]
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n",
		svgWidth, total, svgWidth, total)
	bw.WriteString(svgStyle + "\n")
	fmt.Fprintf(bw, `<rect class="background" x="0" y="0" width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, total)
	y := 0
	for i, s := range sums {
		fmt.Fprintf(bw, `<g class="process" transform="translate(0,%d)">`+"\n", y)
		svgPanelOf(bw, s, sc, offsets[i])
		bw.WriteString("</g>\n")
		y += heights[i]
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// svgGroups are the swap groups of a panel, one lane each: the trace's groups, then any group only a
// span names.
func svgGroups(s *Summary) []string {
	out := append([]string(nil), s.ABI.Groups...)
	seen := map[string]bool{}
	for _, g := range out {
		seen[g] = true
	}
	for _, sp := range s.Spans {
		if !seen[sp.Group] {
			seen[sp.Group] = true
			out = append(out, sp.Group)
		}
	}
	return out
}

func svgPanelHeight(s *Summary) int {
	return svgPlotTop + svgPlotH + svgAxisGap + 18 + len(svgGroups(s))*(svgLaneH+svgLaneGap) +
		min(len(s.Faults), svgMaxLabels+1)*svgFaultLine + svgPanelPad
}

// esc makes text from a trace safe for SVG: control characters escaped (XML cannot hold them), then markup.
func esc(s string) string { return html.EscapeString(cli.Escape(s)) }

func svgPanelOf(w io.Writer, s *Summary, sc svgScale, offset int64) {
	x := func(ts int64) float64 { return sc.x(offset + ts) }
	top := max(s.Mem.PeakNoSwap, s.Device.PeakBytes, s.Reserved.PeakBytes, 1)
	yStep, yTop := niceBytes(top)
	plotBottom := float64(svgPlotTop + svgPlotH)
	y := func(b uint64) float64 { return plotBottom - float64(b)/float64(yTop)*svgPlotH }

	// Title: who, and the memory figures as text and JSON give them.
	who := fmt.Sprintf("pid %d", s.Header.PID)
	if s.Header.Rank >= 0 {
		who += fmt.Sprintf(" rank %d", s.Header.Rank)
	}
	if s.Header.Host != "" {
		who += " on " + s.Header.Host
	}
	fmt.Fprintf(w, `<text class="title" x="%d" y="%d">%s<title>%s</title></text>`+"\n", 8, svgTitleY,
		esc(shorten(who+": "+argvString(s.Header.Argv), 140)), esc(who+": "+argvString(s.Header.Argv)))
	fmt.Fprintf(w, `<text class="figures" x="%d" y="%d">device memory: %s; %d fault(s)<title>%s</title></text>`+"\n",
		8, svgFiguresY, esc(s.Mem.Text()), len(s.Stats.Faults), esc(strings.TrimSpace(s.Mem.Text()+". "+s.Mem.Detail())))
	svgLegend(w, s)

	// Axes, grid, ticks and titles.
	fmt.Fprintf(w, `<g class="y-axis">`+"\n")
	for i := uint64(0); i <= yTop/yStep; i++ { // by count: a step added to a top near 2^64 would wrap
		v := i * yStep
		fmt.Fprintf(w, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, svgLeft, y(v), svgRight, y(v))
		fmt.Fprintf(w, `<line class="tick" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, svgLeft-4, y(v), svgLeft, y(v))
		fmt.Fprintf(w, `<text class="tick-label" x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", svgLeft-6, y(v)+4, esc(Bytes(v)))
	}
	fmt.Fprintf(w, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%.0f"/>`+"\n", svgLeft, svgPlotTop, svgLeft, plotBottom)
	fmt.Fprintf(w, `<text class="axis-title" transform="translate(14,%.0f) rotate(-90)" text-anchor="middle">device memory</text>`+"\n",
		svgPlotTop+svgPlotH/2.0)
	fmt.Fprintf(w, "</g>\n")

	fmt.Fprintf(w, `<g class="x-axis">`+"\n")
	fmt.Fprintf(w, `<line class="axis" x1="%d" y1="%.0f" x2="%d" y2="%.0f"/>`+"\n", svgLeft, plotBottom, svgRight, plotBottom)
	tStep, tTop := niceTime(sc.end)
	for i := int64(0); i <= tTop/tStep; i++ {
		t := i * tStep
		fmt.Fprintf(w, `<line class="tick" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/>`, sc.x(t), plotBottom, sc.x(t), plotBottom+4)
		fmt.Fprintf(w, `<text class="tick-label" x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", sc.x(t), plotBottom+16, timeLabel(t, tStep))
	}
	axis := "time since the process started"
	if sc.shared {
		axis = "time since the first process started (one scale for every panel)"
	}
	fmt.Fprintf(w, `<text class="axis-title" x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
		(svgLeft+svgRight)/2.0, plotBottom+32, axis)
	fmt.Fprintf(w, "</g>\n")

	// Lost stretches of the trace, shaded, so a flat curve there is not read as a fact.
	for _, g := range s.Gaps {
		to := g.ToTS
		if to < 0 {
			to = s.EndNS
		}
		fmt.Fprintf(w, `<rect class="lost" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`+"\n",
			x(g.FromTS), svgPlotTop, max(x(to)-x(g.FromTS), 1), svgPlotH, esc(g.String()))
	}

	// Step boundaries: each new forward pass of the first swap group.
	every := (len(s.Steps) + svgMaxSteps - 1) / svgMaxSteps
	for i, ts := range s.Steps {
		fmt.Fprintf(w, `<line class="step" x1="%.1f" y1="%d" x2="%.1f" y2="%.0f"><title>step %d starts at +%s</title></line>`,
			x(ts), svgPlotTop, x(ts), plotBottom, i+1, durString(ts))
		if i%max(every, 1) == 0 {
			fmt.Fprintf(w, `<text class="step-label" x="%.1f" y="%d">step %d</text>`, x(ts)+2, svgPlotTop+10, i+1)
		}
		fmt.Fprintln(w)
	}

	// The curves, as steps: each holds its value until the next change.
	curve := func(class, what string, pts []MemPoint, peakTS int64) {
		series := downsample(pts, svgMaxPts, peakTS)
		var b strings.Builder
		prev := uint64(0)
		fmt.Fprintf(&b, "%.1f,%.1f", x(0), y(0))
		for _, p := range series {
			fmt.Fprintf(&b, " %.1f,%.1f %.1f,%.1f", x(p.TS), y(prev), x(p.TS), y(p.Bytes))
			prev = p.Bytes
		}
		fmt.Fprintf(&b, " %.1f,%.1f", x(s.EndNS), y(prev))
		fmt.Fprintf(w, `<polyline class="%s" points="%s"><title>%s</title></polyline>`+"\n", class, b.String(), esc(what))
	}
	if s.Reserved.Allocs > 0 {
		curve("address-space", "VMM address space reserved (not memory), peak "+Bytes(s.Reserved.PeakBytes), s.Reserved.Series, s.Reserved.PeakAtNS)
	}
	if s.Mem.SavedBytes > 0 {
		curve("no-swap", "without swap (implied by the trace), peak "+Bytes(s.Mem.PeakNoSwap), s.Foot.NoSwap, s.Mem.PeakNoSwapAtNS)
	}
	curve("reserved", "reserved by the pool ("+s.Mem.Source+"), peak "+Bytes(s.Device.PeakBytes), s.Device.Series, s.Device.PeakAtNS)
	curve("in-use", "in use with swap, peak "+Bytes(s.Mem.PeakInUse), s.Foot.InUse, s.Device.PeakAtNS)

	// Faults, marked on the in-use curve with their number; the numbered list under the lanes says what
	// each is (labels on the curve would cover each other: faults come in bursts).
	// Marks closer than a number's width share one number, "3-5", over the first of them.
	for i := 0; i < len(s.Faults); {
		j := i
		for j+1 < len(s.Faults) && x(s.Faults[j+1].TS)-x(s.Faults[i].TS) < svgFaultNumberW {
			j++
		}
		for k := i; k <= j; k++ {
			f := s.Faults[k]
			fmt.Fprintf(w, `<circle class="fault" cx="%.1f" cy="%.1f" r="%d"><title>%s</title></circle>`+"\n",
				x(f.TS), y(liveAt(s.Foot.InUse, f.TS)), svgFaultR,
				esc(fmt.Sprintf("fault %d at +%s: %s", k+1, durString(f.TS), faultText(f.Raw))))
		}
		if i < svgMaxLabels {
			num := strconv.Itoa(i + 1)
			if j > i {
				num += "-" + strconv.Itoa(min(j, svgMaxLabels-1)+1)
			}
			fmt.Fprintf(w, `<text class="fault-number" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
				x(s.Faults[i].TS), y(liveAt(s.Foot.InUse, s.Faults[i].TS))-svgFaultR-2, num)
		}
		i = j + 1
	}

	// One lane per swap group.
	laneTop := int(plotBottom) + svgAxisGap
	fmt.Fprintf(w, `<text class="axis-title" x="%d" y="%d">swap groups: offload (copy out, then release) and restore spans</text>`+"\n",
		svgLeft, laneTop+2)
	spans := map[string][]Span{}
	for _, sp := range s.Spans {
		spans[sp.Group] = append(spans[sp.Group], sp)
	}
	for i, g := range svgGroups(s) {
		ly := laneTop + 8 + i*(svgLaneH+svgLaneGap)
		fmt.Fprintf(w, `<g class="lane" data-group="%s">`, esc(g))
		fmt.Fprintf(w, `<rect class="lane-bg" x="%d" y="%d" width="%d" height="%d"/>`, svgLeft, ly, svgRight-svgLeft, svgLaneH)
		fmt.Fprintf(w, `<text class="lane-label" x="%d" y="%d" text-anchor="end">%s</text>`, svgLeft-6, ly+svgLaneH-2, esc(shorten(g, 14)))
		for _, sp := range spans[g] {
			class := "offload"
			if sp.Restore {
				class = "restore"
			}
			fmt.Fprintf(w, `<rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`,
				class, x(sp.Start), ly, max(x(sp.End)-x(sp.Start), 1), svgLaneH,
				esc(fmt.Sprintf("%s %s: %d storages, %s, %s", class, sp.Group, sp.Handles, Bytes(sp.Bytes),
					durString(sp.End-sp.Start))))
		}
		fmt.Fprintf(w, "</g>\n")
	}
	svgFaultList(w, s, offset, laneTop+8+len(svgGroups(s))*(svgLaneH+svgLaneGap)+14)
}

// svgFaultList writes the numbered fault labels, one line each, from y down; times are on the time
// axis (offset: the process's start on it).
func svgFaultList(w io.Writer, s *Summary, offset int64, y int) {
	for i, f := range s.Faults {
		if i == svgMaxLabels {
			fmt.Fprintf(w, `<text class="fault-label" x="%d" y="%d">… and %d more faults (hover a mark for each)</text>`+"\n",
				svgLeft, y+i*svgFaultLine, len(s.Faults)-svgMaxLabels)
			return
		}
		label := fmt.Sprintf("%d. at %s: fault", i+1, durString(offset+f.TS))
		if k, ok := f.Fields["kernel"].(string); ok && k != "" {
			if strings.HasPrefix(k, "region_enter(") {
				label += " at " + k
			} else {
				label += " in " + k
			}
		}
		if a, ok := f.Fields["addr"]; ok {
			label += ", address " + scalar("addr", a)
		}
		if st, ok := f.Fields["storage"]; ok {
			label += ", storage " + scalar("storage", st)
		}
		if by, ok := f.Fields["released_by"].(string); ok && by != "" {
			label += ", released by " + by
		}
		if d, ok := f.Fields["detected"].(string); ok && d != "" {
			label += " (" + detectedWords(d) + ")"
		}
		fmt.Fprintf(w, `<text class="fault-label" x="%d" y="%d">%s</text>`+"\n", svgLeft, y+i*svgFaultLine, esc(shorten(label, 140)))
	}
}

// svgLegend names every mark the panel uses.
func svgLegend(w io.Writer, s *Summary) {
	type item struct{ class, shape, text string }
	items := []item{{"in-use", "line", "in use"}, {"reserved", "line", "reserved by the pool (" + s.Mem.Source + ")"}}
	if s.Mem.SavedBytes > 0 {
		items = append(items, item{"no-swap", "line", "without swap (implied)"})
	}
	if s.Reserved.Allocs > 0 {
		items = append(items, item{"address-space", "line", "VMM address space"})
	}
	items = append(items, item{"step", "line", "step"}, item{"offload", "rect", "offload"},
		item{"restore", "rect", "restore"}, item{"fault", "circle", "fault"})
	fmt.Fprintf(w, `<g class="legend">`)
	x := float64(svgLeft)
	for _, it := range items {
		switch it.shape {
		case "line":
			fmt.Fprintf(w, `<line class="%s" x1="%.0f" y1="%d" x2="%.0f" y2="%d"/>`, it.class, x, svgLegendY-4, x+16, svgLegendY-4)
		case "rect":
			fmt.Fprintf(w, `<rect class="%s" x="%.0f" y="%d" width="14" height="10"/>`, it.class, x, svgLegendY-10)
		case "circle":
			fmt.Fprintf(w, `<circle class="%s" cx="%.0f" cy="%d" r="%d"/>`, it.class, x+7, svgLegendY-4, svgFaultR)
		}
		fmt.Fprintf(w, `<text x="%.0f" y="%d">%s</text>`, x+20, svgLegendY, esc(it.text))
		x += 20 + 6.4*float64(len(it.text)) + 14
	}
	fmt.Fprintf(w, "</g>\n")
}

// niceBytes picks a tick step for a byte axis reaching at least top: the smallest power of two (1, 2,
// 4 ... MiB) that needs at most 6 ticks, and the axis top, a multiple of it.
func niceBytes(top uint64) (step, axisTop uint64) {
	ticks := func(s uint64) uint64 { return top/s + min(top%s, 1) } // ceil(top/s) without overflow
	step = 1
	for ticks(step) > 6 && step < 1<<62 {
		step *= 2
	}
	return step, ticks(step) * step
}

// niceTime picks a tick step of 1, 2 or 5 times a power of ten nanoseconds, so that at most 9 ticks fit.
func niceTime(end int64) (step, top int64) {
	end = max(end, 1)
	for p := int64(1); p <= 1e18; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if s := m * p; end/s <= 8 {
				return s, end / s * s
			}
		}
	}
	return 1e18, end / 1e18 * 1e18
}

// timeLabel writes a tick's time in the unit its step needs.
func timeLabel(t, step int64) string {
	switch {
	case step >= 1e9:
		return fmt.Sprintf("%gs", float64(t)/1e9)
	case step >= 1e6:
		return fmt.Sprintf("%gms", float64(t)/1e6)
	case step >= 1e3:
		return fmt.Sprintf("%gµs", float64(t)/1e3)
	}
	return fmt.Sprintf("%dns", t)
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// liveAt is the byte count at ts (after every change at or before it).
func liveAt(series []MemPoint, ts int64) uint64 {
	i := sort.Search(len(series), func(i int) bool { return series[i].TS > ts })
	if i == 0 {
		return 0
	}
	return series[i-1].Bytes
}

// detectedWords says where the agent caught a fault (trace.Fault's Detected) in a reader's words.
func detectedWords(d string) string {
	switch d {
	case "launch":
		return "found at the kernel's launch"
	case "race":
		return "found at the kernel's launch, reading a storage the policy moved"
	case "sync":
		return "found at a stream sync"
	case "region_enter":
		return "found at its region's entry"
	}
	return "found at " + d
}
