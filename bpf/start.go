// start.go owns starting a command held at the door: its process exists (so its pid can be given to
// the probes) but runs none of its own code until the probes are attached.
package bpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// StartPaused starts cmd behind a /bin/sh gate that waits on a pipe and then execs cmd in place
// (same pid). It returns resume, which lets cmd run; if resume is never called, kill cmd.Process.
func StartPaused(cmd *exec.Cmd) (resume func() error, err error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	if cmd.Path == "" || len(cmd.Args) == 0 {
		return nil, errors.New("start: no command")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	// A closed pipe without the byte means the caller gave up: exit instead of running unprobed.
	script := fmt.Sprintf(`read -r _ <&%d || exit 125; exec %d<&-; exec "$0" "$@"`, fd, fd)
	cmd.Args = append([]string{"sh", "-c", script, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Args[3], err)
	}
	return func() error {
		_, err := w.Write([]byte("\n"))
		w.Close()
		return err
	}, nil
}
