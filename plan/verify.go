// verify.go owns `swapagent plan --verify -- CMD`: the plan checked, not trusted. CMD runs under the agent
// as planned (policy safe, the plan's prefetch, decoder-sim's --swap-layers appended: a job that takes the
// layers another way applies the plan itself and runs the two commands of docs/plan.md), and what its
// trace measured is printed beside the prediction.
package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"swapagent/report"
	"swapagent/trace"
)

// Check is a planned run's measurements beside the plan's predictions.
type Check struct {
	PeakBytes uint64 // the run's peak device bytes
	WaitNS    int64  // per step: the job waiting for copies (out, back) and the device stalled on them
	StepNS    int64  // the run's step time (median)
	// LeastStepNS is its least step after the first: on a shared machine, where others only ever slow a
	// step down, the closest to the run's own time.
	LeastStepNS int64
	Within      bool // the peak is within the budget, the allocator's step as tolerance
	// Run is what the run's recording says of its job (layers, their saves, kernels a step), to compare
	// with the profile's (Profile.differs); nil when a plan that swaps nothing ran a job that declares no layer.
	Run *Profile
}

// Verify runs argv as planned under `swapagent run` (this executable) and measures it.
func Verify(p *Plan, argv []string, stderr io.Writer) (*Check, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c, err := Measure(self, "safe", p.Best, argv, stderr)
	if err != nil {
		return nil, err
	}
	c.Within = c.PeakBytes <= p.Budget+p.PoolStep
	return c, nil
}

// Measure runs argv with candidate c's configuration under `CLI run` (the policy, c's prefetch,
// decoder-sim's --swap-layers appended) and measures its peak, waits and step time.
func Measure(cli, policy string, c Candidate, argv []string, stderr io.Writer) (*Check, error) {
	out, err := os.MkdirTemp("", "swapagent-plan-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	args := append([]string{"run", "--policy", policy, "--out", out, "--"}, argv...)
	cmd := exec.Command(cli, append(args, c.decoderSimArgs()...)...)
	cmd.Env = append(os.Environ(), "SWAPAGENT_PREFETCH="+strconv.Itoa(c.Prefetch))
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the planned run failed: %v", err)
	}
	sums, _, _, err := report.Load(out, nil)
	if err != nil {
		return nil, err
	}
	var s *report.Summary
	for _, x := range sums { // the process that swapped (a launcher's trace has no layers)
		if s == nil || len(x.Steps) > len(s.Steps) {
			s = x
		}
	}
	if s == nil {
		return nil, fmt.Errorf("the planned run left no trace")
	}
	if len(s.Steps) == 0 {
		if len(c.Layers) > 0 {
			return nil, fmt.Errorf("the planned run's trace has no step (no layer was entered)")
		}
		// A plan that swaps nothing runs the job as it is, which may declare no layer: its peak is all there
		// is to measure, and its layers cannot be compared with the profile's (Run nil).
		return &Check{PeakBytes: s.Stats.PeakDeviceBytes}, nil
	}
	f, err := report.ReadTrace(s.Path)
	if err != nil {
		return nil, err
	}
	run, err := profile(f)
	if err != nil {
		return nil, fmt.Errorf("the planned run's trace: %v", err)
	}
	m := &Check{PeakBytes: s.Stats.PeakDeviceBytes, Run: run}
	var st trace.Stats
	if s.HasStats && json.Unmarshal(s.StatsJSON, &st) == nil {
		m.WaitNS = int64(st.OffloadWaitNS+st.RestoreWaitNS+st.DeviceStallNS) / int64(len(s.Steps))
	}
	m.StepNS = stepNS(s.Steps)
	for i := 2; i < len(s.Steps); i++ {
		if gap := s.Steps[i] - s.Steps[i-1]; m.LeastStepNS == 0 || gap < m.LeastStepNS {
			m.LeastStepNS = gap
		}
	}
	return m, nil
}

func writeCheck(w io.Writer, p *Plan, c *Check) {
	pct := func(pred, got float64) string {
		if got == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%+.1f%%", 100*(pred-got)/got)
	}
	ms := func(ns int64) string { return time.Duration(ns).Round(10 * time.Microsecond).String() }
	verdict := "within the budget"
	if !c.Within {
		verdict = "OVER the budget (and its pool step of " + report.Bytes(p.PoolStep) + ")"
	}
	fmt.Fprintf(w, "verify: peak predicted %s, measured %s (prediction %s): %s\n", report.Bytes(p.Best.PeakBytes),
		report.Bytes(c.PeakBytes), pct(float64(p.Best.PeakBytes), float64(c.PeakBytes)), verdict)
	if c.Run == nil {
		fmt.Fprintf(w, "  the run swapped nothing and declared no layer: no step time to measure, and its layers are "+
			"not compared with the profile's\n")
		return
	}
	fmt.Fprintf(w, "  transfer not hidden per step: predicted %s, measured %s (the step's increase over the recording's; "+
		"the agent's waits for copies and device stalls: %s)\n", ms(p.Best.ExposedNS),
		ms(max(c.StepNS-p.Profile.StepNS, 0)), ms(c.WaitNS))
	fmt.Fprintf(w, "  step time: predicted %s (the recording's %s plus the exposed transfer), measured %s (%s)\n",
		ms(p.Profile.StepNS+p.Best.ExposedNS), ms(p.Profile.StepNS), ms(c.StepNS),
		pct(float64(p.Profile.StepNS+p.Best.ExposedNS), float64(c.StepNS)))
}
