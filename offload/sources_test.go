// sources_test.go reads the tree's sources: what offload/ owns (what a policy means) and what genabi
// generates (the error codes) is written nowhere else.
package offload

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

// What a policy means is written in offload/ alone: the rest of the tree asks the engine or the policy what
// it allows (Policy.WantsHolders, Policy.KeepsInputs, Policy.MovesExternal, Engine.Queueing; Python reads
// the stats' "asks") and never compares a policy's name: not the agent, the shim, the CLI's packages, the
// companions, the guard nor the C sides. A bare "off" is not looked for: other settings take it too
// (SWAPAGENT_PYTHON, SWAPAGENT_TRACE).
func TestPolicyComparedOnlyInOffload(t *testing.T) {
	const goName = `(?:trace|offload)\.Policy(?:Safe|OutputsOnly|Off)\b|"(?:safe|outputs-only)"`
	const pyName = `\b(?:\w+\.)?POLICY_(?:SAFE|OUTPUTS_ONLY|OFF)\b|["'](?:safe|outputs-only)["']`
	rules := map[string]*regexp.Regexp{
		".go": regexp.MustCompile(`(?:==|!=)\s*(?:` + goName + `)|(?:` + goName + `)\s*(?:==|!=)|\bcase\s+(?:` +
			goName + `)`),
		".py": regexp.MustCompile(`(?:==|!=|\bis\b|\bin\b)\s*(?:` + pyName + `)|(?:` + pyName +
			`)\s*(?:==|!=|\bis\b|\bin\b)|\bin\s*[(\[{][^)\]}]*(?:` + pyName + `)`),
		".c": regexp.MustCompile(`SWAPAGENT_POLICY_[A-Z]`),
		".h": regexp.MustCompile(`SWAPAGENT_POLICY_[A-Z]`),
	}
	eachSource(t, testenv.Root(t), func(rel, name string, lines []string) {
		rule := rules[filepath.Ext(name)]
		if rule == nil || strings.HasPrefix(rel, "offload/") {
			return
		}
		for i, line := range lines {
			if m := rule.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: a policy compared outside offload/ (ask the engine what it allows)", rel, i+1, m)
			}
		}
	})
}

// The SWAPAGENT_E* codes are genabi's (trace.Code*): no Go source defines its own constant for one.
func TestErrorCodesOnlyFromGenabi(t *testing.T) {
	code := regexp.MustCompile(`^\s*(?:Code)?E[A-Z][A-Za-z]*\s*=\s*-[0-9]`)
	eachSource(t, testenv.Root(t), func(rel, name string, lines []string) {
		if filepath.Ext(name) != ".go" {
			return
		}
		for i, line := range lines {
			if code.MatchString(line) {
				t.Errorf("%s:%d: %q: an error code copied by hand (use trace.Code*)", rel, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// The control calls have one table, shim/c/calls.def, and genabi writes what the rest needs from it
// (swapagent.h's kinds, trace.Call*, _abi.CALL_*, the agent's dispatch): no source numbers a kind, lists a
// set of kinds or dispatches on them by hand. The layout of a call's copy (sa_call) is calls.c's: Go reads
// each part where the copy says it lies (part_off, group_off), never works an offset out again.
func TestCallsOnlyFromTable(t *testing.T) {
	rules := map[string][]*regexp.Regexp{
		".go": {
			regexp.MustCompile(`^\s*Call[A-Z]\w*\s*=\s*[0-9]`),   // a kind's number
			regexp.MustCompile(`\bcase\s+trace\.Call[A-Z]`),      // a dispatch on kinds
			regexp.MustCompile(`trace\.Call[A-Z]\w*\s*:\s*true`), // a set of kinds
		},
		".c": {
			regexp.MustCompile(`#define\s+SWAPAGENT_CALL_`),              // a kind's number
			regexp.MustCompile(`\bcase\s+SWAPAGENT_CALL_`),               // a dispatch on kinds
			regexp.MustCompile(`\[SWAPAGENT_CALL_\w+\]\s*=`),             // a table of kinds
			regexp.MustCompile(`==\s*SWAPAGENT_CALL_\w+\s*\|\|`),         // a set of kinds
			regexp.MustCompile(`\|\|\s*[\w>.-]+\s*==\s*SWAPAGENT_CALL_`), // its other half
		},
		".py": {
			regexp.MustCompile(`^\s*CALL_[A-Z_]+\s*=\s*[0-9]`),                                           // a kind's number
			regexp.MustCompile(`(?:\bin|=)\s*(?:frozenset\(|set\()?[(\[{]\s*(?:\w+\.)?CALL_[A-Z_]+\s*,`), // a set
		},
	}
	rules[".h"] = rules[".c"]
	goAdd, cData := regexp.MustCompile(`unsafe\.Add\(`), regexp.MustCompile(`->data\s*\+`)
	fromCopy := regexp.MustCompile(`part_off|group_off|unsafe\.Sizeof\(\*`)
	eachSource(t, testenv.Root(t), func(rel, name string, lines []string) {
		text := strings.Join(lines, "\n")
		layout, offset := false, goAdd
		switch filepath.Ext(name) {
		case ".go":
			layout = strings.Contains(text, "C.sa_call")
		case ".c":
			layout, offset = strings.Contains(text, "sa_call *"), cData // data + part_off
		}
		for i, line := range lines {
			for _, rule := range rules[filepath.Ext(name)] {
				if m := rule.FindString(line); m != "" {
					t.Errorf("%s:%d: %q: a call kind written by hand (shim/c/calls.def has them; make generate)", rel,
						i+1, m)
				}
			}
			if layout && offset.MatchString(line) && !fromCopy.MatchString(line) {
				t.Errorf("%s:%d: an offset into a call's copy worked out by hand (read sa_call's part_off)", rel, i+1)
			}
		}
	})
}

// eachSource calls fn with the lines of each source file (Go, Python, C) of the tree that is not a test, a
// generated file (*_gen.go, _abi.py; swapagent.h, whose call kinds are generated and whose other values are
// genabi's source), genabi, a bench script or an example.
func eachSource(t *testing.T, root string, fn func(rel, name string, lines []string)) {
	t.Helper()
	skipDirs := map[string]bool{".git": true, ".venv": true, "build": true, "testdata": true,
		"genabi": true, "tests": true, "bench": true, "examples": true}
	skipFiles := map[string]bool{"_abi.py": true, "swapagent.h": true, "calls.def": true}
	read := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		switch name := d.Name(); {
		case skipFiles[name], strings.HasSuffix(name, "_gen.go"), strings.HasSuffix(name, "_test.go"),
			strings.HasPrefix(name, "test_"):
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".py", ".c", ".h":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read++
		rel, _ := filepath.Rel(root, path)
		fn(rel, d.Name(), strings.Split(string(b), "\n"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if read < 100 {
		t.Fatalf("read %d source files under %s: not the tree", read, root)
	}
}
