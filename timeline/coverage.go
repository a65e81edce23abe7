package timeline

import (
	"fmt"

	"swapagent/trace"
)

// Coverage says what a trace's figures cover when it is not a whole training run: one that ends at a
// fault, or that never reached a backward ("" when neither). partial: it faulted before a whole step
// (no second step began before the fault), so no saving may be read from it: its peak is that of a run
// cut short.
func (t *Timeline) Coverage() (what string, partial bool) {
	backward := t.Count(trace.KindBackwardEnter)+t.Count(trace.KindUnpack) > 0
	if len(t.Faults) > 0 {
		f := t.Faults[0]
		step := 0
		for _, st := range t.Steps {
			if st <= f.TS {
				step++
			}
		}
		partial = step <= 1
		where := fmt.Sprintf("in step %d", max(step, 1))
		if f.Record.Kernel != "" {
			where += " (" + f.Record.Kernel + ")"
		}
		if !backward {
			return fmt.Sprintf("the recording faulted %s before any backward: these figures cover its forward up to the "+
				"fault, not a whole step, and say nothing of restores", where), partial
		}
		return fmt.Sprintf("the recording faulted %s: these figures cover it up to there (%d fault records)", where,
			len(t.Faults)), partial
	}
	if !backward && t.Count(trace.KindRegionEnter) > 0 {
		return "the recording has no backward: these figures cover forward passes only, and say nothing of restores", false
	}
	return "", false
}
