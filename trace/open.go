// open.go owns how a reader opens a file it reads (every command's traces, doctor's logs): a regular
// file, or an anonymous pipe (standard input, or the /dev/fd/N that process substitution gives). A named
// pipe (FIFO), a socket or a device is refused at once with one line: opening a FIFO waits for a writer
// and reading it waits for data, so a FIFO named *.swtrace would hang a reader until it was killed.
package trace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular matches the error of Open for a path that is neither a regular file nor an anonymous pipe.
var ErrNotRegular = errors.New("not a regular file")

// Open opens path for reading by the rule above. It never blocks: the file is opened non-blocking (a FIFO
// swapped in after the check opens at once and is refused), then made blocking again for the reader. The
// error names path once; for a refused file it matches ErrNotRegular ("is a directory" for a directory).
func Open(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, PathError(path, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s: is a directory", path)
	}
	if why := notReadable(fi, func(st *unix.Statfs_t) error { return unix.Statfs(path, st) }); why != "" {
		return nil, fmt.Errorf("%s: %s, %w", path, why, ErrNotRegular)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, PathError(path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	// What was opened, not what was stat'ed: the name may have been replaced in between.
	if fi, err = f.Stat(); err == nil {
		if why := notReadable(fi, func(st *unix.Statfs_t) error { return unix.Fstatfs(fd, st) }); why != "" {
			f.Close()
			return nil, fmt.Errorf("%s: %s, %w", path, why, ErrNotRegular)
		}
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		f.Close()
		return nil, PathError(path, err)
	}
	return f, nil
}

// notReadable says what the file is when a reader must not read it ("" when it may): a named pipe, a
// socket, a device (or a directory). statfs tells an anonymous pipe (on pipefs) from a named one.
func notReadable(fi fs.FileInfo, statfs func(*unix.Statfs_t) error) string {
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "a directory" // swapped in after Open's check
	case m&fs.ModeNamedPipe != 0:
		var st unix.Statfs_t
		if statfs(&st) == nil && st.Type == unix.PIPEFS_MAGIC {
			return "" // standard input or process substitution: a stream with a writer at its other end
		}
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}
