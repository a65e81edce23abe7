// Package decoder_test runs build/bin/decoder-sim (the decoder-stack workload) against the emulated
// AscendCL runtime: both link modes, determinism, a first-order check of the backward, call counts, the
// waits of each sync mode, the emulator's hazard checker over every sync mode and stream count, and flag
// errors.
package decoder_test

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

type result = testenv.Result

// run executes decoder-sim with a deadline so a hang fails the test instead of the CI job.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv is run with env added to a clean environment (testenv.CleanEnv).
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return testenv.Run(t, 90*time.Second, append(testenv.CleanEnv(), env...), testenv.Path(t, testenv.DecoderSim),
		args...)
}

func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	return mustRunEnv(t, nil, args...)
}

func mustRunEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := runEnv(t, env, args...)
	if r.Code != 0 {
		t.Fatalf("decoder-sim %v (env %v): exit %d\nstderr:\n%s", args, env, r.Code, r.Stderr)
	}
	return r
}

var stepRE = regexp.MustCompile(`^step (\d+)/(\d+): loss (\S+), grad_norm (\S+)$`)

type step struct{ loss, gradNorm float64 }

// steps returns the step lines (verbatim) and their values, checking the format and the numbering.
func steps(t *testing.T, stdout string, want int) ([]string, []step) {
	t.Helper()
	var lines []string
	var vals []step
	for _, l := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(l, "step ") {
			continue
		}
		m := stepRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("bad step line %q", l)
		}
		if m[1] != strconv.Itoa(len(lines)+1) || m[2] != strconv.Itoa(want) {
			t.Fatalf("step line %q out of sequence", l)
		}
		loss, err1 := strconv.ParseFloat(m[3], 64)
		gn, err2 := strconv.ParseFloat(m[4], 64)
		if err1 != nil || err2 != nil || math.IsNaN(loss) || math.IsInf(loss, 0) || math.IsNaN(gn) || gn <= 0 {
			t.Fatalf("bad values in %q", l)
		}
		// At least 9 significant digits: the mantissa before the exponent.
		if digits := len(strings.ReplaceAll(strings.SplitN(m[3], "e", 2)[0], ".", "")); digits < 9 {
			t.Fatalf("loss %q has %d significant digits, want >= 9", m[3], digits)
		}
		lines = append(lines, l)
		vals = append(vals, step{loss, gn})
	}
	if len(lines) != want {
		t.Fatalf("got %d step lines, want %d:\n%s", len(lines), want, stdout)
	}
	return lines, vals
}

// calls parses the `calls <function> <count>` lines.
func calls(t *testing.T, stdout string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "calls" {
			continue
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || err != nil || n <= 0 {
			t.Fatalf("bad calls line %q", l)
		}
		m[f[1]] = n
	}
	return m
}

func TestLinkModesAgreeAndRunsRepeat(t *testing.T) {
	direct := mustRun(t, "--steps", "3", "--link", "direct")
	dlsym := mustRun(t, "--steps", "3", "--link", "dlsym")
	again := mustRun(t, "--steps", "3")
	dl, vals := steps(t, direct.Stdout, 3)
	sl, _ := steps(t, dlsym.Stdout, 3)
	al, _ := steps(t, again.Stdout, 3)
	if strings.Join(dl, "\n") != strings.Join(sl, "\n") {
		t.Errorf("direct and dlsym differ:\n%s\n--\n%s", strings.Join(dl, "\n"), strings.Join(sl, "\n"))
	}
	if strings.Join(dl, "\n") != strings.Join(al, "\n") {
		t.Errorf("two direct runs differ:\n%s\n--\n%s", strings.Join(dl, "\n"), strings.Join(al, "\n"))
	}
	for i := 1; i < len(vals); i++ {
		if vals[i].loss == vals[i-1].loss {
			t.Errorf("loss did not change from step %d to %d: %v", i, i+1, vals[i].loss)
		}
	}
	// Same code, same calls: the dlsym table reaches the same functions the same number of times.
	cd, cs := calls(t, direct.Stdout), calls(t, dlsym.Stdout)
	if len(cd) == 0 || len(cd) != len(cs) {
		t.Fatalf("calls lines differ: direct %v, dlsym %v", cd, cs)
	}
	for fn, n := range cd {
		if cs[fn] != n {
			t.Errorf("calls %s: direct %d, dlsym %d", fn, n, cs[fn])
		}
	}
}

