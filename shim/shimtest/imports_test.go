package shimtest

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

// Every runtime call the reference sheet says MindSpore 2.10 or torch_npu 2.14 makes is either interposed
// (hooks.def: SA_HOOK, SA_CUSTOM, SA_LAUNCH) or listed as deliberately passed through, with a reason
// (SA_PASS). A call neither hooked nor passed is a hole in what the agent sees.
func TestEveryRuntimeImportIsHookedOrPassed(t *testing.T) {
	hooked := intercepted(t)
	b, err := os.ReadFile(filepath.Join(testenv.Root(t), "shim/c/hooks.def"))
	if err != nil {
		t.Fatal(err)
	}
	passed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^SA_PASS\((\w+),\s*"([^"]+)"\)`).FindAllSubmatch(b, -1) {
		passed[string(m[1])] = string(m[2])
	}
	f, err := os.Open("testdata/runtime-imports.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		name := strings.TrimSpace(sc.Text())
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		n++
		_, h := hooked[name]
		_, p := passed[name]
		switch {
		case h && p:
			t.Errorf("%s is both hooked and passed through", name)
		case !h && !p:
			t.Errorf("%s is neither hooked nor listed with SA_PASS in hooks.def", name)
		}
	}
	if n < 50 {
		t.Fatalf("read only %d names from testdata/runtime-imports.txt", n)
	}
	for name := range passed {
		if hooked[name] {
			t.Errorf("SA_PASS(%s) names a hooked function", name)
		}
	}
}

// The rules live in Go (docs/design.md, "Where each rule lives"): the C sides (the shim, the companions'
// compiled hot path) record, copy and answer what they were told. They name no keep reason, policy or
// offload state, read no setting that decides one, and copy no constant by hand from Go or Python: what they
// share comes from swapagent.h (genabi) or is handed to them at run time (offload.Engine.Queueing through
// sa_go_queueing, core's constants through _hot.configure).
func TestCSidesHoldNoRule(t *testing.T) {
	root := testenv.Root(t)
	files, err := filepath.Glob(filepath.Join(root, "shim/c/*.[ch]"))
	if err != nil || len(files) < 10 {
		t.Fatalf("shim/c: %v, %d files", err, len(files))
	}
	hot, err := filepath.Glob(filepath.Join(root, "python/swapagent/_hot*.[ch]"))
	if err != nil || len(hot) < 4 {
		t.Fatalf("python/swapagent: %v, %d files of the compiled hot path", err, len(hot))
	}
	files = append(files, hot...)
	rule := regexp.MustCompile(`SWAPAGENT_(KEEP|POLICY|STATE)_[A-Z]|"SWAPAGENT_(MIN_BYTES|POLICY|PREFETCH)"|` +
		`/\*\s*(agent|trace|core|offload|tracker)\.[A-Za-z_]+\s*\*/`)
	for _, f := range files {
		if filepath.Base(f) == "swapagent.h" { // the ABI's one source
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := rule.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: a rule or a hand-copied constant on the C side", filepath.Base(f), i+1, m)
			}
		}
	}
}
