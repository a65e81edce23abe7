#!/usr/bin/env bash
# Installs the Go tools the checks of make test use into build/tools (never into GOPATH/bin), at pinned
# versions, from the Go module proxy: golangci-lint. make lint calls it when the tool is missing or older
# than this script (not bootstrap: `make demo` never waits for a linter build); a tool already at its
# version is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
GOLANGCI_LINT_VERSION=2.15.0
tools=$PWD/build/tools
mkdir -p "$tools"
if ! "$tools/golangci-lint" version 2>/dev/null | grep -q "version $GOLANGCI_LINT_VERSION "; then
  echo "tools: installing golangci-lint v$GOLANGCI_LINT_VERSION into build/tools (built once; a few minutes)"
  # Outside this module: -mod (from the Makefile's GOFLAGS) does not apply to pkg@version.
  GOFLAGS= GOBIN="$tools" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$GOLANGCI_LINT_VERSION"
fi
