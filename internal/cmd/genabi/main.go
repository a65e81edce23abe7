// Command genabi generates the control ABI's vocabulary from its sources: shim/c/swapagent.h for the
// return codes, save flags, states, keep reasons, guard release answers, policies, options of
// swapagent_call, the arguments' limits and the ABI version; shim/c/calls.def, the table of control calls,
// for the call kinds (written into swapagent.h's SWAPAGENT_CALL_* block, between its calls.def marks, with
// each row's comments) and the agent's dispatch of each kind to its handler (agent/calls_gen.go). It writes
// them as Go constants of package trace (trace/abi_gen.go) and as the Python companion's constants
// (python/swapagent/_abi.py), with the fields of struct swapagent_call as ctypes types for Python; and the
// ring's pseudo function IDs from shim/c/sa.h (SA_FN_*), which traces record, into package trace.
//
// Usage, from anywhere in the module (go generate ./trace runs it too):
//
//	go run ./internal/cmd/genabi          # rewrite the generated files
//	go run ./internal/cmd/genabi -check   # exit 1 when a generated file is not current (make test)
//
// Every #define SWAPAGENT_<NAME> with a value must belong to a known family, and each family must be
// numbered as the generated code assumes (codes 0, -1, -2, ...; states and keep reasons 0, 1, 2, ...; flags
// distinct bits; policies distinct names): a header edit that breaks that fails here, not in a reader.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Paths relative to the module root.
const (
	headerPath = "shim/c/swapagent.h"
	shimPath   = "shim/c/sa.h" // the shim's internal header: only its SA_FN_* are read
	goPath     = "trace/abi_gen.go"
	pyPath     = "python/swapagent/_abi.py"
	tablePath  = "shim/c/calls.def" // the table of control calls
	callsPath  = "agent/calls_gen.go"
)

// constant is one #define of the header.
type constant struct {
	Name    string // after SWAPAGENT_: "EINVAL", "STATE_D2H"
	Suffix  string // after the family's prefix: "EINVAL", "D2H"
	Int     int64  // numeric value
	Str     string // string value (policies)
	Comment string // the trailing /* ... */ comment, if any
}

// vocab is the header's constants by family, in header order.
type vocab struct {
	Version  int64
	Codes    []constant // OK first, then E*
	Flags    []constant
	States   []constant
	Keep     []constant
	Releases []constant // answers of SWAPAGENT_CALL_GUARD_RELEASE
	Owns     []constant // SWAPAGENT_OWN_*: the kinds of a layer's own holders, distinct bits
	Policies []constant
	Limits   []constant // SWAPAGENT_MAX_*: the calls' argument limits
	Calls    []constant // SWAPAGENT_CALL_*: the kinds of swapagent_call, 1, 2, ...
	Opts     []constant // SWAPAGENT_OPT_*: swapagent_call's options, distinct bits
	Fields   []field    // struct swapagent_call's fields, in order
	Fns      []constant // shim/c/sa.h's SA_FN_*: the ring's pseudo function IDs, which traces record
}

// field is one field of struct swapagent_call and its ctypes type.
type field struct{ Name, CType string }

// ctypesOf maps the C types a call record's fields may have to ctypes: a string is c_char_p (bytes, or an
// address), any other pointer an address.
var ctypesOf = map[string]string{"uint32_t": "c_uint32", "size_t": "c_size_t", "int64_t": "c_int64",
	"uintptr_t": "c_size_t", "pointer": "c_void_p", "string": "c_char_p"}

var fieldRE = regexp.MustCompile(`^(const\s+)?([a-z0-9_]+)\s*(\*?)\s*([a-z_0-9]+);`)

// parseFields reads the fields of struct swapagent_call from the header text.
func parseFields(v *vocab, src string) error {
	start := strings.Index(src, "struct swapagent_call {")
	if start < 0 {
		return fmt.Errorf("%s: no struct swapagent_call", headerPath)
	}
	end := strings.Index(src[start:], "};")
	for _, line := range strings.Split(src[start:start+end], "\n")[1:] {
		m := fieldRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		t := m[2]
		switch {
		case m[3] == "*" && t == "char":
			t = "string"
		case m[3] == "*":
			t = "pointer"
		}
		ct, ok := ctypesOf[t]
		if !ok {
			return fmt.Errorf("%s: struct swapagent_call's %s has type %s, which genabi does not map", headerPath,
				m[4], t)
		}
		v.Fields = append(v.Fields, field{m[4], ct})
	}
	if len(v.Fields) < 2 || v.Fields[0].Name != "size" {
		return fmt.Errorf("%s: struct swapagent_call must start with its size", headerPath)
	}
	return nil
}

