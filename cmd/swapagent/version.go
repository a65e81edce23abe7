// version.go owns `swapagent version`: the release, the control ABI it speaks and how it was built (Go
// version, target platform, commit: the VCS revision).
package main

import (
	"fmt"
	"os"
	"runtime"

	"swapagent/internal/buildinfo"
	"swapagent/internal/cli"
)

var versionCmd = cli.Command{Name: "version"}

func cmdVersion(args []string) int {
	c := versionCmd
	fs := c.Flags()
	if code, stop := c.Parse(fs, args, os.Stdout, os.Stderr); stop {
		return code
	}
	if fs.NArg() > 0 {
		return c.UsageError(os.Stderr, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Printf("swapagent %s\n", buildinfo.Version)
	fmt.Printf("control ABI: %d\n", buildinfo.ABIVersion)
	fmt.Printf("go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("target: %s/%s\n", runtime.GOOS, runtime.GOARCH) // the platform this binary (and its archive) is for
	rev, modified := buildinfo.VCS()
	switch {
	case rev == "":
		fmt.Printf("revision: unknown (built without VCS stamping)\n")
	case modified:
		fmt.Printf("revision: %s (modified)\n", rev)
	default:
		fmt.Printf("revision: %s\n", rev)
	}
	return exitOK
}
