package trace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestOpen: a regular file and an anonymous pipe open; a FIFO (no writer: opening it the usual way would
// wait for one), a device and a directory are refused with one line naming the path once.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "r.swtrace")
	if err := os.WriteFile(reg, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "f.swtrace")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if _, err := pw.Write([]byte("piped")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	for _, c := range []struct {
		path, want string // want: the error, "" to read the content
		content    string
	}{
		{reg, "", "abc"},
		{"/proc/self/fd/" + strconv.Itoa(int(pr.Fd())), "", "piped"},
		{fifo, fifo + ": a named pipe (FIFO), not a regular file", ""},
		{"/dev/null", "/dev/null: a character device, not a regular file", ""},
		{dir, dir + ": is a directory", ""},
	} {
		f, err := Open(c.path)
		if c.want != "" {
			if err == nil || err.Error() != c.want || (c.path != dir) != errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want %q", c.path, err, c.want)
			}
			if f != nil {
				f.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != c.content {
			t.Errorf("%s: read %q, %v; want %q", c.path, b, err, c.content)
		}
	}
}