var (
	defineRE = regexp.MustCompile(`^#define\s+SWAPAGENT_([A-Z0-9_]+)\s+(.+?)\s*(?:/\*\s*(.*?)\s*\*/)?\s*$`)
	fnRE     = regexp.MustCompile(`^#define\s+SA_FN_([A-Z]+)\s+(0x[0-9A-Fa-f]+|[0-9]+)\s*$`)
	errorRE  = regexp.MustCompile(`^E[A-Z]+$`)
)

// parse reads the constants of the header text.
func parse(src string) (*vocab, error) {
	v := &vocab{Version: -1}
	for i, line := range strings.Split(src, "\n") {
		m := defineRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		c := constant{Name: m[1], Comment: m[3]}
		raw := m[2]
		if strings.HasPrefix(raw, `"`) {
			s, err := strconv.Unquote(raw)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: SWAPAGENT_%s: bad string %s", headerPath, i+1, c.Name, raw)
			}
			c.Str = s
		} else {
			num := strings.TrimSuffix(strings.TrimSuffix(strings.Trim(raw, "()"), "u"), "U")
			n, err := strconv.ParseInt(num, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: SWAPAGENT_%s: bad number %s", headerPath, i+1, c.Name, raw)
			}
			c.Int = n
		}
		isStr := strings.HasPrefix(raw, `"`)
		family := func(prefix string, str bool) bool {
			if !strings.HasPrefix(c.Name, prefix) || isStr != str {
				return false
			}
			c.Suffix = strings.TrimPrefix(c.Name, prefix)
			return true
		}
		switch {
		case c.Name == "ABI_VERSION" && !isStr:
			v.Version = c.Int
		case (c.Name == "OK" || errorRE.MatchString(c.Name)) && !isStr:
			c.Suffix = c.Name
			v.Codes = append(v.Codes, c)
		case family("SAVE_", false):
			v.Flags = append(v.Flags, c)
		case family("STATE_", false):
			v.States = append(v.States, c)
		case family("KEEP_", false):
			v.Keep = append(v.Keep, c)
		case family("RELEASE_", false):
			v.Releases = append(v.Releases, c)
		case family("OWN_", false):
			v.Owns = append(v.Owns, c)
		case family("POLICY_", true):
			v.Policies = append(v.Policies, c)
		case family("MAX_", false):
			v.Limits = append(v.Limits, c)
		case family("CALL_", false):
			v.Calls = append(v.Calls, c)
		case family("OPT_", false):
			v.Opts = append(v.Opts, c)
		default:
			return nil, fmt.Errorf("%s:%d: SWAPAGENT_%s belongs to no family the generator knows: "+
				"teach internal/cmd/genabi its family", headerPath, i+1, c.Name)
		}
	}
	return v, v.validate()
}

// validate checks the numbering the generated code relies on.
func (v *vocab) validate() error {
	if v.Version < 1 {
		return errors.New("no SWAPAGENT_ABI_VERSION")
	}
	if len(v.Codes) < 2 || v.Codes[0].Name != "OK" || v.Codes[0].Int != 0 {
		return errors.New("the codes must start with SWAPAGENT_OK 0, then the SWAPAGENT_E* codes")
	}
	for i, c := range v.Codes[1:] {
		if c.Int != int64(-1-i) {
			return fmt.Errorf("SWAPAGENT_%s is %d: the error codes must be -1, -2, ... in order", c.Name, c.Int)
		}
	}
	for _, fam := range [][]constant{v.Flags, v.Opts, v.Owns} {
		seen := int64(0)
		for _, c := range fam {
			if c.Int <= 0 || c.Int&(c.Int-1) != 0 || seen&c.Int != 0 {
				return fmt.Errorf("SWAPAGENT_%s is %d: flags must be distinct bits", c.Name, c.Int)
			}
			seen |= c.Int
		}
	}
	if len(v.Calls) == 0 {
		return errors.New("no SWAPAGENT_CALL_* kinds")
	}
	for i, c := range v.Calls {
		if c.Int != int64(i+1) {
			return fmt.Errorf("SWAPAGENT_%s is %d: call kinds must be 1, 2, ... in order", c.Name, c.Int)
		}
	}
	for _, fam := range [][]constant{v.States, v.Keep, v.Releases} {
		if len(fam) == 0 {
			return errors.New("no states, keep reasons or release answers")
		}
		for i, c := range fam {
			if c.Int != int64(i) {
				return fmt.Errorf("SWAPAGENT_%s is %d: states, keep reasons and release answers must be 0, 1, ... in order",
					c.Name, c.Int)
			}
		}
	}
	if len(v.Policies) == 0 {
		return errors.New("no SWAPAGENT_POLICY_* names")
	}
	for _, c := range v.Limits {
		if c.Int <= 0 {
			return fmt.Errorf("SWAPAGENT_%s is %d: limits must be positive", c.Name, c.Int)
		}
	}
	names := map[string]bool{}
	for _, c := range v.Policies {
		if c.Str == "" || names[c.Str] {
			return fmt.Errorf("SWAPAGENT_%s: policy names must be distinct and not empty", c.Name)
		}
		names[c.Str] = true
	}
	return nil
}

