// table.go reads shim/c/calls.def, the table of control calls, and writes what the header and the agent
// take from it: swapagent.h's SWAPAGENT_CALL_* block and the agent's dispatch (agent/calls_gen.go).
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"regexp"
	"strconv"
	"strings"
)

// part is one SA_PART row: a part of struct swapagent_call a call's copy carries.
type part struct{ Name, Field, Count, How string }

// call is one SA_CTL row.
type call struct {
	Name         string // REGION_ENTER
	Num          int64
	Group, Queue string   // SA_GROUP..., SA_NOW...
	Parts        []string // the SA_P(...) it reads or writes
	Doc          []string // the comment lines right above the row, as written
	Comment      string   // the comment after the row ("/* group, ptrs, ... */"), as written
}

// table is calls.def's rows, in order.
type table struct {
	Parts []part
	Calls []call
}

var (
	groupRules = map[string]bool{"SA_NO_GROUP": true, "SA_GROUP": true, "SA_GROUP_OR_NULL": true}
	queueRules = map[string]bool{"SA_NOW": true, "SA_QUEUEABLE": true, "SA_LIBRARY": true}
	partHows   = map[string]bool{"SA_IN": true, "SA_IN_OR_NULL": true, "SA_OUT": true}
	partRE     = regexp.MustCompile(`^SA_P\(([A-Z_]+)\)$`)
	nameRE     = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

// rowArgs splits a row's text from its opening parenthesis to its matching one: the arguments, and what
// follows the row on its last line. ok is false while the row is not closed yet.
func rowArgs(text string) (args []string, rest string, ok bool) {
	open := strings.IndexByte(text, '(')
	depth, start := 0, open+1
	for i := open; i < len(text); i++ {
		switch text[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return append(args, strings.TrimSpace(text[start:i])), strings.TrimSpace(text[i+1:]), true
			}
		case ',':
			if depth == 1 {
				args = append(args, strings.TrimSpace(text[start:i]))
				start = i + 1
			}
		}
	}
	return nil, "", false
}

// parseTable reads calls.def's text.
func parseTable(src string) (*table, error) {
	t := &table{}
	var doc []string // the comment lines since the last line that was neither comment nor row
	inComment := false
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trim := strings.TrimSpace(line)
		switch {
		case inComment || strings.HasPrefix(trim, "/*"):
			doc = append(doc, line)
			inComment = !strings.Contains(trim, "*/")
			continue
		case strings.HasPrefix(trim, "SA_PART("), strings.HasPrefix(trim, "SA_CTL("):
		default:
			doc = nil
			continue
		}
		at := i + 1
		text := trim
		args, rest, ok := rowArgs(text)
		for ; !ok && i+1 < len(lines); i++ {
			text += " " + strings.TrimSpace(lines[i+1])
			args, rest, ok = rowArgs(text)
		}
		if !ok {
			return nil, fmt.Errorf("%s:%d: the row is not closed", tablePath, at)
		}
		if rest != "" && !(strings.HasPrefix(rest, "/*") && strings.HasSuffix(rest, "*/")) {
			return nil, fmt.Errorf("%s:%d: after the row: %q (only a comment may follow it)", tablePath, at, rest)
		}
		if strings.HasPrefix(trim, "SA_PART(") {
			if len(args) != 5 || !nameRE.MatchString(args[0]) || !partHows[args[4]] {
				return nil, fmt.Errorf("%s:%d: SA_PART(NAME, field, count, size, how) with how SA_IN, SA_IN_OR_NULL "+
					"or SA_OUT", tablePath, at)
			}
			t.Parts = append(t.Parts, part{args[0], args[1], args[2], args[4]})
		} else {
			c, err := t.callRow(args, rest)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", tablePath, at, err)
			}
			c.Doc = doc
			t.Calls = append(t.Calls, c)
		}
		doc = nil
	}
	return t, t.validate()
}

// callRow reads an SA_CTL row's arguments.
func (t *table) callRow(args []string, comment string) (call, error) {
	if len(args) != 5 {
		return call{}, fmt.Errorf("SA_CTL(NAME, number, group, queue, parts) takes 5 arguments, not %d", len(args))
	}
	c := call{Name: args[0], Group: args[2], Queue: args[3], Comment: comment}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || !nameRE.MatchString(c.Name) {
		return c, fmt.Errorf("SA_CTL(%s, %s, ...): a NAME and a decimal number", args[0], args[1])
	}
	c.Num = n
	if !groupRules[c.Group] || !queueRules[c.Queue] {
		return c, fmt.Errorf("%s: group %s or queue %s is not one calls.def names", c.Name, c.Group, c.Queue)
	}
	if args[4] != "0" {
		for _, p := range strings.Split(args[4], "|") {
			m := partRE.FindStringSubmatch(strings.TrimSpace(p))
			if m == nil {
				return c, fmt.Errorf("%s: parts: %q is not SA_P(NAME)", c.Name, strings.TrimSpace(p))
			}
			c.Parts = append(c.Parts, m[1])
		}
	}
	return c, nil
}

