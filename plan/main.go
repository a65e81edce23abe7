// main.go owns the `swapagent plan` command line and the plan's renderings: a short table, the job's own
// configuration (MindFormers' YAML, hyper-parallel's calls, the companions' layer_swap, decoder-sim's
// flags), and JSON.
package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"swapagent/internal/bytesize"
	"swapagent/internal/cli"
	"swapagent/report"
	"swapagent/trace"
)

// Exit codes of `swapagent plan`.
const (
	ExitPlanned  = 0 // a configuration fits the budget
	ExitNoFit    = 1 // none does: the lowest reachable peak is printed
	ExitBadInput = 2 // bad usage, missing or unreadable trace
	ExitPartial  = 3 // planned, but the trace was damaged (events lost or repaired)
)

// Usage is the synopsis for the CLI's help.
const Usage = "TRACE|DIR --budget BYTES [--link GB/s] [--prefetch-max N] [--num-layers N] [--recompute] [--format text|yaml|json] [--mode pynative|graph] [--verify -- CMD]"

// Command is how `swapagent plan` is called (internal/cli's conventions).
var Command = cli.Command{
	Name:     "plan",
	Synopsis: Usage,
	About: `Finds the swap configuration that keeps device memory within BYTES at the least cost, from a profiling
recording: a run with every candidate layer declared and nothing released (--policy off; docs/plan.md says
how for each framework). Each contiguous range of layers, with each prefetch depth up to N, is simulated
with replay's engine for its peak and the bytes it moves, then every set of layers with gaps (up to 16
layers) is costed and those cheaper than the best range are simulated, cheapest first, until one fits. The
transfer a configuration cannot hide is modelled step by step from the recorded steps' layer times and the
gaps between them, the agent's copies on one stream (a prefetch of N launches the copies back of the N
swapped layers the backward reaches next), and the link's bandwidth (--link when given, else measured from
the recording's copies where it made some, else 25 GB/s). A recording with faults, or made under a policy that moved data,
is refused (exit 2; the refusal gives the link a swapping run measured, for --link); a one-step recording
is planned with a warning (its times are the warm-up's).
--recompute adds full recompute of each range and set as a candidate: the same
peak as its swap without prefetch, costed by the layers' recorded forward times, nothing moved. The plan
is written in the job's own terms: MindFormers 2.1.0 PyNative's YAML swap (or recompute) section, or with
--mode graph its graph mode's swap_config section (any set of layers, with a prefetch; backward_prefetch
in operators, counted from the recording's backward kernels), hyper-parallel's calls, the companions'
layer_swap and decoder-sim's flags. Each form states the best
candidate it can express, never another rewritten: MindFormers needs a prefetch of at least 1 and layer
i + prefetch in the model (--num-layers N: the model's layers, when the recording declared fewer), and
with none of its candidates fitting, --format yaml writes nothing and exits 1. A directory holds one
process's trace. --verify then runs CMD under the agent as planned (policy safe, the plan's prefetch,
--swap-layers SET appended: decoder-sim's flag) and prints the measured peak, waits and step time beside
the prediction; a run whose layers or shapes differ from the profile's (a layer it declared that the
profile did not, other bytes saved by a layer, other kernels launched a step) is refused, naming the
difference.

Exit: 0 planned (--verify: and the run peaked within the budget, its pool step as tolerance); 1 no
configuration fits the budget (the lowest reachable peak is printed), or the verified run did not fit;
2 bad usage or input (a recording with faults or one that moved data), or the verified run failed or is
not the profiled job; 3 planned, but the trace was damaged.`,
}

// MinLinkGBps is the slowest --link: 1 MB/s, at which 10 TB moved a step still fits the time model's
// nanoseconds (int64) a thousand times over.
const MinLinkGBps = 0.001

// MaxNumLayers bounds --num-layers: each layer is modelled in every step, so a count no model has (a
// billion) would run for hours; the deepest models have a few hundred layers.
const MaxNumLayers = 10000

