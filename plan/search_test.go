package plan

import (
	"reflect"
	"runtime"
	"testing"
	"time"

	"swapagent/internal/testenv"
	"swapagent/report"
)

// TestSearchIsTheSameOnAnyCPUCount: the ranges' simulations run on every CPU the process may use, and the
// plan is the same as one made on a single CPU, candidate for candidate (run under -race by make go-test).
func TestSearchIsTheSameOnAnyCPUCount(t *testing.T) {
	out := t.TempDir()
	if r := testenv.Run(t, time.Minute, testenv.AgentEnv(t, out, "SWAPAGENT_POLICY=off"),
		testenv.Path(t, testenv.DecoderSim), "--layers", "5", "--swap-layers", "all", "--seq", "512", "--steps",
		"2"); r.Code != 0 {
		t.Fatalf("decoder-sim: exit %d\n%s", r.Code, testenv.Tail(r.Stderr, 10))
	}
	f, err := report.ReadTrace(testenv.OnlyTrace(t, out))
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Budget: 1 << 40, PrefetchMax: 2, Recompute: true}
	plans := map[int]*Plan{}
	for _, cpus := range []int{1, 4} {
		prev := runtime.GOMAXPROCS(cpus)
		p, err := Search(f, opt)
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatal(err)
		}
		plans[cpus] = p
	}
	if len(plans[1].Ranked) < 15*3 || !reflect.DeepEqual(plans[1], plans[4]) {
		t.Errorf("%d candidates on 1 CPU, %d on 4, or they differ", len(plans[1].Ranked), len(plans[4].Ranked))
	}
}
