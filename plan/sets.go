// sets.go owns the search beyond contiguous ranges: any set of the declared layers (what a layer list,
// decoder-sim's --swap-layers or the companions' swap=, can name), each with a prefetch depth.
package plan

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"swapagent/trace"
)

const (
	// maxSetLayers bounds the exhaustive search: 2^16 sets of each prefetch are costed, without simulation.
	maxSetLayers = 16
	// maxSetSimulations bounds the simulations of sets that are cheaper than the best contiguous range.
	maxSetSimulations = 512
)

// searchSets finds the least-cost set of layers with gaps, and prefetch, that fits the budget, where it is
// cheaper than the best contiguous range that fits (those are all simulated already), and adds what it
// simulated to Ranked. Every set with gaps, at each prefetch, is costed by the time model (Profile.exposed)
// from each layer's bytes moved a step as its single-layer range's simulation moved them (an estimate: a
// storage two neighbouring layers save is moved once when both are swapped), and with Options.Recompute
// each set's full recompute by its layers' forward times (its peak: the set swapped without prefetch, as for
// a range). Sets that cannot fit are dropped by a bound: swapping a set lowers the peak without swap by at
// most the bytes its layers move a step. The rest that cost less than the best range (cheaperThan) are
// simulated cheapest first, but for subsets of a set already simulated at the same prefetch that did not
// fit (swapping fewer of the same layers lowers no peak): the first that fits is the least-cost set with
// gaps by the estimate, its peak and cost the simulation's. The search stops after maxSetSimulations, and
// Plan.Sets says how far it went. extra is added to every simulated peak (the undeclared layers' saves,
// Search). A job whose own swap moves its layers is not searched: MindFormers chains layer i with layer
// i + prefetch by index, which the simulation of a set with gaps does not model.
func (p *Plan) searchSets(f *trace.File, opt Options, extra uint64) {
	prof := &p.Profile
	n := prof.declared()
	switch {
	case n < 3:
		return // no set of fewer than 3 layers has a gap that a range does not cover
	case n > maxSetLayers:
		p.Sets = fmt.Sprintf("sets of layers with gaps not searched: %d layers, more than %d", n, maxSetLayers)
		return
	}
	at := map[int]int{} // layer index -> position in Layers
	for i := 0; i < n; i++ {
		at[prof.Layers[i].Index] = i
	}
	bytes := make([]uint64, len(prof.Layers)) // each layer's bytes moved a step, either way
	var best *Candidate                       // the best contiguous range that fits
	for i := range p.Ranked {
		c := p.Ranked[i]
		c.Fits = c.PeakBytes <= opt.Budget
		if !c.Recompute && len(c.Layers) == 1 {
			bytes[at[c.Layers[0]]] = max(bytes[at[c.Layers[0]]], c.MovedBytes/2)
		}
		if c.Fits && (best == nil || better(c, *best)) {
			best = &c
		}
	}
	if best == nil {
		// a set releases no more than all the layers, a range: what no range fits, no set does
		p.Sets = "sets of layers with gaps not searched: no contiguous range fits, and a set moves no more than all layers"
		return
	}
	p.BestRange = *best
	var cheaper []Candidate
	var pos [][]int
	var masks []uint32
	costed := 0
	for mask := uint32(1); mask < 1<<n; mask++ {
		if m := mask >> bits.TrailingZeros32(mask); m&(m+1) == 0 {
			continue // contiguous: a range, already simulated
		}
		moved := make([]uint64, len(prof.Layers))
		var layers, set []int
		var sum uint64
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				moved[i] = bytes[i]
				sum += bytes[i]
				layers = append(layers, prof.Layers[i].Index)
				set = append(set, i)
			}
		}
		if p.NoSwapPeak > opt.Budget+sum {
			continue // cannot fit: it lowers the peak by at most the bytes it moves
		}
		if opt.Recompute { // its cost is its layers' forward, run again: exact without simulation
			costed++
			c := Candidate{Recompute: true, Layers: layers, Fits: true}
			for _, i := range set {
				c.ExposedNS += prof.Layers[i].ForwardNS
			}
			if cheaperThan(c, *best) {
				cheaper = append(cheaper, c)
				pos = append(pos, set)
				masks = append(masks, mask)
			}
		}
		for pf := 0; pf <= opt.PrefetchMax; pf++ {
			costed++
			c := Candidate{Layers: layers, Prefetch: pf, MovedBytes: 2 * sum, ExposedNS: prof.exposed(moved, pf), Fits: true}
			if cheaperThan(c, *best) {
				cheaper = append(cheaper, c)
				pos = append(pos, set)
				masks = append(masks, mask)
			}
		}
	}
	order := make([]int, len(cheaper))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return better(cheaper[order[i]], cheaper[order[j]]) })
	simulated, pruned := 0, 0
	type key struct {
		recompute bool
		prefetch  int
	}
	failed := map[key][]uint32{} // sets simulated that did not fit
	for _, k := range order {
		kk := key{cheaper[k].Recompute, cheaper[k].Prefetch}
		if slices.ContainsFunc(failed[kk], func(f uint32) bool { return masks[k]&^f == 0 }) {
			pruned++ // a subset of a set that did not fit, at the same prefetch: swapping less lowers no peak
			continue
		}
		if simulated == maxSetSimulations {
			p.Sets = fmt.Sprintf("sets of layers with gaps: %d costed, %d cheaper than the best range, the "+
				"cheapest %d simulated (%d left out as subsets of sets that did not fit), none fits (the search "+
				"stops there)", costed, len(cheaper), simulated, pruned)
			return
		}
		simulated++
		p.Simulations++
		r := prof.simulateSwap(f, pos[k], cheaper[k].Prefetch)
		c := prof.swapCandidate(r, pos[k], cheaper[k].Prefetch)
		if cheaper[k].Recompute { // the peak of its swap without prefetch, as for a range (Search)
			c = Candidate{Recompute: true, Layers: c.Layers, PeakBytes: r.PeakSimulated, Released: r.ReleasedByArg,
				ExposedNS: cheaper[k].ExposedNS}
		}
		c.PeakBytes += extra
		p.Ranked = append(p.Ranked, c)
		if c.PeakBytes > opt.Budget {
			failed[kk] = append(failed[kk], masks[k])
		}
		if c.PeakBytes <= opt.Budget {
			p.Sets = fmt.Sprintf("sets of layers with gaps: %d costed, %d cheaper than the best range (%s, "+
				"%s), %d simulated (%d left out as subsets of sets that did not fit): the cheapest that fits is "+
				"%s, %s", costed, len(cheaper), Span(best.Layers), how(*best), simulated, pruned, Span(c.Layers), how(c))
			return
		}
	}
	p.Sets = fmt.Sprintf("sets of layers with gaps: %d costed, %d cheaper than the best range (%s, %s), "+
		"%d simulated (%d left out as subsets of sets that did not fit), none fits", costed, len(cheaper),
		Span(best.Layers), how(*best), simulated, pruned)
}

// cheaperThan says whether a set with gaps, c, is worth simulating against the best range: less exposed
// transfer (or recompute) by its estimate. A set that ties with the range would win only on the
// tie-breaks (bytes moved, fewer layers, a shallower prefetch), which no step time shows, and its bytes are
// only estimated.
func cheaperThan(c, best Candidate) bool { return c.ExposedNS < best.ExposedNS }

// how says how a candidate spares its layers' memory: "recompute" or "prefetch N".
func how(c Candidate) string {
	if c.Recompute {
		return "recompute"
	}
	return fmt.Sprintf("prefetch %d", c.Prefetch)
}
