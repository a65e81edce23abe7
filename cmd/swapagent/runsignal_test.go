package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"swapagent/internal/testenv"
)

// TestRunKeepsIgnoredSignals: a signal the shell left ignored stays ignored under `swapagent run`, for
// run and for the job. Each case runs the same job with and without swapagent in front of it, sends the
// signal to both the launched process (swapagent, or the job itself) and the job, and compares the exit
// statuses the shell's wait reports.
func TestRunKeepsIgnoredSignals(t *testing.T) {
	lib := agentLib(t)
	cli := testenv.Path(t, testenv.CLI)
	// The job writes its pid once it runs, then waits for the go file and exits 0: a signal that is not
	// ignored ends it with 128+N.
	job := `echo $$ > "$D/ready.tmp" && mv "$D/ready.tmp" "$D/ready"; while [ ! -e "$D/go" ]; do sleep 0.02; done; exit 0`
	// The harness: start "$@" in the background the case's way, wait for the job, signal the launched
	// process and the job, let a signal sent on arrive, release the job, and exit with wait's status.
	harness := func(launch, sig string) string {
		return launch + ` & pid=$!
while [ ! -e "$D/ready" ]; do sleep 0.02; done
kill -` + sig + ` $pid $(cat "$D/ready")
sleep 0.3
touch "$D/go"
wait $pid`
	}
	cases := []struct{ name, launch, sig string }{
		{"nohup and SIGHUP", `nohup "$@" >/dev/null 2>&1`, "HUP"},
		{"background job of sh -c and SIGINT", `"$@"`, "INT"},
		{"background job of sh -c and SIGQUIT", `"$@"`, "QUIT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status := func(with bool) int {
				d := t.TempDir()
				argv := []string{"-c", harness(c.launch, c.sig), "harness"}
				if with {
					argv = append(argv, cli, "run", "--lib", lib, "--out", filepath.Join(d, "out"), "--")
				}
				argv = append(argv, "sh", "-c", job)
				r := testenv.Run(t, 30*time.Second, append(testenv.CleanEnv(), "D="+d), "sh", argv...)
				if _, err := os.Stat(filepath.Join(d, "ready")); err != nil {
					t.Fatalf("the job never ran: exit %d, stderr %q", r.Code, r.Stderr)
				}
				return r.Code
			}
			without, with := status(false), status(true)
			t.Logf("exit without swapagent %d, with %d", without, with)
			if with != without {
				t.Errorf("SIG%s: exit %d under swapagent run, %d without it", c.sig, with, without)
			}
		})
	}
}

// TestRunForwardsSignals: a signal run did not inherit ignored still reaches the job, once: SIGTERM sent
// to swapagent ends the job with 128+15, as it would end the job itself.
func TestRunForwardsSignals(t *testing.T) {
	lib := agentLib(t)
	d := t.TempDir()
	script := `"$@" & pid=$!
while [ ! -e "$D/ready" ]; do sleep 0.02; done
kill -TERM $pid
wait $pid`
	job := `echo $$ > "$D/ready.tmp" && mv "$D/ready.tmp" "$D/ready"; while :; do sleep 0.02; done`
	r := testenv.Run(t, 30*time.Second, append(testenv.CleanEnv(), "D="+d), "sh", "-c", script, "harness",
		testenv.Path(t, testenv.CLI), "run", "--lib", lib, "--out", filepath.Join(d, "out"), "--", "sh", "-c", job)
	if r.Code != 128+15 {
		t.Errorf("exit %d, want %d; stderr %q", r.Code, 128+15, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(d, "ready")); err != nil {
		t.Errorf("the job never ran: %v", err)
	}
}