// camel turns a macro suffix into a Go name part: OUTPUTS_ONLY -> OutputsOnly; a part with a digit
// stays as written (D2H).
func camel(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "_") {
		if p == "" {
			continue
		}
		if strings.ContainsAny(p, "0123456789") {
			b.WriteString(p)
			continue
		}
		b.WriteString(p[:1] + strings.ToLower(p[1:]))
	}
	return b.String()
}

// name is the lower-case name of a state or keep reason: its suffix (STATE_D2H gives d2h).
func name(c constant) string { return strings.ToLower(c.Suffix) }

func comment(c constant, lang string) string {
	lead := " // "
	if lang == "py" {
		lead = "  # "
	}
	s := lead + "SWAPAGENT_" + c.Name
	if c.Comment != "" {
		s += ": " + c.Comment
	}
	return s
}

const generatedLine = "Code generated by genabi from " + headerPath + "; DO NOT EDIT."

// goSource renders trace/abi_gen.go.
func goSource(v *vocab) ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("// %s\n\n", generatedLine)
	p("package trace\n\n")
	p("// ABIVersion is SWAPAGENT_ABI_VERSION, the version of the control ABI.\n")
	p("const ABIVersion = %d\n\n", v.Version)

	p("// Return codes of the control calls: SWAPAGENT_OK and the SWAPAGENT_E* codes, never renumbered.\n")
	p("const (\n")
	for _, c := range v.Codes {
		p("\tCode%s = %d%s\n", c.Suffix, c.Int, comment(c, "go"))
	}
	p(")\n\n")
	p("// NumErrorCodes is the number of SWAPAGENT_E* codes: they are -1 to -NumErrorCodes.\n")
	p("const NumErrorCodes = %d\n\n", len(v.Codes)-1)
	p("// ErrorCodeNames names the SWAPAGENT_E* codes as the header does, code c at index -c-1.\n")
	p("var ErrorCodeNames = [NumErrorCodes]string{\n")
	for _, c := range v.Codes[1:] {
		p("\t%q,\n", c.Suffix)
	}
	p("}\n\n")

	consts := func(doc, prefix string, cs []constant) {
		p("// %s\n", doc)
		p("const (\n")
		for _, c := range cs {
			p("\t%s%s = %d%s\n", prefix, camel(c.Suffix), c.Int, comment(c, "go"))
		}
		p(")\n\n")
	}
	consts("Flags of swapagent_save (SWAPAGENT_SAVE_*).", "Save", v.Flags)
	consts("The kinds of swapagent_call (SWAPAGENT_CALL_*), never renumbered.", "Call", v.Calls)
	p("// NumCalls is the number of call kinds: they are 1 to NumCalls.\n")
	p("const NumCalls = %d\n\n", len(v.Calls))
	p("// CallNames names the call kinds by value (index kind-1): the header's names in lower case.\n")
	p("var CallNames = [NumCalls]string{\n")
	for _, c := range v.Calls {
		p("\t%q,\n", name(c))
	}
	p("}\n\n")
	consts("Options of swapagent_call (SWAPAGENT_OPT_*).", "Opt", v.Opts)
	consts("The kinds of a layer's own holders, GUARD_RELEASE's counts[2] (SWAPAGENT_OWN_*).", "Own", v.Owns)
	p("// OwnNames names the kinds of own holders, each by its bit's place (lower case).\n")
	p("var OwnNames = [...]string{\n")
	for _, c := range v.Owns {
		p("\t%q,\n", strings.ReplaceAll(strings.ToLower(c.Suffix), "_", " "))
	}
	p("}\n\n")

	for _, fam := range []struct {
		consts                       []constant
		prefix, num, names, what, fn string
	}{
		{v.States, "State", "NumStates", "StateNames", "states", "swapagent_state (SWAPAGENT_STATE_*)"},
		{v.Keep, "Keep", "NumKeepReasons", "KeepReasonNames", "keep reasons",
			"swapagent_keep_reason (SWAPAGENT_KEEP_*)"},
		{v.Releases, "Release", "NumReleaseAnswers", "ReleaseAnswerNames", "answers",
			"SWAPAGENT_CALL_GUARD_RELEASE (SWAPAGENT_RELEASE_*)"},
	} {
		p("// The %s of %s.\n", fam.what, fam.fn)
		p("const (\n")
		for _, c := range fam.consts {
			p("\t%s%s = %d%s\n", fam.prefix, camel(c.Suffix), c.Int, comment(c, "go"))
		}
		p(")\n\n")
		p("// %s is the number of %s.\n", fam.num, fam.what)
		p("const %s = %d\n\n", fam.num, len(fam.consts))
		p("// %s names the %s by value: the header's names in lower case.\n", fam.names, fam.what)
		p("var %s = [%s]string{\n", fam.names, fam.num)
		for _, c := range fam.consts {
			p("\t%q,\n", name(c))
		}
		p("}\n\n")
	}

	p("// Policies: the values of SWAPAGENT_POLICY (SWAPAGENT_POLICY_*).\n")
	p("const (\n")
	for _, c := range v.Policies {
		p("\tPolicy%s = %q%s\n", camel(c.Suffix), c.Str, comment(c, "go"))
	}
	p(")\n\n")
	p("// Policies lists the policies in the header's order.\n")
	p("var Policies = [...]string{")
	for i, c := range v.Policies {
		if i > 0 {
			p(", ")
		}
		p("Policy%s", camel(c.Suffix))
	}
	p("}\n\n")
	consts("Limits of the calls' arguments (SWAPAGENT_MAX_*): beyond them a call is refused with CodeEINVAL.", "Max",
		v.Limits)
	p("// Pseudo function IDs of the shim's ring (%s, SA_FN_*), recorded as KindCall's function.\n", shimPath)
	p("const (\n")
	for _, c := range v.Fns {
		p("\tFn%s = %#x // SA_FN_%s\n", camel(c.Suffix), c.Int, c.Name)
	}
	p(")\n")
	return format.Source(b.Bytes())
}

