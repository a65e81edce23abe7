// Command tracebytes is the trace half of `make bench-shim`: it runs decoder-sim under the preloaded
// agent and prints the mean bytes per event of the trace it wrote. Usage: tracebytes LIB DECODER-SIM.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"swapagent/trace"
)

func main() { os.Exit(run()) }

// run is the command; main exits with its status once its deferred removal of the temporary directory ran.
func run() int {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: tracebytes LIBSWAPAGENT DECODER-SIM")
		return 2
	}
	dir, err := os.MkdirTemp("", "tracebytes")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracebytes:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(os.Args[2], "--steps", "2")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWAPAGENT_") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "LD_PRELOAD="+os.Args[1], "SWAPAGENT_OUT="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "tracebytes: decoder-sim: %v\n%s", err, out)
		return 1
	}
	files, err := trace.FindTraces(dir)
	if err != nil || len(files) != 1 {
		fmt.Fprintf(os.Stderr, "tracebytes: want one trace, got %v (%v)\n", files, err)
		return 1
	}
	_, evs, err := trace.ReadFile(files[0])
	st, serr := os.Stat(files[0])
	if err != nil || serr != nil || len(evs) == 0 {
		fmt.Fprintf(os.Stderr, "tracebytes: reading %s: %v %v\n", files[0], err, serr)
		return 1
	}
	calls := 0
	for i := range evs {
		if evs[i].Kind == trace.KindCall {
			calls++
		}
	}
	fmt.Printf("trace: %.2f bytes per event (%d events, %d of them calls, %d bytes; decoder-sim --steps 2)\n",
		float64(st.Size())/float64(len(evs)), len(evs), calls, st.Size())
	return 0
}