// Main runs `swapagent plan` with args (the words after "plan") and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	c := Command
	fs := c.Flags()
	budget := &bytesize.Flag{}
	fs.Var(budget, "budget", "device-memory budget `BYTES`: 64M, 1.5G, 1GiB or a number of bytes (required)")
	link := fs.Float64("link", 0, "the link's bandwidth in `GB/s` (at least 0.001); given, it wins over a measured one (default: measured from the recording's copies, else 25)")
	prefetchMax := fs.Int("prefetch-max", 2, "the deepest prefetch `N` to try")
	format := fs.String("format", "text", "output `FORMAT`: text, yaml or json")
	mode := fs.String("mode", "pynative", "MindFormers' `MODE` the YAML is for: pynative (its swap: section) or graph (swap_config:)")
	verify := cli.Switch(fs, "verify", "run CMD (after --) as planned and print what it measured beside the plan")
	recompute := cli.Switch(fs, "recompute", "also try full recompute of each range or set of layers instead of its swap")
	numLayers := fs.Int("num-layers", 0, "the model's layer count `N` when the recording declared fewer "+
		"(MindFormers' profiling recipe leaves its last layer out; default: the last declared layer's index + 1)")
	if code, stop := c.Parse(fs, args, stdout, stderr); stop {
		return code
	}
	var argv []string
	if dash := fs.ArgsLenAtDash(); dash >= 0 {
		argv = fs.Args()[dash:]
		if dash != 1 || len(argv) == 0 || !*verify {
			return c.UsageError(stderr, "-- CMD goes with --verify, after exactly one TRACE")
		}
	}
	switch {
	case *verify && len(argv) == 0:
		return c.UsageError(stderr, "--verify needs -- CMD")
	case len(argv) == 0 && fs.NArg() != 1:
		return c.UsageError(stderr, "want exactly one TRACE (a .swtrace file or a directory), got %d", fs.NArg())
	case !fs.Changed("budget") || budget.N == 0:
		return c.UsageError(stderr, "--budget is required and must be above 0")
	case fs.Changed("link") && !(*link >= MinLinkGBps && *link <= math.MaxFloat64):
		// NaN fails both; slower than this, a step's transfer overflows the time model's nanoseconds.
		return c.UsageError(stderr, "bad --link %g (want GB/s, at least %g)", *link, MinLinkGBps)
	case *numLayers < 0 || *numLayers > MaxNumLayers:
		return c.UsageError(stderr, "bad --num-layers %d (0 to %d)", *numLayers, MaxNumLayers)
	case *prefetchMax < 0 || *prefetchMax > 8:
		return c.UsageError(stderr, "bad --prefetch-max %d (0 to 8)", *prefetchMax)
	case *format != "text" && *format != "yaml" && *format != "json":
		return c.UsageError(stderr, "bad --format %q (want text, yaml or json)", *format)
	case *mode != "pynative" && *mode != "graph":
		return c.UsageError(stderr, "bad --mode %q (want pynative or graph)", *mode)
	}
	if *verify && *format != "text" {
		return c.UsageError(stderr, "--verify prints text: leave --format out")
	}
	files, _, err := report.Inputs(fs.Arg(0))
	if err != nil {
		c.Errorf(stderr, "%v", err)
		return ExitBadInput
	}
	if len(files) != 1 {
		c.Errorf(stderr, "%s holds %d traces: plan one process's recording", fs.Arg(0), len(files))
		return ExitBadInput
	}
	f, err := report.ReadTrace(files[0])
	if err != nil {
		c.Errorf(stderr, "%v", err)
		return ExitBadInput
	}
	for _, w := range f.Warnings() {
		c.Errorf(stderr, "%s", w)
	}
	p, err := Search(f, Options{Budget: budget.N, PrefetchMax: *prefetchMax, LinkBps: *link * 1e9, Recompute: *recompute,
		NumLayers: *numLayers})
	if err != nil {
		c.Errorf(stderr, "%s: %v", files[0], err)
		return ExitBadInput
	}
	if p.Profile.Steps < 2 {
		c.Errorf(stderr, "warning: the recording has %d step: its layer times are the warm-up's (caches, the "+
			"allocator's growth); record 3 or more", p.Profile.Steps)
	}
	if *mode == "graph" {
		p.mf = forMindFormersGraph
	}
	switch *format {
	case "json":
		err = writeJSON(stdout, files[0], p)
	case "yaml":
		y := p.mfYAML()
		if y == "" { // nothing enabled is written for a budget no MindFormers configuration meets
			mf, _ := p.bestFor(p.mf)
			c.Errorf(stderr, "no configuration MindFormers can express fits %s: the lowest it reaches is %s "+
				"(layers %s, prefetch %d); no YAML written", report.Bytes(p.Budget), report.Bytes(mf.PeakBytes),
				Span(mf.Layers), mf.Prefetch)
			return ExitNoFit
		}
		_, err = io.WriteString(stdout, y)
	default:
		tw := cli.Terminal(stdout)
		writeText(tw, files[0], p)
		err = cli.WriteErr(tw)
	}
	if err != nil {
		c.Errorf(stderr, "write: %v", err)
		return ExitBadInput
	}
	if *verify && p.Feasible && p.Best.Recompute {
		c.Errorf(stderr, "--verify runs a swap plan, and this one recomputes: apply its recompute section in the job's YAML")
		return ExitBadInput
	}
	if *verify && p.Feasible {
		check, err := Verify(p, argv, stderr)
		if err != nil {
			c.Errorf(stderr, "%v", err)
			return ExitBadInput
		}
		if check.Run != nil {
			if why := p.Profile.differs(check.Run); why != "" {
				c.Errorf(stderr, "--verify: the command is not the profiled job (%s): its peak says nothing of the plan", why)
				return ExitBadInput
			}
		}
		writeCheck(cli.Terminal(stdout), p, check)
		if !check.Within {
			return ExitNoFit
		}
	}
	switch {
	case !p.Feasible:
		return ExitNoFit
	case f.Damaged():
		return ExitPartial
	}
	return ExitPlanned
}

