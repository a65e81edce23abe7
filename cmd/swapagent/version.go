// version.go owns `swapagent version`: the release, the control ABI it speaks and how it was built.
package main

import (
	"fmt"
	"runtime"

	"swapagent/internal/buildinfo"
)

func cmdVersion(args []string) int {
	fs := newFlags("version")
	if code, stop := parseFlags(fs, args, ""); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError("version", "unexpected argument %q", fs.Arg(0))
	}
	fmt.Printf("swapagent %s\n", buildinfo.Version)
	fmt.Printf("control ABI: %d\n", buildinfo.ABIVersion)
	fmt.Printf("go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
