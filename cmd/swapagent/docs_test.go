package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"swapagent/internal/testenv"
)

// docs/cli.md against the binary: every flag its run, report and version sections name (their synopsis
// and flag tables) is one the command's help lists, and every labelled line of its example outputs (run's
// summary, version's lines) is one the command prints.
func TestCLIDocMatchesTheBinary(t *testing.T) {
	doc, err := os.ReadFile(testenv.Path(t, "docs/cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, s := range strings.Split(string(doc), "\n## ")[1:] {
		name, body, _ := strings.Cut(s, "\n")
		sections[name] = body
	}
	flag := regexp.MustCompile("(?m)(?:^\\| `|\\[)(--[a-z][a-z-]*)")
	for _, cmd := range []string{"run", "report", "version"} {
		body, ok := sections[cmd]
		if !ok {
			t.Fatalf("docs/cli.md has no %q section", cmd)
		}
		help := swapagent(t, nil, "help", cmd).Stdout
		for _, m := range flag.FindAllStringSubmatch(body, -1) {
			if !strings.Contains(help, m[1]+" ") && !strings.Contains(help, m[1]+"\n") {
				t.Errorf("docs/cli.md's %s section names %s; `swapagent help %s` does not list it", cmd, m[1], cmd)
			}
		}
	}
	// The example outputs: each "  label: ..." line of run's summary, each "label: ..." line of version's.
	label := regexp.MustCompile(`^( *)([a-zA-Z][a-zA-Z ()']*):`)
	out := t.TempDir()
	run := swapagent(t, nil, "run", "--policy", "safe", "--out", filepath.Join(out, "sa"), "--",
		testenv.Path(t, testenv.DecoderSim), "--steps", "2").Stderr
	version := swapagent(t, nil, "version").Stdout
	for cmd, got := range map[string]string{"run": run, "version": version} {
		_, block, found := strings.Cut(sections[cmd], "$ swapagent "+cmd)
		if !found {
			t.Fatalf("docs/cli.md's %s section has no example", cmd)
		}
		block, _, _ = strings.Cut(block, "```")
		n := 0
		for _, line := range strings.Split(block, "\n")[1:] {
			if m := label.FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "$") {
				n++
				if !strings.Contains(got, "\n"+m[1]+m[2]+":") {
					t.Errorf("docs/cli.md's %s example shows %q; the command prints no such line:\n%s", cmd, line, got)
				}
			}
		}
		if n < 4 {
			t.Errorf("docs/cli.md's %s example: %d labelled lines found; the check reads nothing", cmd, n)
		}
	}
}
