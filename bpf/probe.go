// probe.go owns the loader: it loads the BPF programs, attaches an entry and a return uprobe to each
// requested function of one ELF file, and reads the per-function latency histograms back.
package bpf

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// MaxFuncs is how many functions one Probe can time (the size of the histogram map).
const MaxFuncs = 128

// NBuckets is the number of log2 latency buckets: bucket i counts calls that took [2^i, 2^(i+1)) ns.
const NBuckets = len(probeHist{}.Buckets)

// Options says what to probe. The zero PID probes every process that maps the file.
type Options struct {
	Path  string   // library or executable whose functions are probed
	Funcs []Symbol // functions of Path to time (from Symbols/Match); at most MaxFuncs
	PID   int      // process to time; 0: every process
}

// Probe is a set of attached uprobes and the histograms they fill. Close detaches them.
type Probe struct {
	objs  probeObjects
	links []link.Link
	funcs []Symbol
}

// Attach loads the BPF programs and attaches them to every function in opts. Errors name the step
// and, for attaching, the function.
func Attach(opts Options) (*Probe, error) {
	switch {
	case len(opts.Funcs) == 0:
		return nil, errors.New("no function to probe")
	case len(opts.Funcs) > MaxFuncs:
		return nil, fmt.Errorf("%d functions to probe, at most %d", len(opts.Funcs), MaxFuncs)
	case opts.PID < 0:
		return nil, fmt.Errorf("bad pid %d", opts.PID)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("eBPF probes need root")
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones ignore this.
	_ = rlimit.RemoveMemlock()

	spec, err := loadProbe()
	if err != nil {
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	if err := spec.Variables[probeVarTargetTgid].Set(uint32(opts.PID)); err != nil {
		return nil, fmt.Errorf("set target pid: %w", err)
	}
	p := &Probe{funcs: opts.Funcs}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load BPF programs (does this kernel support eBPF uprobes?): %w", err)
	}
	ex, err := link.OpenExecutable(opts.Path)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	for i, fn := range opts.Funcs {
		// Address is the file offset from Symbols; the cookie tells the programs which function fired.
		uo := &link.UprobeOptions{Address: fn.Offset, Cookie: uint64(i)}
		up, err := ex.Uprobe(fn.Name, p.objs.CallEnter, uo)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attach uprobe %s: %w", fn.Name, err)
		}
		p.links = append(p.links, up)
		ret, err := ex.Uretprobe(fn.Name, p.objs.CallExit, uo)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attach uretprobe %s: %w", fn.Name, err)
		}
		p.links = append(p.links, ret)
	}
	return p, nil
}

// Stats is what the probes measured for one function.
type Stats struct {
	Func    Symbol
	Calls   uint64
	Total   time.Duration
	Buckets [NBuckets]uint64
}

// Stats reads the histograms, one per probed function, in the order they were given to Attach.
func (p *Probe) Stats() ([]Stats, error) {
	out := make([]Stats, len(p.funcs))
	for i, fn := range p.funcs {
		var h probeHist
		if err := p.objs.Hists.Lookup(uint32(i), &h); err != nil {
			return nil, fmt.Errorf("read histogram of %s: %w", fn.Name, err)
		}
		out[i] = Stats{Func: fn, Calls: h.Calls, Total: time.Duration(h.TotalNs), Buckets: h.Buckets}
	}
	return out, nil
}

// Close detaches every probe and frees the programs and maps.
func (p *Probe) Close() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}
