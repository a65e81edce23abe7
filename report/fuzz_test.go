// fuzz_test.go: whatever bytes a trace file holds, loading and every renderer end in a result or a
// one-line error, never a panic.
package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzLoadAndRender(f *testing.F) {
	dir := f.TempDir()
	good := writeTrace(f, dir, "seed.swtrace", header(), workload(), 10)
	if b, err := os.ReadFile(good); err == nil {
		f.Add(b)
		f.Add(b[:len(b)-3])
	}
	f.Add([]byte("SWTRACE\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.swtrace")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadFile(p, &Keep{Calls: MaxPerfettoEvents})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		var buf bytes.Buffer
		for _, w := range []func(*bytes.Buffer, []*Summary) error{
			func(b *bytes.Buffer, s []*Summary) error { return WriteText(b, s) },
			func(b *bytes.Buffer, s []*Summary) error { return WriteJSON(b, s) },
			func(b *bytes.Buffer, s []*Summary) error { return WritePerfetto(b, s) },
			func(b *bytes.Buffer, s []*Summary) error { return WriteSVG(b, s) },
		} {
			buf.Reset()
			if err := w(&buf, []*Summary{s}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