// The backward is real: one SGD step lowers the loss by lr*|g|^2 to first order.
func TestBackwardFirstOrder(t *testing.T) {
	const lr = 0.1
	r := mustRun(t, "--steps", "2", "--layers", "4", "--lr", "0.1")
	_, v := steps(t, r.Stdout, 2)
	got := v[0].loss - v[1].loss
	want := lr * v[0].gradNorm * v[0].gradNorm
	if got <= 0 || math.Abs(got-want) > 0.05*want {
		t.Fatalf("loss drop %g, first-order prediction lr*|g|^2 = %g (gradients wrong?)", got, want)
	}
}

func TestCallCounts(t *testing.T) {
	r := mustRun(t, "--steps", "1", "--layers", "3")
	c := calls(t, r.Stdout)
	for _, fn := range []string{"aclrtMalloc", "aclnnMul", "aclnnAdd", "aclnnMatmul", "aclnnInplaceCopy",
		"aclCreateTensor", "aclrtSynchronizeStream", "aclrtMemcpy", "aclrtMemcpyAsync"} {
		if c[fn] <= 0 {
			t.Errorf("calls %s = %d, want > 0", fn, c[fn])
		}
	}
	pairs := [][2]string{{"aclInit", "aclFinalize"}, {"aclrtMalloc", "aclrtFree"}, {"aclCreateTensor", "aclDestroyTensor"},
		{"aclCreateScalar", "aclDestroyScalar"}, {"aclnnMul", "aclnnMulGetWorkspaceSize"},
		{"aclnnAdd", "aclnnAddGetWorkspaceSize"}, {"aclnnMatmul", "aclnnMatmulGetWorkspaceSize"},
		{"aclnnInplaceCopy", "aclnnInplaceCopyGetWorkspaceSize"}, {"aclrtMallocHost", "aclrtFreeHost"}}
	for _, p := range pairs {
		if c[p[0]] != c[p[1]] {
			t.Errorf("calls %s = %d but %s = %d", p[0], c[p[0]], p[1], c[p[1]])
		}
	}
	if c["aclInit"] != 1 {
		t.Errorf("calls aclInit = %d, want 1", c["aclInit"])
	}
	// Every launch is described by its tensors: at least two per kernel.
	launches := c["aclnnMul"] + c["aclnnAdd"] + c["aclnnMatmul"] + c["aclnnInplaceCopy"]
	if c["aclCreateTensor"] < 2*launches {
		t.Errorf("aclCreateTensor %d < 2 x %d launches", c["aclCreateTensor"], launches)
	}
	if !strings.Contains(r.Stderr, "agent absent") {
		t.Errorf("without the agent preloaded decoder-sim should say so:\n%s", r.Stderr)
	}
}

// Without the agent --swap-layers changes nothing: every set gives the same numbers.
func TestSwapLayersParse(t *testing.T) {
	var first string
	for _, set := range []string{"none", "0,2,4", "1-3", "0-1,3", "all"} {
		r := mustRun(t, "--steps", "1", "--layers", "5", "--swap-layers", set, "--sync", "layer")
		l, _ := steps(t, r.Stdout, 1)
		if first == "" {
			first = l[0]
		} else if l[0] != first {
			t.Errorf("--swap-layers %s: %q, want %q", set, l[0], first)
		}
	}
}

