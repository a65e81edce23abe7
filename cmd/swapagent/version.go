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

var versionCmd = cli.Command{Name: "version", About: `Prints the release, the control ABI version the agent library speaks (swapagent.h's
SWAPAGENT_ABI_VERSION), the Go toolchain, the platform the binary is for and the VCS revision it was built
from ("unknown" without a VCS stamp). swapagent --version is the same.

Exit: 0; 2 bad usage.`}

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
