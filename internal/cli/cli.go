// Package cli holds the conventions every swapagent command follows, as Go's own tools and pprof do:
// a flag or usage error is one line and the usage on stderr with exit 2; --help prints the usage once,
// on stdout, with exit 0; text that came from outside (argv, log lines, paths, names in a trace) is
// escaped before it reaches a terminal. cmd/swapagent, replay and doctor all parse through here.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"
)

// ExitUsage is the exit code of bad usage in every command.
const ExitUsage = 2

// Command is one subcommand's name and how it is called.
type Command struct {
	Name     string // "report"
	Synopsis string // what follows the name in a usage line
	About    string // printed under the usage line by --help; may be empty
}

// Flags makes the command's flag set: pflag prints nothing itself, errors come back to Parse.
func (c Command) Flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.Name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// Parse parses args. It returns (code, true) when the command must stop: --help printed the usage on
// stdout (0), or a flag error was reported on stderr (2).
func (c Command) Parse(fs *pflag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, pflag.ErrHelp):
		c.Help(stdout, fs)
		return 0, true
	}
	return c.UsageError(stderr, "%v", err), true
}

// Help writes the full usage: the usage line, About and the flags.
func (c Command) Help(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n", c.line())
	if c.About != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.About, "\n"))
	}
	if fs != nil && fs.HasFlags() {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

func (c Command) line() string {
	return strings.TrimSpace("swapagent " + c.Name + " " + c.Synopsis)
}

// UsageError reports bad usage: one line naming the problem, then the usage line and where the flags are
// described, all on stderr. It returns ExitUsage.
func (c Command) UsageError(stderr io.Writer, format string, a ...any) int {
	c.Errorf(stderr, format, a...)
	fmt.Fprintf(stderr, "Usage: %s\nRun 'swapagent help %s' for the flags.\n", c.line(), c.Name)
	return ExitUsage
}

// Errorf writes one line "swapagent NAME: message" on stderr, escaped.
func (c Command) Errorf(stderr io.Writer, format string, a ...any) {
	fmt.Fprintf(stderr, "swapagent %s: %s\n", c.Name, Escape(fmt.Sprintf(format, a...)))
}

// Escape makes s safe to print on one line of a terminal: control characters (C0, DEL, C1), the
// Unicode bidirectional overrides and invalid UTF-8 become Go escapes (\n, \t, \x1b, \u202e); everything
// else, printable Unicode included, is kept as is.
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional overrides reorder what a terminal shows
	}
	return false
}

func escapeRune(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case '\r':
		return `\r`
	}
	if r < 0x100 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// Terminal wraps w so that everything written through it is escaped as Escape does, except the
// newlines that end lines. Renderers of text for people write through it, so no byte from a trace or a
// log reaches a terminal unescaped, whatever field it came in.
func Terminal(w io.Writer) io.Writer { return &terminal{w: w} }

type terminal struct {
	w    io.Writer
	tail []byte // an incomplete UTF-8 sequence left by the previous Write
	err  error  // the first write that failed: renderers print with fmt and do not look at each error
}

// WriteErr is the first error a Terminal's writes met (nil for another writer): a command checks it once
// its text is written, so a full disk or a closed pipe is not an exit 0 with the output lost.
func WriteErr(w io.Writer) error {
	if t, ok := w.(*terminal); ok {
		return t.err
	}
	return nil
}

func (t *terminal) Write(p []byte) (int, error) {
	buf := append(t.tail, p...)
	t.tail = nil
	// Keep a rune cut by the end of this write for the next one.
	if cut := incompleteTail(buf); cut > 0 {
		t.tail = append([]byte(nil), buf[len(buf)-cut:]...)
		buf = buf[:len(buf)-cut]
	}
	var out strings.Builder
	for len(buf) > 0 {
		line, rest, nl := strings.Cut(string(buf), "\n")
		out.WriteString(Escape(line))
		if nl {
			out.WriteByte('\n')
		}
		buf = []byte(rest)
	}
	if _, err := io.WriteString(t.w, out.String()); err != nil {
		if t.err == nil {
			t.err = err
		}
		return 0, err
	}
	return len(p), nil
}

// incompleteTail is the length of a UTF-8 sequence cut short at the end of b (0 if none).
func incompleteTail(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if c >= 0xc0 { // a lead byte: is its sequence complete?
			need := 2
			switch {
			case c >= 0xf0:
				need = 4
			case c >= 0xe0:
				need = 3
			}
			if need > n {
				return n
			}
			return 0
		}
	}
	return 0
}

// Switch defines a flag that is on when given (--exec) and off otherwise. Its help line shows the flag
// alone, as a placeholder shows a value elsewhere (pflag's own bool flags print "[=true|false]").
func Switch(fs *pflag.FlagSet, name, usage string) *bool {
	b := new(bool)
	fs.Var((*switchValue)(b), name, usage)
	fs.Lookup(name).NoOptDefVal = "true"
	return b
}

type switchValue bool

func (s *switchValue) String() string { return strconv.FormatBool(bool(*s)) }

func (s *switchValue) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	*s = switchValue(b)
	return nil
}

// Type is pflag's name for a flag of no value in help.
func (s *switchValue) Type() string { return "boolfunc" }

// IsBoolFlag lets the flag be given without a value.
func (s *switchValue) IsBoolFlag() bool { return true }