func TestBadFlags(t *testing.T) {
	cases := [][]string{
		{"--bogus"},
		{"--layers", "x"},
		{"--layers", "0"},
		{"--layers"},
		{"--steps", "-1"},
		{"--link", "static"},
		{"--sync", "never"},
		{"--streams", "0"},
		{"--streams", "3"},
		{"--rope-dim", "63"},
		{"--swap-layers", "0-99"},
		{"--swap-layers", "3-1"},
		{"--swap-layers", "a"},
		{"--swap-layers", "1,"},
		{"--hidden=0"},
		{"--lr", "nan"},
		{"positional"},
		{"--alloc", "mmap"},
		{"--alloc"},
		{"--launch", "async"},
		{"--executor-cache", "yes"},
		{"--executor-cache-size", "0"},
		{"--executor-cache-size", "8"}, // without --executor-cache on
		{"--executor-cache", "on", "--executor-cache-size", "x"},
		{"--vmm-reserve", "64M"}, // without --alloc vmm
		{"--alloc", "vmm", "--vmm-reserve", "1X"},
		{"--alloc", "vmm", "--vmm-reserve", "0"},
	}
	for _, args := range cases {
		r := run(t, args...)
		lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n")
		if r.Code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "decoder-sim: ") || r.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one stderr line", args, r.Code, r.Stdout, r.Stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	r := mustRun(t, "--help")
	for _, f := range []string{"--layers", "--swap-layers", "--steps", "--seq", "--rope-dim", "--hidden", "--link", "--sync",
		"--streams", "--seed", "--alloc", "--vmm-reserve", "--launch", "--executor-cache", "--executor-cache-size"} {
		if !strings.Contains(r.Stdout, f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

// small runs in well under a second per process, jitter included.
var small = []string{"--steps", "2", "--seq", "512", "--layers", "4"}

func smallArgs(extra ...string) []string { return append(append([]string{}, small...), extra...) }

// checkerEnv turns on the emulator's hazard checker with random per-task delays on every stream.
func checkerEnv(seed int) []string {
	return []string{"ACLSIM_CHECK_HAZARDS=1", "ACLSIM_JITTER_US=200", "ACLSIM_SEED=" + strconv.Itoa(seed)}
}

var hazardsRE = regexp.MustCompile(`(?m)^aclsim: hazards: (\d+)$`)

// hazards returns N of the checker's `aclsim: hazards: N` line (printed at aclFinalize) and the
// `aclsim: hazard: ...` lines; a run without the line fails: the checker must be there, never skipped.
func hazards(t *testing.T, r result) (int, string) {
	t.Helper()
	out := r.Stderr + r.Stdout
	m := hazardsRE.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		t.Fatalf("want one `aclsim: hazards: N` line (ACLSIM_CHECK_HAZARDS=1 in sim/acl), got %d:\n%s", len(m), r.Stderr)
	}
	n, _ := strconv.Atoi(m[0][1])
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "aclsim: hazard: ") {
			lines = append(lines, l)
			if len(lines) == 10 {
				break
			}
		}
	}
	return n, strings.Join(lines, "\n")
}

// Every sync mode with one or two streams is race-free under random per-task delays, and computes the
// same bits as the fully synchronous single-stream run: the same kernels in the same data order.
func TestAsyncModesHazardFreeAndBitIdentical(t *testing.T) {
	want := stepText(mustRun(t, smallArgs("--sync", "op", "--streams", "1")...).Stdout)
	if strings.Count(want, "\n") != 2 {
		t.Fatalf("baseline printed %q", want)
	}
	for _, sync := range []string{"op", "layer", "step"} {
		for _, streams := range []string{"1", "2"} {
			for seed := 1; seed <= 3; seed++ {
				args := smallArgs("--sync", sync, "--streams", streams)
				r := mustRunEnv(t, checkerEnv(seed), args...)
				if n, lines := hazards(t, r); n != 0 {
					t.Errorf("--sync %s --streams %s, seed %d: %d hazards:\n%s", sync, streams, seed, n, lines)
				}
				if got := stepText(r.Stdout); got != want {
					t.Errorf("--sync %s --streams %s, seed %d: step lines differ from --sync op --streams 1:\n%s---\n%s",
						sync, streams, seed, got, want)
				}
				if !strings.Contains(r.Stderr, "sync "+sync+", streams "+streams+",") {
					t.Errorf("config line does not name sync %s, streams %s:\n%s", sync, streams, r.Stderr)
				}
			}
		}
	}
}

