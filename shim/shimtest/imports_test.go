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

// The rules live in Go (docs/design.md, "Where each rule lives"): the shim records, copies and answers what
// it was told. It names no keep reason, policy or offload state, reads no setting that decides one, and
// copies no constant by hand from Go or Python: what it shares comes from swapagent.h (genabi) or is handed
// to it at run time (offload.Engine.Queueing through sa_go_queueing).
func TestCSidesHoldNoRule(t *testing.T) {
	root := testenv.Root(t)
	files, err := filepath.Glob(filepath.Join(root, "shim/c/*.[ch]"))
	if err != nil || len(files) < 10 {
		t.Fatalf("shim/c: %v, %d files", err, len(files))
	}
	rule := regexp.MustCompile(`SWAPAGENT_(KEEP|POLICY|STATE)_[A-Z]|"SWAPAGENT_(MIN_BYTES|POLICY|PREFETCH)"`)
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

// The companions' rules (pack, unpack, a region's enter and exit, when a layer's backward ends, which
// gradient call is dead, the walk of nested arguments) have one implementation, swapagent.core and its
// Python modules (docs/design.md, "Where each rule lives"). A second, compiled copy would be a C, C++ or
// Cython file of the package, or any C file of the tree built against CPython's API: neither may exist.
func TestCompanionRulesHaveOneImplementation(t *testing.T) {
	root := testenv.Root(t)
	pyFiles := 0
	err := filepath.WalkDir(filepath.Join(root, "python"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && (name == "__pycache__" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		switch filepath.Ext(name) {
		case ".c", ".h", ".cc", ".cpp", ".pyx", ".pxd", ".so":
			t.Errorf("%s: compiled code in the companions' tree (their rules are Python's alone)", path)
		case ".py":
			pyFiles++
		}
		return nil
	})
	if err != nil || pyFiles < 10 {
		t.Fatalf("python/: %v, %d Python files", err, pyFiles)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "build") {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".c" && ext != ".h" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "Python.h") {
			t.Errorf("%s: C against CPython's API (a compiled copy of the companions' rules)", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
