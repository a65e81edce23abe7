// runtime_test.go runs the issue-294 scenario under the real agent the way MindSpore 2.10 drives the
// runtime: device memory from a VMM pool, a launch thread, cached executors, CANN's library split, in
// every combination and both link modes. Under safe the results are bit-identical and the activations
// move; under outputs-only the agent names the RoPE storage before the runtime's error.
package decoder_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

func TestRuntimeModesSafeAndOutputsOnly(t *testing.T) {
	base := append(append([]string{}, run12...), "--steps", "2")
	for _, mode := range runtimeFlags() {
		for _, link := range []string{"direct", "dlsym"} {
			args := append(append(append([]string{}, base...), mode...), "--link", link)
			t.Run(strings.Join(append(append([]string{}, mode[1], mode[3], "cache-"+mode[5]), link), "/"),
				func(t *testing.T) {
					t.Parallel()
					want := stepText(mustRun(t, args...).Stdout)
					if strings.Count(want, "\n") != 2 {
						t.Fatalf("baseline printed %q", want)
					}
					r, dir := runAgent(t, "safe", args...)
					if r.Code != 0 {
						t.Fatalf("safe: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 20))
					}
					if got := stepText(r.Stdout); got != want {
						t.Errorf("safe: step lines differ from the run without the agent:\n%s---\n%s", got, want)
					}
					st := readTrace(t, dir)
					if st.stats.OffloadedBytes == 0 || st.stats.ReleasedExternal != 0 || len(st.stats.Faults) != 0 {
						t.Errorf("safe: offloaded %d, released_external %d, faults %+v", st.stats.OffloadedBytes,
							st.stats.ReleasedExternal, st.stats.Faults)
					}
					if mode[1] == "vmm" {
						m := mappedPeakRE.FindStringSubmatch(r.Stderr)
						if m == nil {
							t.Fatalf("decoder-sim printed no mapped peak:\n%s", testenv.Tail(r.Stderr, 5))
						}
						mapped, _ := strconv.ParseUint(m[1], 10, 64)
						if st.stats.PeakDeviceBytes != mapped || mapped == 0 {
							t.Errorf("peak_device_bytes %d, want the mapped peak decoder-sim reports, %d",
								st.stats.PeakDeviceBytes, mapped)
						}
					}
					checkOutputsOnlyFault(t, args)
				})
		}
	}
}

// checkOutputsOnlyFault runs the reproduction and checks the agent names the RoPE storage, its releaser
// and its owner before the runtime's error surfaces.
func checkOutputsOnlyFault(t *testing.T, args []string) {
	t.Helper()
	r, dir := runAgent(t, "outputs-only", args...)
	if r.Code == 0 {
		t.Fatalf("outputs-only run succeeded; it must fault\n%s", testenv.Tail(r.Stderr, 10))
	}
	block := strings.Index(r.Stderr, "swapagent: ========= FAULT")
	runtimeErr := strings.Index(r.Stderr, "decoder-sim: aclrtSynchronize")
	if block < 0 || runtimeErr < 0 || block > runtimeErr {
		t.Errorf("outputs-only: no fault block before the runtime error:\n%s", testenv.Tail(r.Stderr, 30))
	}
	st := readTrace(t, dir)
	var named bool
	for _, f := range st.stats.Faults {
		if (f.Detected == "launch" || f.Detected == "region_enter") && f.Nbytes == 1048576 &&
			f.ReleasedBy == "layer.0" && strings.HasPrefix(f.Owner, "keyword input of layer.0") {
			named = true
		}
	}
	if !named {
		t.Errorf("outputs-only: no launch or region_enter fault names the 1048576-byte RoPE storage released by "+
			"layer.0 with its keyword-input owner: %s", fmt.Sprint(st.stats.Faults))
	}
}

// Under VMM the device memory is what is mapped: swap saves at least 90% of the ideal of bench-swap.
func TestVMMSavesWhatIsMapped(t *testing.T) {
	const steps = 3
	args := append(append([]string{}, run12...), "--steps", fmt.Sprint(steps), "--alloc", "vmm")
	rOff, offDir := runAgent(t, "off", args...)
	rSafe, safeDir := runAgent(t, "safe", args...)
	if rOff.Code != 0 || rSafe.Code != 0 {
		t.Fatalf("exit codes off %d safe %d\n%s", rOff.Code, rSafe.Code, testenv.Tail(rSafe.Stderr, 10))
	}
	off, safe := readTrace(t, offDir), readTrace(t, safeDir)
	internal, perGroup := safe.internalBytes()
	perStep := internal / steps
	var largest uint64
	for _, b := range perGroup {
		largest = max(largest, b/steps)
	}
	ideal := perStep - 2*largest
	saved := int64(off.stats.PeakDeviceBytes) - int64(safe.stats.PeakDeviceBytes)
	t.Logf("vmm: mapped peak off %d, safe %d: saved %d = %.0f%% of the ideal %d", off.stats.PeakDeviceBytes,
		safe.stats.PeakDeviceBytes, saved, 100*float64(saved)/float64(ideal), ideal)
	if safe.stats.PeakDeviceBytes == 0 || float64(saved) < 0.9*float64(ideal) {
		t.Errorf("vmm: peak off %d, safe %d: saved %d, want >= 90%% of %d", off.stats.PeakDeviceBytes,
			safe.stats.PeakDeviceBytes, saved, ideal)
	}
}