// The control: without the events the MLP stream races the main one and the checker must say so (the
// switch is test-only). With one stream there is nothing to order and the switch changes nothing.
func TestNoEventsControlHasHazards(t *testing.T) {
	env := append(checkerEnv(1), "DECODER_SIM_TEST_NO_EVENTS=1")
	r := runEnv(t, env, smallArgs("--sync", "step", "--streams", "2")...)
	if n, _ := hazards(t, r); n == 0 {
		t.Errorf("DECODER_SIM_TEST_NO_EVENTS=1 --streams 2: 0 hazards; the checker misses the unordered streams\n%s",
			r.Stderr)
	}
	if !strings.Contains(r.Stderr, "DECODER_SIM_TEST_NO_EVENTS=1") {
		t.Errorf("the test-only switch is not announced on stderr:\n%s", r.Stderr)
	}
	if c := calls(t, r.Stdout); c["aclrtRecordEvent"] != 0 || c["aclrtStreamWaitEvent"] != 0 {
		t.Errorf("events used with the switch on: %v", c)
	}
	want := stepText(mustRun(t, smallArgs()...).Stdout)
	r = mustRunEnv(t, env, smallArgs("--sync", "step", "--streams", "1")...)
	if n, lines := hazards(t, r); n != 0 || stepText(r.Stdout) != want {
		t.Errorf("DECODER_SIM_TEST_NO_EVENTS=1 --streams 1: %d hazards, steps\n%s(want\n%s)%s", n, stepText(r.Stdout),
			want, lines)
	}
}

// The waits of each sync mode, from the call counts: a step adds exactly the stream syncs the README lists
// and no synchronous copy; with two streams each layer records and waits on an event twice per pass.
func TestSyncModeWaits(t *testing.T) {
	const layers = 4
	for _, sync := range []string{"op", "layer", "step"} {
		for _, streams := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", sync, streams), func(t *testing.T) {
				base := []string{"--seq", "512", "--layers", strconv.Itoa(layers), "--sync", sync,
					"--streams", strconv.Itoa(streams)}
				one := calls(t, mustRun(t, append([]string{"--steps", "1"}, base...)...).Stdout)
				two := calls(t, mustRun(t, append([]string{"--steps", "2"}, base...)...).Stdout)
				step := func(fn string) int { return two[fn] - one[fn] }
				launches := step("aclnnMul") + step("aclnnAdd") + step("aclnnMatmul") + step("aclnnInplaceCopy")
				syncs := map[string]int{"op": launches + 2*streams, "layer": (2*layers + 2) * streams,
					"step": 2 * streams}[sync]
				if got := step("aclrtSynchronizeStream"); got != syncs {
					t.Errorf("aclrtSynchronizeStream per step %d, want %d", got, syncs)
				}
				// At exit each stream is synced once more (the last update).
				if got := one["aclrtSynchronizeStream"] - syncs; got != streams {
					t.Errorf("aclrtSynchronizeStream outside the steps %d, want %d (at exit)", got, streams)
				}
				// Results come back through async copies: cos, sin, the output and 6 gradients per layer.
				if step("aclrtMemcpy") != 0 || step("aclrtMemcpyAsync") != 3+6*layers {
					t.Errorf("per step: aclrtMemcpy %d (want 0), aclrtMemcpyAsync %d (want %d)", step("aclrtMemcpy"),
						step("aclrtMemcpyAsync"), 3+6*layers)
				}
				for fn := range two {
					if strings.Contains(fn, "Memset") || (strings.HasPrefix(fn, "aclrtSynchronize") && fn != "aclrtSynchronizeStream") {
						t.Errorf("unexpected wait or memset: calls %s %d", fn, two[fn])
					}
				}
				events := 0
				if streams == 2 {
					events = 4 * layers
				}
				if step("aclrtRecordEvent") != events || step("aclrtStreamWaitEvent") != events {
					t.Errorf("per step: aclrtRecordEvent %d, aclrtStreamWaitEvent %d, want %d each",
						step("aclrtRecordEvent"), step("aclrtStreamWaitEvent"), events)
				}
				if two["aclrtCreateStream"] != streams || two["aclrtDestroyStream"] != streams ||
					two["aclrtCreateEvent"] != two["aclrtDestroyEvent"] || two["aclrtCreateEvent"] != map[int]int{1: 0, 2: 2}[streams] {
					t.Errorf("streams/events created and destroyed: %v", two)
				}
			})
		}
	}
	// The event functions go through the function table: dlsym reaches them the same number of times.
	args := smallArgs("--sync", "step", "--streams", "2")
	cd := calls(t, mustRun(t, append(args, "--link", "direct")...).Stdout)
	cs := calls(t, mustRun(t, append(args, "--link", "dlsym")...).Stdout)
	if cd["aclrtRecordEvent"] == 0 || fmt.Sprint(cd) != fmt.Sprint(cs) {
		t.Errorf("--streams 2 calls: direct %v, dlsym %v", cd, cs)
	}
}