// validate checks what the C side and the generated code assume: kinds numbered 1, 2, ... in order, names
// once, parts that exist, one kind the library answers at most.
func (t *table) validate() error {
	if len(t.Calls) == 0 || len(t.Parts) == 0 {
		return fmt.Errorf("%s: no SA_CTL or SA_PART rows", tablePath)
	}
	parts, names := map[string]bool{}, map[string]bool{}
	for _, p := range t.Parts {
		if parts[p.Name] {
			return fmt.Errorf("%s: part %s twice", tablePath, p.Name)
		}
		parts[p.Name] = true
	}
	if len(t.Parts) > 16 {
		return fmt.Errorf("%s: %d parts: calls.c keeps a kind's parts in 16 bits", tablePath, len(t.Parts))
	}
	for i, c := range t.Calls {
		if c.Num != int64(i+1) {
			return fmt.Errorf("%s: %s is %d: kinds are 1, 2, ... in order, appended, never renumbered", tablePath,
				c.Name, c.Num)
		}
		if names[c.Name] {
			return fmt.Errorf("%s: %s twice", tablePath, c.Name)
		}
		names[c.Name] = true
		for _, p := range c.Parts {
			if !parts[p] {
				return fmt.Errorf("%s: %s reads part %s, which no SA_PART row defines", tablePath, c.Name, p)
			}
		}
		if c.Queue == "SA_LIBRARY" && c.Name != "QUEUEING" {
			return fmt.Errorf("%s: %s: only QUEUEING is answered by the library (calls.c)", tablePath, c.Name)
		}
	}
	return nil
}

// check holds the table against the header's record: every part is fields of struct swapagent_call.
func (t *table) check(v *vocab) error {
	fields := map[string]bool{}
	for _, f := range v.Fields {
		fields[f.Name] = true
	}
	for _, p := range t.Parts {
		if !fields[p.Field] || !fields[p.Count] {
			return fmt.Errorf("%s: part %s: %s or %s is no field of struct swapagent_call", tablePath, p.Name, p.Field,
				p.Count)
		}
	}
	return nil
}

// queueable is the rows SWAPAGENT_OPT_QUEUE may queue.
func (t *table) queueable() []call {
	var out []call
	for _, c := range t.Calls {
		if c.Queue == "SA_QUEUEABLE" {
			out = append(out, c)
		}
	}
	return out
}

// The marks of the header's block that genabi writes: each on a line of its own.
const (
	blockBegin = "/* ---- The call kinds, written by genabi from shim/c/calls.def (make generate): edit the table. ---- */"
	blockEnd   = "/* ---- End of the lines from shim/c/calls.def. ---- */"
)

// header renders swapagent.h's block: each row's comments, its #define and the comment after it, then the
// kinds that may be queued.
func (t *table) header() string {
	var b strings.Builder
	width := 0
	for _, c := range t.Calls {
		width = max(width, len(fmt.Sprintf("#define SWAPAGENT_CALL_%s %d", c.Name, c.Num)))
	}
	b.WriteString(blockBegin + "\n")
	for _, c := range t.Calls {
		for _, d := range c.Doc {
			b.WriteString(d + "\n")
		}
		def := fmt.Sprintf("#define SWAPAGENT_CALL_%s %d", c.Name, c.Num)
		if c.Comment != "" {
			def += strings.Repeat(" ", width-len(def)+1) + c.Comment
		}
		b.WriteString(def + "\n")
	}
	var q []string
	for _, c := range t.queueable() {
		q = append(q, c.Name)
	}
	fmt.Fprintf(&b, "/* The kinds SWAPAGENT_OPT_QUEUE may queue (\"Queued calls\" below):\n * %s. */\n", strings.Join(q, ", "))
	b.WriteString(blockEnd + "\n")
	return b.String()
}

// splice puts block in place of the header's block (its marks included).
func splice(header, block string) (string, error) {
	begin := strings.Index(header, blockBegin+"\n")
	end := strings.Index(header, blockEnd+"\n")
	if begin < 0 || end < begin {
		return "", fmt.Errorf("%s: no block between the lines %q and %q (where genabi writes the call kinds)",
			headerPath, blockBegin, blockEnd)
	}
	return header[:begin] + block + header[end+len(blockEnd)+1:], nil
}

// goName is a kind's handler's name: callCamelName.
func (c call) goName() string { return "call" + camel(c.Name) }

// dispatch renders agent/calls_gen.go.
func (t *table) dispatch() ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("// Code generated by genabi from %s; DO NOT EDIT.\n\n", tablePath)
	p("package agent\n\n")
	p("import \"swapagent/trace\"\n\n")
	p("// dispatch runs c by its kind's handler (%s: kind NAME runs callCamelName, agent/calls.go);\n", tablePath)
	p("// a kind no row gives the agent is refused.\n")
	p("func (a *Agent) dispatch(o origin, c *Call) int64 {\n")
	p("\tswitch c.Kind {\n")
	for _, c := range t.Calls {
		if c.Queue == "SA_LIBRARY" {
			continue
		}
		p("\tcase trace.Call%s:\n\t\treturn a.%s(o, c)\n", camel(c.Name), c.goName())
	}
	p("\t}\n")
	p("\treturn int64(a.Invalid(CallName(c.Kind), \"unknown kind\"))\n")
	p("}\n")
	return format.Source(b.Bytes())
}