// parseFns adds the SA_FN_* IDs of the shim's header to v.
func parseFns(v *vocab, src string) error {
	for _, line := range strings.Split(src, "\n") {
		m := fnRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n, err := strconv.ParseInt(m[2], 0, 64)
		if err != nil {
			return fmt.Errorf("%s: SA_FN_%s: %v", shimPath, m[1], err)
		}
		v.Fns = append(v.Fns, constant{Name: m[1], Suffix: m[1], Int: n})
	}
	if len(v.Fns) == 0 {
		return fmt.Errorf("%s: no SA_FN_* IDs", shimPath)
	}
	return nil
}

// pySource renders python/swapagent/_abi.py.
func pySource(v *vocab, tab *table) []byte {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# %s\n", generatedLine)
	p("\"\"\"The constants of the agent's C ABI (swapagent.h): return codes, save flags, states, keep reasons,\n")
	p("policies and the ABI version. swapagent.core imports them.\"\"\"\n\n")
	p("ABI_VERSION = %d\n\n", v.Version)
	p("# Return codes of the control calls (never renumbered).\n")
	for _, c := range v.Codes {
		p("%s = %d%s\n", c.Suffix, c.Int, comment(c, "py"))
	}
	p("ERROR_NAMES = {\n")
	for _, c := range v.Codes[1:] {
		p("    %s: %q,\n", c.Suffix, c.Suffix)
	}
	p("}\n\n")
	p("# Flags of swapagent_save.\n")
	for _, c := range v.Flags {
		p("SAVE_%s = %d%s\n", c.Suffix, c.Int, comment(c, "py"))
	}
	p("\n# Options of swapagent_call.\n")
	for _, c := range v.Opts {
		p("OPT_%s = %d%s\n", c.Suffix, c.Int, comment(c, "py"))
	}
	p("\n# The kinds of a layer's own holders (GUARD_RELEASE's counts[2], or'ed).\n")
	for _, c := range v.Owns {
		p("OWN_%s = %d%s\n", c.Suffix, c.Int, comment(c, "py"))
	}
	p("\n# struct swapagent_call's fields, in order, with their ctypes types (a pointer is an address).\n")
	p("CALL_FIELDS = (\n")
	for _, f := range v.Fields {
		p("    (%q, %q),\n", f.Name, f.CType)
	}
	p(")\n")
	for _, fam := range []struct {
		consts             []constant
		prefix, names, doc string
	}{
		{v.States, "STATE_", "STATES", "States of swapagent_state; STATES names them by value."},
		{v.Keep, "KEEP_", "KEEP_REASONS", "Keep reasons of swapagent_keep_reason; KEEP_REASONS names them by value."},
		{v.Releases, "RELEASE_", "RELEASE_ANSWERS",
			"Answers of SWAPAGENT_CALL_GUARD_RELEASE; RELEASE_ANSWERS names them by value."},
		{v.Calls, "CALL_", "CALL_NAMES", "The kinds of swapagent_call (never renumbered); CALL_NAMES names kind k at k-1."},
	} {
		p("\n# %s\n", fam.doc)
		for _, c := range fam.consts {
			p("%s%s = %d\n", fam.prefix, c.Suffix, c.Int)
		}
		p("%s = (", fam.names)
		for i, c := range fam.consts {
			if i > 0 {
				p(", ")
			}
			p("%q", name(c))
		}
		p(")\n")
	}
	p("\n# The kinds SWAPAGENT_OPT_QUEUE may queue (%s: SA_QUEUEABLE).\n", tablePath)
	p("CALL_QUEUEABLE = frozenset([")
	for i, r := range tab.queueable() {
		if i > 0 {
			p(", ")
		}
		p("CALL_%s", r.Name)
	}
	p("])\n")
	p("\n# Policies: the values of SWAPAGENT_POLICY.\n")
	for _, c := range v.Policies {
		p("POLICY_%s = %q\n", c.Suffix, c.Str)
	}
	p("POLICIES = (")
	for i, c := range v.Policies {
		if i > 0 {
			p(", ")
		}
		p("POLICY_%s", c.Suffix)
	}
	p(")\n")
	p("\n# Limits of the calls' arguments: beyond them a call is refused with EINVAL.\n")
	for _, c := range v.Limits {
		p("MAX_%s = %d%s\n", c.Suffix, c.Int, comment(c, "py"))
	}
	return b.Bytes()
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// generatedFile is one file genabi writes: its path from the module root and its contents.
type generatedFile struct {
	path string
	data []byte
}

// generate renders the generated files from the headers under root.
func generate(root string) ([]generatedFile, error) {
	raw, err := os.ReadFile(filepath.Join(root, headerPath))
	if err != nil {
		return nil, err
	}
	def, err := os.ReadFile(filepath.Join(root, tablePath))
	if err != nil {
		return nil, err
	}
	tab, err := parseTable(string(def))
	if err != nil {
		return nil, err
	}
	src, err := splice(string(raw), tab.header())
	if err != nil {
		return nil, err
	}
	v, err := parse(src)
	if err != nil {
		return nil, err
	}
	if err := parseFields(v, src); err != nil {
		return nil, err
	}
	if err := tab.check(v); err != nil {
		return nil, err
	}
	shim, err := os.ReadFile(filepath.Join(root, shimPath))
	if err != nil {
		return nil, err
	}
	if err := parseFns(v, string(shim)); err != nil {
		return nil, err
	}
	goSrc, err := goSource(v)
	if err != nil {
		return nil, err
	}
	calls, err := tab.dispatch()
	if err != nil {
		return nil, err
	}
	return []generatedFile{{headerPath, []byte(src)}, {goPath, goSrc}, {pyPath, pySource(v, tab)},
		{callsPath, calls}}, nil
}

func run(check bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	files, err := generate(root)
	if err != nil {
		return err
	}
	stale := 0
	for _, f := range files {
		full := filepath.Join(root, f.path)
		if check {
			if old, err := os.ReadFile(full); err != nil || !bytes.Equal(old, f.data) {
				fmt.Fprintf(os.Stderr, "genabi: %s is not current with %s and %s: run make generate\n", f.path,
					headerPath, tablePath)
				stale++
			}
			continue
		}
		if err := os.WriteFile(full, f.data, 0o644); err != nil {
			return err
		}
	}
	if stale > 0 {
		return fmt.Errorf("%d generated file(s) not current", stale)
	}
	return nil
}

func main() {
	check := flag.Bool("check", false, "compare the generated files with what the header gives instead of writing them")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "genabi:", err)
		os.Exit(1)
	}
}