// runtimeFlags are the 8 combinations of the MindSpore-like runtime modes: --alloc x --launch x
// --executor-cache.
func runtimeFlags() [][]string {
	var out [][]string
	for _, alloc := range []string{"malloc", "vmm"} {
		for _, launch := range []string{"inline", "thread"} {
			for _, cache := range []string{"off", "on"} {
				out = append(out, []string{"--alloc", alloc, "--launch", launch, "--executor-cache", cache})
			}
		}
	}
	return out
}

var (
	cacheLineRE  = regexp.MustCompile(`(?m)^decoder-sim: executor cache: (\d+) hits, (\d+) misses, (\d+) evictions, capacity (\d+)$`)
	mappedPeakRE = regexp.MustCompile(`; mapped peak (\d+) bytes \(`)
	poolPeakRE   = regexp.MustCompile(`pool peak ([0-9.]+) MiB of [0-9.]+ MiB reserved`)
)

type cacheStats struct{ hits, misses, evictions, capacity int }

func executorCache(t *testing.T, stderr string) cacheStats {
	t.Helper()
	m := cacheLineRE.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no executor cache line on stderr:\n%s", stderr)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	return cacheStats{n(1), n(2), n(3), n(4)}
}

var kernels = []string{"aclnnMul", "aclnnAdd", "aclnnMatmul", "aclnnInplaceCopy"}

// checkCacheCounts checks the calls of an --executor-cache on run c against the same run with the cache
// off (base): the same launches; a tensor is created only on a miss and re-pointed on every hit, so created
// plus re-pointed tensors equal the tensors of base; GetWorkspaceSize and the executors made repeatable
// are the misses; every executor, tensor and scalar is destroyed by the exit.
func checkCacheCounts(t *testing.T, c, base map[string]int, cs cacheStats) {
	t.Helper()
	launches, ws := 0, 0
	for _, k := range kernels {
		if c[k] != base[k] {
			t.Errorf("cache on: calls %s %d, want %d as with the cache off", k, c[k], base[k])
		}
		launches += c[k]
		ws += c[k+"GetWorkspaceSize"]
	}
	if cs.hits+cs.misses != launches || cs.misses == 0 || cs.hits <= cs.misses {
		t.Errorf("cache on: %d hits + %d misses, want a few misses and hits+misses = %d launches", cs.hits, cs.misses, launches)
	}
	if ws != cs.misses || c["aclSetAclOpExecutorRepeatable"] != cs.misses || c["aclDestroyAclOpExecutor"] != cs.misses {
		t.Errorf("cache on: GetWorkspaceSize %d, aclSetAclOpExecutorRepeatable %d, aclDestroyAclOpExecutor %d, want the %d misses",
			ws, c["aclSetAclOpExecutorRepeatable"], c["aclDestroyAclOpExecutor"], cs.misses)
	}
	if c["aclSetTensorAddr"] == 0 || c["aclCreateTensor"]+c["aclSetTensorAddr"] != base["aclCreateTensor"] ||
		c["aclCreateTensor"] >= base["aclCreateTensor"]/4 {
		t.Errorf("cache on: aclCreateTensor %d + aclSetTensorAddr %d, want a few creations and the sum %d (cache off)",
			c["aclCreateTensor"], c["aclSetTensorAddr"], base["aclCreateTensor"])
	}
	if c["aclDestroyTensor"] != c["aclCreateTensor"] || c["aclDestroyScalar"] != c["aclCreateScalar"] ||
		c["aclCreateScalar"] == 0 || c["aclCreateScalar"] >= base["aclCreateScalar"] {
		t.Errorf("cache on: tensors %d/%d, scalars %d/%d created/destroyed (cache off: %d scalars)", c["aclCreateTensor"],
			c["aclDestroyTensor"], c["aclCreateScalar"], c["aclDestroyScalar"], base["aclCreateScalar"])
	}
}

