// output.go owns the agent's files: the output directory (created 0700 when missing), the per-process
// trace and log names of the team brief, and opening them without following a link (O_CREAT|O_EXCL|
// O_NOFOLLOW, mode 0600).
package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"swapagent/trace"
)

// BaseName returns the per-process file name without its suffix: <host>.<pid> or <host>.rank<R>.<pid>.
func BaseName(host string, pid int, rank int, rankSet bool) string {
	if rankSet {
		return fmt.Sprintf("%s.rank%d.%d", host, rank, pid)
	}
	return fmt.Sprintf("%s.%d", host, pid)
}

// openOutputs creates dir if needed and opens a fresh trace file and log file in it. When a file of
// that name exists already (a reused pid), a counter is added before the suffix.
func openOutputs(dir, base string) (tr, lg *os.File, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	for i := 0; i < 100; i++ {
		name := base
		if i > 0 {
			name = base + "." + strconv.Itoa(i)
		}
		tr, err = createExcl(filepath.Join(dir, name+trace.FileSuffix))
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		lg, err = createExcl(filepath.Join(dir, name+".log"))
		if err != nil {
			lg = nil // the trace matters more than the log file
		}
		return tr, lg, nil
	}
	return nil, nil, fmt.Errorf("%s: too many files named %s.*", dir, base)
}

func createExcl(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
}

// segmentFiles makes and deletes the segments after the first of the trace at first, by the same rules
// as the first (trace/segment.go names them).
type segmentFiles struct{ first string }

func (sf segmentFiles) Create(k int) (io.WriteCloser, error) {
	return createExcl(trace.SegmentPath(sf.first, k))
}

func (sf segmentFiles) Remove(k int) error { return os.Remove(trace.SegmentPath(sf.first, k)) }
