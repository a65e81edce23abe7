// Package buildinfo owns the version strings every part of swapagent reports: the agent in its trace
// metadata and logs, and the CLI's `version` command.
package buildinfo

import "runtime/debug"

// Version is the swapagent release. The Makefile stamps every build with pyproject.toml's version
// (-ldflags "-X swapagent/internal/buildinfo.Version=..."), so the agent, the CLI and the companions'
// wheel agree; "-dev" marks a binary built by plain `go build` or `go test`.
var Version = "0.1.0-dev"

// ABIVersion is the control ABI version of swapagent.h (SWAPAGENT_ABI_VERSION).
const ABIVersion = 1

// VCS returns the revision and whether the tree was modified, from the Go build info ("" when unknown).
func VCS() (revision string, modified bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return revision, modified
}