// checkAllocCounts checks the device-memory calls of one --alloc mode.
func checkAllocCounts(t *testing.T, alloc string, c map[string]int) {
	t.Helper()
	vmm := []string{"aclrtMemGetAllocationGranularity", "aclrtReserveMemAddress", "aclrtReleaseMemAddress",
		"aclrtMallocPhysical", "aclrtFreePhysical", "aclrtMapMem", "aclrtUnmapMem"}
	if alloc == "malloc" {
		for _, fn := range vmm {
			if c[fn] != 0 {
				t.Errorf("--alloc malloc: calls %s %d, want 0", fn, c[fn])
			}
		}
		if c["aclrtMalloc"] == 0 || c["aclrtMalloc"] != c["aclrtFree"] {
			t.Errorf("--alloc malloc: aclrtMalloc %d, aclrtFree %d", c["aclrtMalloc"], c["aclrtFree"])
		}
		return
	}
	// MindSpore's VMM pool: no tensor memory from aclrtMalloc; one reservation; 2 MiB chunks mapped on
	// demand, and every mapped chunk unmapped and freed by the exit.
	if c["aclrtMalloc"] != 0 || c["aclrtFree"] != 0 {
		t.Errorf("--alloc vmm: aclrtMalloc %d, aclrtFree %d, want 0", c["aclrtMalloc"], c["aclrtFree"])
	}
	if c["aclrtReserveMemAddress"] != 1 || c["aclrtReleaseMemAddress"] != 1 || c["aclrtMemGetAllocationGranularity"] != 1 {
		t.Errorf("--alloc vmm: aclrtReserveMemAddress %d, aclrtReleaseMemAddress %d, aclrtMemGetAllocationGranularity %d, want 1 each",
			c["aclrtReserveMemAddress"], c["aclrtReleaseMemAddress"], c["aclrtMemGetAllocationGranularity"])
	}
	if m := c["aclrtMapMem"]; m == 0 || c["aclrtMallocPhysical"] != m || c["aclrtUnmapMem"] != m || c["aclrtFreePhysical"] != m {
		t.Errorf("--alloc vmm: aclrtMallocPhysical %d, aclrtMapMem %d, aclrtUnmapMem %d, aclrtFreePhysical %d: want equal and > 0",
			c["aclrtMallocPhysical"], m, c["aclrtUnmapMem"], c["aclrtFreePhysical"])
	}
}

