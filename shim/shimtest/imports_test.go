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
