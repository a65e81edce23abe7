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

// eachSource calls fn with the lines of each source file (Go, Python, C) of the tree that is not a test, a
// generated file, genabi, a bench script or an example.
func eachSource(t *testing.T, root string, fn func(rel, name string, lines []string)) {
	t.Helper()
	skipDirs := map[string]bool{".git": true, ".venv": true, "build": true, "testdata": true,
		"genabi": true, "tests": true, "bench": true, "examples": true}
	skipFiles := map[string]bool{"abi_gen.go": true, "_abi.py": true, "swapagent.h": true}
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
		case skipFiles[name], strings.HasSuffix(name, "_test.go"), strings.HasPrefix(name, "test_"):
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
