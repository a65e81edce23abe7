package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode 中文":  "plain text, ünïcode 中文",
		"\x1b[31mred\x1b[0m":      `\x1b[31mred\x1b[0m`,
		"a\nb\tc\rd":              `a\nb\tc\rd`,
		"del\x7f c1\u0085 bell\a": `del\x7f c1\x85 bell\x07`,
		"bidi \u202eevil\u202c":   `bidi \u202eevil\u202c`,
		"bad utf8 \xff\xfe end":   `bad utf8 \xff\xfe end`,
		"":                        "",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTerminal: lines keep their newlines, everything else is escaped, and a rune split across two
// writes survives.
func TestTerminal(t *testing.T) {
	var b bytes.Buffer
	w := Terminal(&b)
	in := "ok 中\x1b]0;title\x07\nnext\r line\n"
	for i := 0; i < len(in); i += 4 { // 4-byte writes cut "中" and the escape sequence
		if _, err := w.Write([]byte(in[i:min(i+4, len(in))])); err != nil {
			t.Fatal(err)
		}
	}
	want := "ok 中\\x1b]0;title\\x07\nnext\\r line\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestUsageError(t *testing.T) {
	c := Command{Name: "report", Synopsis: "TRACE [--format F]", About: "Summarise traces."}
	fs := c.Flags()
	fs.String("format", "text", "output `F`")
	var out, errb bytes.Buffer
	code, stop := c.Parse(fs, []string{"--frob\x1b"}, &out, &errb)
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	if code != ExitUsage || !stop || out.Len() != 0 || len(lines) != 3 ||
		lines[0] != `swapagent report: unknown flag: --frob\x1b` || lines[1] != "Usage: swapagent report TRACE [--format F]" {
		t.Errorf("exit %d stop %v stdout %q stderr %q", code, stop, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code, stop = c.Parse(c.Flags(), []string{"--help"}, &out, &errb)
	if code != 0 || !stop || errb.Len() != 0 || strings.Count(out.String(), "Usage:") != 1 ||
		!strings.Contains(out.String(), "Summarise traces.") {
		t.Errorf("--help: exit %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}