// Every combination of --alloc, --launch and --executor-cache, in both link modes, computes the same bits
// as the default run, with the calls each mode implies. The launch thread changes only which thread makes
// the calls: its counts equal the inline run's.
func TestRuntimeModesBitIdenticalAndCounts(t *testing.T) {
	baseRun := mustRun(t, smallArgs()...)
	want := stepText(baseRun.Stdout)
	if strings.Count(want, "\n") != 2 {
		t.Fatalf("baseline printed %q", want)
	}
	base := calls(t, baseRun.Stdout)
	counts := map[string]map[string]int{}
	for _, mode := range runtimeFlags() {
		for _, link := range []string{"direct", "dlsym"} {
			name := strings.Join([]string{mode[1], mode[3], "cache-" + mode[5], link}, "/")
			args := smallArgs(append(append([]string{}, mode...), "--link", link)...)
			r := mustRun(t, args...)
			if got := stepText(r.Stdout); got != want {
				t.Errorf("%s: step lines differ from the default run:\n%s---\n%s", name, got, want)
			}
			cfg := fmt.Sprintf("link %s, sync op, streams 1, alloc %s", link, mode[1])
			if !strings.Contains(r.Stderr, cfg) || !strings.Contains(r.Stderr, "launch "+mode[3]+", executor cache "+mode[5]) {
				t.Errorf("%s: the configuration line does not name the modes:\n%s", name, r.Stderr)
			}
			c := calls(t, r.Stdout)
			counts[name] = c
			checkAllocCounts(t, mode[1], c)
			if mode[5] == "on" {
				checkCacheCounts(t, c, base, executorCache(t, r.Stderr))
			} else {
				for _, fn := range []string{"aclSetTensorAddr", "aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor"} {
					if c[fn] != 0 {
						t.Errorf("%s: calls %s %d with the cache off", name, fn, c[fn])
					}
				}
				for _, fn := range []string{"aclCreateTensor", "aclCreateScalar", "aclnnMulGetWorkspaceSize", "aclnnMul"} {
					if c[fn] != base[fn] {
						t.Errorf("%s: calls %s %d, want %d as the default run", name, fn, c[fn], base[fn])
					}
				}
				if cacheLineRE.MatchString(r.Stderr) {
					t.Errorf("%s: executor cache line with the cache off", name)
				}
			}
			if mode[1] == "malloc" && mode[5] == "off" && fmt.Sprint(c) != fmt.Sprint(base) {
				t.Errorf("%s: calls differ from the default run:\n%v\n%v", name, c, base)
			}
		}
	}
	// The launch thread and dlsym only move calls between threads and handles: same counts.
	for name, c := range counts {
		other := strings.Replace(strings.Replace(name, "/thread/", "/inline/", 1), "/dlsym", "/direct", 1)
		if fmt.Sprint(c) != fmt.Sprint(counts[other]) {
			t.Errorf("calls of %s differ from %s:\n%v\n%v", name, other, c, counts[other])
		}
	}
}

// The new modes stay race-free with two streams and asynchronous waits: under random per-task delays the
// hazard checker finds nothing and the bits equal the default run.
func TestRuntimeModesHazardFree(t *testing.T) {
	want := stepText(mustRun(t, smallArgs()...).Stdout)
	type tc struct {
		sync  string
		extra []string
	}
	var cases []tc
	for _, mode := range runtimeFlags() {
		cases = append(cases, tc{"step", mode})
	}
	all := []string{"--alloc", "vmm", "--launch", "thread", "--executor-cache", "on"}
	cases = append(cases, tc{"layer", all}, tc{"op", all}, tc{"step", append(append([]string{}, all...), "--link", "dlsym")},
		tc{"step", append(append([]string{}, all...), "--executor-cache-size", "3")})
	for i, c := range cases {
		args := smallArgs(append([]string{"--sync", c.sync, "--streams", "2"}, c.extra...)...)
		r := mustRunEnv(t, checkerEnv(i+1), args...)
		if n, lines := hazards(t, r); n != 0 {
			t.Errorf("%v: %d hazards:\n%s", args, n, lines)
		}
		if got := stepText(r.Stdout); got != want {
			t.Errorf("%v: step lines differ from the default run:\n%s---\n%s", args, got, want)
		}
	}
}