// Span writes layer indices as ranges ("0-5,7"; "none" for no layer).
func Span(layers []int) string {
	var parts []string
	for i := 0; i < len(layers); {
		j := i
		for j+1 < len(layers) && layers[j+1] == layers[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(layers[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", layers[i], layers[j]))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// A target is a form the plan is written in, and which candidates that form can express: a candidate is
// only offered in a form that says exactly it, never rewritten into another configuration.
type target int

const (
	forAgent       target = iota // the agent, decoder-sim, the companions: any candidate
	forMindFormers               // MindFormers 2.1.0 PyNative `swap:` (or `recompute:`)
	forHyperParallel
	forMindFormersGraph // MindFormers 2.1.0 graph mode `swap_config:` (--mode graph)
)

// expresses says whether target t can state candidate c exactly, on a model of numLayers layers.
// MindFormers 2.1.0 (mindformers/pynative/distributed/activation_checkpoint.py: _validate_swap_config, then
// apply_swap) takes default_prefetch in [1, num_layers - 1] and chains every listed layer i with layer
// i + default_prefetch, which must be a layer of the model: a swap without prefetch, or one whose last layer
// plus the prefetch is past the model, has no MindFormers form. Its full recompute lists any layers.
// hyper-parallel's calls chain a layer only where asked: without prefetch none is chained, and with one
// every swapped layer is, so layer i + prefetch must exist. Both chain layer i with the layer prefetch after it
// by index, where the agent's prefetch counts swapped layers: the same for a contiguous range, not for a
// set with gaps, which the simulation models the agent's way; such a set is the agent's alone.
//
// Graph mode (swap_config, MindSpore's Cell.offload per listed layer) lists any set of layers, each entry with
// its backward_prefetch in operators, at least 1: it states every swap with a prefetch (graphYAML says how
// the layers become operators), none without, and no recompute (its recompute_config lists layer counts
// per pipeline stage, not layers).
func (t target) expresses(c Candidate, numLayers int) bool {
	if t == forMindFormersGraph {
		return len(c.Layers) == 0 || (!c.Recompute && c.Prefetch >= 1)
	}
	if t == forAgent || c.Recompute || len(c.Layers) == 0 {
		return true
	}
	last := c.Layers[len(c.Layers)-1]
	if last-c.Layers[0] != len(c.Layers)-1 {
		return false // a set with gaps: MindFormers and hyper-parallel chain by index (searchSets)
	}
	if t == forHyperParallel && c.Prefetch == 0 {
		return true
	}
	return c.Prefetch >= 1 && c.Prefetch <= numLayers-1 && last+c.Prefetch < numLayers
}

// bestFor is the best candidate target t can express, and whether it fits the budget (Ranked is best
// first: the first that t expresses).
func (p *Plan) bestFor(t target) (Candidate, bool) {
	for _, c := range p.Ranked {
		if t.expresses(c, p.Profile.NumLayers) {
			return c, c.Fits
		}
	}
	return Candidate{}, false // not reached: the empty candidate is always expressible
}

// specs writes layer indices as MindFormers' layer specs: quoted "a-b" ranges and single ids, ascending.
func specs(layers []int) string {
	if len(layers) == 0 {
		return ""
	}
	parts := strings.Split(Span(layers), ",")
	for i := range parts {
		parts[i] = "'" + parts[i] + "'"
	}
	return strings.Join(parts, ", ")
}

// MindFormersYAML is the plan as MindFormers 2.1.0 PyNative's `swap:` section (mindformers.pynative.config
// SwapConfig, validated by activation_checkpoint._validate_swap_config), or its `recompute:` section
// (RecomputeConfig) with swap off for a recompute plan: the best candidate MindFormers can express. It is
// empty when none of those fits the budget: no enabled configuration is written for a budget it misses.
func (p *Plan) MindFormersYAML() string {
	b, fits := p.bestFor(forMindFormers)
	if !fits {
		return ""
	}
	head := fmt.Sprintf("# MindFormers 2.1.0 PyNative (mindformers.pynative TrainConfig) for num_layers %d: "+
		"swapagent plan, budget %s, predicted peak %s\n", p.Profile.NumLayers, report.Bytes(p.Budget),
		report.Bytes(b.PeakBytes))
	if b.Recompute {
		return head + fmt.Sprintf("recompute:\n  mode: full\n  full_recompute_layer: [%s]\nswap:\n  enable: False\n",
			specs(b.Layers))
	}
	if len(b.Layers) == 0 {
		return head + "swap:\n  enable: False\n"
	}
	return head + fmt.Sprintf("swap:\n  enable: True\n  default_prefetch: %d\n  layer_swap:\n    - layers: [%s]\n",
		b.Prefetch, specs(b.Layers))
}

// GraphYAML is the plan as MindFormers 2.1.0 graph mode's `swap_config:` section (TransformerSwapConfig,
// checked by mindformers/tools/check_rules.py's _check_swap; each listed layer gets MindSpore's
// Cell.offload(backward_prefetch)): the best candidate graph mode can express, "" when none of those fits.
// Graph mode counts backward_prefetch in operators ahead of the layer's backward, where the agent counts
// swapped layers: a layer's copy back is launched at the backward enter of the swapped layer prefetch
// places after it (the last swapped layer for the last few), so its operators ahead are the kernels the
// recording's backward launched from there up to the layer (Layer.BackwardKernels, the unswapped layers
// between included); layers with the same count share an entry. The last swapped layer, which the agent
// restores at its own backward enter, is written with 1, the least the form takes (its "Auto": one
// operator ahead).
func (p *Plan) GraphYAML() string {
	b, fits := p.bestFor(forMindFormersGraph)
	if !fits {
		return ""
	}
	head := fmt.Sprintf("# MindFormers 2.1.0 graph mode (swap_config, TransformerSwapConfig; backward_prefetch in "+
		"operators) for num_layers %d: swapagent plan, budget %s, predicted peak %s\n", p.Profile.NumLayers,
		report.Bytes(p.Budget), report.Bytes(b.PeakBytes))
	if len(b.Layers) == 0 {
		return head + "swap_config:\n  swap: False\n"
	}
	ahead := p.operatorsAhead(b)
	var counts []int64
	byCount := map[int64][]int{}
	for i, l := range b.Layers {
		if byCount[ahead[i]] == nil {
			counts = append(counts, ahead[i])
		}
		byCount[ahead[i]] = append(byCount[ahead[i]], l)
	}
	slices.Sort(counts)
	s := head + "swap_config:\n  swap: True\n  default_prefetch: 1\n  layer_swap:\n"
	for _, n := range counts {
		s += fmt.Sprintf("    - backward_prefetch: %d\n      layers: [%s]\n", n, ints(byCount[n]))
	}
	return s
}

// operatorsAhead are, for each of c's layers, the kernels the recorded backward launches between the
// engine's launch of its copy back and its own backward (at least 1; GraphYAML).
func (p *Plan) operatorsAhead(c Candidate) []int64 {
	pos := map[int]int{} // layer index -> position in Layers
	for i, l := range p.Profile.Layers {
		pos[l.Index] = i
	}
	out := make([]int64, len(c.Layers))
	for j, l := range c.Layers {
		from := c.Layers[min(j+c.Prefetch, len(c.Layers)-1)] // where its copy back is launched
		for i := pos[l] + 1; i <= pos[from]; i++ {
			out[j] += p.Profile.Layers[i].BackwardKernels
		}
		out[j] = max(out[j], 1)
	}
	return out
}

// mfYAML is the MindFormers form the user asked for (--mode): PyNative's, else graph mode's.
func (p *Plan) mfYAML() string {
	if p.mf == forMindFormersGraph {
		return p.GraphYAML()
	}
	return p.MindFormersYAML()
}

func (p *Plan) mfMode() string {
	if p.mf == forMindFormersGraph {
		return "graph"
	}
	return "pynative"
}

// HyperParallel is the plan as hyper-parallel's calls, complete: its imports, a policy_fn that swaps every
// tensor a layer saves, each layer wrapped, and each chained with the layer prefetch after it (the best
// candidate those calls can express); "" when none of those fits.
func (p *Plan) HyperParallel() string {
	b, fits := p.bestFor(forHyperParallel)
	switch {
	case !fits:
		return ""
	case len(b.Layers) == 0:
		return "# nothing to swap"
	case b.Recompute:
		return fmt.Sprintf("from hyper_parallel.core.activation_checkpoint import checkpoint_wrapper\n"+
			"for i in [%s]:  # model.layers: the job's %d decoder layers\n"+
			"    model.layers[i] = checkpoint_wrapper(model.layers[i])", ints(b.Layers), p.Profile.NumLayers)
	}
	s := fmt.Sprintf("from hyper_parallel.core.activation_checkpoint import CheckpointPolicy, SwapManager, swap_wrapper\n\n"+
		"def policy_fn(tensor):  # every tensor the layer saves goes to the host\n"+
		"    return CheckpointPolicy.MUST_SWAP\n\n"+
		"for i in [%s]:  # model.layers: the job's %d decoder layers\n"+
		"    model.layers[i] = swap_wrapper(model.layers[i], policy_fn=policy_fn)", ints(b.Layers), p.Profile.NumLayers)
	if b.Prefetch > 0 {
		s += fmt.Sprintf("\nfor i in [%s]:\n    SwapManager().set_forward_prefetch_layer(model.layers[i], model.layers[i + %d])",
			ints(b.Layers), b.Prefetch)
	}
	return s
}

// Companions is the plan as the companions' layer_swap call.
// "" when no configuration fits: nothing that does not fit is written as a configuration.
func (p *Plan) Companions() string {
	if !p.Feasible {
		return ""
	}
	if p.Best.Recompute {
		return fmt.Sprintf("layer_swap(model.layers, swap=[])  # and layers [%s] under the framework's checkpoint",
			ints(p.Best.Layers))
	}
	return fmt.Sprintf("layer_swap(model.layers, swap=[%s], prefetch=%d)", ints(p.Best.Layers), p.Best.Prefetch)
}

// DecoderSimArgs are decoder-sim's flags for the plan; its prefetch is the agent's (SWAPAGENT_PREFETCH). nil
// when no configuration fits.
func (p *Plan) DecoderSimArgs() []string {
	if !p.Feasible {
		return nil
	}
	return p.Best.decoderSimArgs()
}

// decoderSimArgs are decoder-sim's flags for candidate c; nil for recompute, which decoder-sim cannot do.
func (c Candidate) decoderSimArgs() []string {
	if c.Recompute {
		return nil
	}
	return []string{"--swap-layers", Span(c.Layers)}
}

// MeasuredLink is the bandwidth the recording's copies measured (bytes per second; 0 when it made none).
func MeasuredLink(f *trace.File) float64 {
	prof, err := profile(f)
	if err != nil || prof.LinkFrom == assumedLink {
		return 0
	}
	return prof.LinkBps
}

// targetJSON is the best candidate a target can express, and whether it fits: the configuration its
// rendering (mindformers_yaml, hyper_parallel) states, which may differ from the plan's.
type targetJSON struct {
	Feasible  bool `json:"feasible"`
	Candidate      // its configuration
}

func (p *Plan) targetJSON(t target) targetJSON {
	c, fits := p.bestFor(t)
	c.Released = nil
	return targetJSON{fits, c}
}

// environment is the agent's settings for the plan (none when no configuration fits).
func environment(p *Plan) map[string]string {
	if !p.Feasible {
		return map[string]string{}
	}
	return map[string]string{"SWAPAGENT_PREFETCH": strconv.Itoa(p.Best.Prefetch)}
}

func writeJSON(w io.Writer, file string, p *Plan) error {
	top := p.Ranked[:min(len(p.Ranked), 5)]
	var bestRange *Candidate
	if p.BestRange.Fits {
		bestRange = &p.BestRange
	}
	out := struct {
		File        string            `json:"file"`
		Feasible    bool              `json:"feasible"`
		Budget      uint64            `json:"budget_bytes"`
		Candidate                     // the plan
		NoSwapPeak  uint64            `json:"no_swap_peak_bytes"`
		LowestPeak  uint64            `json:"lowest_reachable_peak_bytes"`
		PoolStep    uint64            `json:"pool_step_bytes"`
		Footprint   string            `json:"footprint"`
		LinkBps     float64           `json:"link_bytes_per_second"`
		LinkFrom    string            `json:"link_from"`
		Layers      []Layer           `json:"layers"`
		NumLayers   int               `json:"num_layers"`
		MFMode      string            `json:"mindformers_mode"`
		MindFormers targetJSON        `json:"mindformers"`
		YAML        string            `json:"mindformers_yaml"`
		HPPlan      targetJSON        `json:"hyper_parallel_plan"`
		HP          string            `json:"hyper_parallel"`
		Companions  string            `json:"companions"`
		DecoderSim  []string          `json:"decoder_sim_args"`
		Environment map[string]string `json:"environment"`
		Candidates  []Candidate       `json:"candidates"`
		Simulations int               `json:"simulations"`
		Sets        string            `json:"sets_search,omitempty"`
		BestRange   *Candidate        `json:"best_range,omitempty"`
	}{file, p.Feasible, p.Budget, p.Best, p.NoSwapPeak, p.LowestPeak, p.PoolStep, p.Footprint, p.Profile.LinkBps,
		p.Profile.LinkFrom, p.Profile.Layers, p.Profile.NumLayers, p.mfMode(), p.targetJSON(p.mf), p.mfYAML(),
		p.targetJSON(forHyperParallel), p.HyperParallel(), p.Companions(),
		p.DecoderSimArgs(), environment(p), top,
		p.Simulations, p.Sets, bestRange}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeText(w io.Writer, file string, p *Plan) {
	b := p.Best
	fmt.Fprintf(w, "plan for %s: budget %s; no swap peaks at %s, swap reaches %s at the lowest\n", file,
		report.Bytes(p.Budget), report.Bytes(p.NoSwapPeak), report.Bytes(p.LowestPeak))
	fmt.Fprintf(w, "  %d layers, %d steps recorded; link %.3g GB/s (%s); %d configurations simulated\n",
		len(p.Profile.Layers), p.Profile.Steps, p.Profile.LinkBps/1e9, p.Profile.LinkFrom, p.Simulations)
	if p.Sets != "" {
		fmt.Fprintf(w, "  %s\n", p.Sets)
	}
	if p.Footprint == "saved" {
		fmt.Fprintf(w, "  the trace records no device allocation: the peaks are the bytes of the storages saved for backward\n")
	}
	if p.Profile.JobSwaps {
		fmt.Fprintf(w, "  the job's own swap moves the layers: prefetch is its default_prefetch, and layer i + prefetch must exist\n")
	}
	if !p.Feasible {
		fmt.Fprintf(w, "  no configuration fits: the lowest peak swap reaches, %s (layers %s, prefetch %d), is %s "+
			"above the budget\n", report.Bytes(b.PeakBytes), Span(b.Layers), b.Prefetch,
			report.Bytes(b.PeakBytes-min(b.PeakBytes, p.Budget)))
		return
	}
	if b.Recompute {
		fmt.Fprintf(w, "  plan: recompute layers %s: peak %s, %v of forward run again a step\n", Span(b.Layers),
			report.Bytes(b.PeakBytes), time.Duration(b.ExposedNS).Round(time.Microsecond))
	} else {
		fmt.Fprintf(w, "  plan: swap layers %s, prefetch %d: peak %s, %s moved a step, %v of transfer not hidden\n",
			Span(b.Layers), b.Prefetch, report.Bytes(b.PeakBytes), report.Bytes(b.MovedBytes),
			time.Duration(b.ExposedNS).Round(time.Microsecond))
	}
	fmt.Fprintf(w, "  released by argument over the recorded steps: %s\n", releasedText(b.Released))
	fmt.Fprintf(w, "\n  %-10s %-10s %8s %12s %12s %12s\n", "how", "layers", "prefetch", "peak", "moved/step", "time")
	for _, c := range p.Ranked[:min(len(p.Ranked), 5)] {
		mark, how, pf := "", "swap", strconv.Itoa(c.Prefetch)
		if !c.Fits {
			mark = "  (over budget)"
		}
		if c.Recompute {
			how, pf = "recompute", "-"
		}
		fmt.Fprintf(w, "  %-10s %-10s %8s %12s %12s %12v%s\n", how, Span(c.Layers), pf, report.Bytes(c.PeakBytes),
			report.Bytes(c.MovedBytes), time.Duration(c.ExposedNS).Round(time.Microsecond), mark)
	}
	if p.mf == forMindFormersGraph {
		writeTarget(w, p, p.mf, "MindFormers 2.1.0 graph mode (YAML)", p.mfYAML())
	} else {
		writeTarget(w, p, p.mf, "MindFormers 2.1.0 PyNative (YAML)", p.mfYAML())
	}
	writeTarget(w, p, forHyperParallel, "hyper-parallel", p.HyperParallel())
	fmt.Fprintf(w, "  companions:    %s\n", p.Companions())
	if b.Recompute {
		fmt.Fprintf(w, "  decoder-sim:   has no recompute\n")
	} else {
		fmt.Fprintf(w, "  decoder-sim:   SWAPAGENT_PREFETCH=%d swapagent run -- decoder-sim %s\n", b.Prefetch,
			strings.Join(p.DecoderSimArgs(), " "))
	}
}

// writeTarget writes target t's form of the plan, and says which configuration it states when t cannot
// express the plan itself, or that none it can express fits.
func writeTarget(w io.Writer, p *Plan, t target, name, text string) {
	c, fits := p.bestFor(t)
	switch {
	case !fits:
		fmt.Fprintf(w, "\n  %s: no configuration it can express fits (the lowest it reaches is %s)\n", name,
			report.Bytes(c.PeakBytes))
		return
	case c.Recompute != p.Best.Recompute || c.Prefetch != p.Best.Prefetch || !slices.Equal(c.Layers, p.Best.Layers):
		why := fmt.Sprintf("no prefetch, layer i + prefetch past its %d layers, or a set with gaps", p.Profile.NumLayers)
		if t == forMindFormersGraph {
			why = "no prefetch, or recompute"
		}
		fmt.Fprintf(w, "\n  %s cannot state the plan (%s); its best: layers %s, prefetch %d: peak %s, %v of transfer "+
			"not hidden:\n", name, why, Span(c.Layers), c.Prefetch, report.Bytes(c.PeakBytes),
			time.Duration(c.ExposedNS).Round(time.Microsecond))
	default:
		fmt.Fprintf(w, "\n  %s:\n", name)
	}
	fmt.Fprintf(w, "%s", indent(text, "    "))
}

// releasedText lists the released bytes by argument, largest first: "internal 120.0 KiB, args[0] 60.0 KiB".
func releasedText(by map[string]uint64) string {
	if len(by) == 0 {
		return "nothing"
	}
	args := make([]string, 0, len(by))
	for a := range by {
		args = append(args, a)
	}
	sort.Slice(args, func(i, j int) bool {
		if by[args[i]] != by[args[j]] {
			return by[args[i]] > by[args[j]]
		}
		return args[i] < args[j]
	})
	for i, a := range args {
		args[i] = a + " " + report.Bytes(by[a])
	}
	return strings.Join(args, ", ")
}

func indent(s, by string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		if lines[i] != "" { // no trailing blanks on an empty line
			lines[i] = by + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