// The VMM pool maps 2 MiB chunks on demand, unmaps the free ones at the end of the pool after every step
// (and maps them again in the next), reports its mapped peak, and stops with one named line when the
// reservation is too small.
func TestVMMPool(t *testing.T) {
	mapped := func(steps int) (map[string]int, result) {
		r := mustRun(t, "--steps", strconv.Itoa(steps), "--seq", "512", "--layers", "4", "--alloc", "vmm")
		return calls(t, r.Stdout), r
	}
	one, r := mapped(1)
	two, _ := mapped(2)
	three, _ := mapped(3)
	perStep := two["aclrtMapMem"] - one["aclrtMapMem"]
	if perStep <= 0 || three["aclrtMapMem"]-two["aclrtMapMem"] != perStep {
		t.Errorf("aclrtMapMem with 1, 2, 3 steps: %d, %d, %d; want the same number > 0 mapped again every step (eager free)",
			one["aclrtMapMem"], two["aclrtMapMem"], three["aclrtMapMem"])
	}
	m := mappedPeakRE.FindStringSubmatch(r.Stderr)
	p := poolPeakRE.FindStringSubmatch(r.Stderr)
	if m == nil || p == nil {
		t.Fatalf("no pool or mapped peak on stderr:\n%s", r.Stderr)
	}
	peak, _ := strconv.ParseUint(m[1], 10, 64)
	pool, _ := strconv.ParseFloat(p[1], 64)
	if peak == 0 || peak%(2<<20) != 0 || float64(peak) < pool*(1<<20)-0.05*(1<<20) || peak > uint64(one["aclrtMapMem"])*(2<<20) {
		t.Errorf("mapped peak %d bytes: want a multiple of 2 MiB, at least the pool peak %.1f MiB, at most the %d chunks mapped",
			peak, pool, one["aclrtMapMem"])
	}
	if !regexp.MustCompile(`alloc vmm \(reserve [0-9.]+ MiB\)`).MatchString(r.Stderr) {
		t.Errorf("the configuration line does not name the reservation:\n%s", r.Stderr)
	}
	// A block larger than a chunk lies on adjacent chunks: the RoPE tables of seq 8192, rope-dim 128 are
	// 4 MiB each.
	bigArgs := []string{"--steps", "2", "--seq", "8192", "--rope-dim", "128", "--layers", "2", "--sync", "step"}
	big := mustRun(t, append([]string{"--alloc", "vmm"}, bigArgs...)...)
	if got, want := stepText(big.Stdout), stepText(mustRun(t, bigArgs...).Stdout); got != want {
		t.Errorf("4 MiB blocks: vmm and malloc differ:\n%s---\n%s", got, want)
	}
	checkAllocCounts(t, "vmm", calls(t, big.Stdout))
	bad := run(t, "--steps", "1", "--seq", "512", "--layers", "4", "--alloc", "vmm", "--vmm-reserve", "2M")
	if bad.Code != 1 || !strings.Contains(bad.Stderr, "reservation is full") || !strings.Contains(bad.Stderr, "--vmm-reserve") {
		t.Errorf("--vmm-reserve 2M: exit %d, want 1 with a line naming the full reservation:\n%s", bad.Code, bad.Stderr)
	}
}

// A tiny cache evicts all the time: evicted executors are destroyed (through the launch queue with the
// launch thread) and the results do not change.
func TestExecutorCacheEvictions(t *testing.T) {
	want := stepText(mustRun(t, smallArgs()...).Stdout)
	base := calls(t, mustRun(t, smallArgs()...).Stdout)
	for _, launch := range []string{"inline", "thread"} {
		r := mustRun(t, smallArgs("--executor-cache", "on", "--executor-cache-size", "3", "--launch", launch,
			"--sync", "step")...)
		if got := stepText(r.Stdout); got != want {
			t.Errorf("--launch %s, cache of 3: step lines differ:\n%s---\n%s", launch, got, want)
		}
		cs := executorCache(t, r.Stderr)
		if cs.capacity != 3 || cs.evictions == 0 || cs.evictions != cs.misses-3 {
			t.Errorf("--launch %s, cache of 3: %+v, want evictions = misses - 3 > 0", launch, cs)
		}
		c := calls(t, r.Stdout)
		if c["aclDestroyAclOpExecutor"] != cs.misses || c["aclCreateTensor"]+c["aclSetTensorAddr"] != base["aclCreateTensor"] ||
			c["aclDestroyTensor"] != c["aclCreateTensor"] {
			t.Errorf("--launch %s, cache of 3: %+v, calls %v", launch, cs, c)
		}
	}
}
