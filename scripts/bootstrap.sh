#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test swapagent, and only that.
# As root it runs apt-get; otherwise it prints the exact line to run. Go (>= 1.26) must be on PATH.
set -euo pipefail

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have gcc || need_pkgs+=(gcc)
have g++ || need_pkgs+=(g++) # the probe tests build a small C++ library
have make || need_pkgs+=(make)
[ -e /usr/include/stdio.h ] || need_pkgs+=(libc6-dev)
have git || need_pkgs+=(git)
# Extra packages a component needs are listed in scripts/apt-packages.txt (one per line; "optional" after
# the name: installed as root, else only named, e.g. the arm64 cross tools of make test-arm64).
opt_pkgs=()
if [ -f scripts/apt-packages.txt ]; then
  while read -r p flag _; do
    [ -z "$p" ] || [[ "$p" == \#* ]] && continue
    dpkg -s "$p" >/dev/null 2>&1 && continue
    if [ "${flag:-}" = optional ]; then opt_pkgs+=("$p"); else need_pkgs+=("$p"); fi
  done < scripts/apt-packages.txt
fi
if [ ${#opt_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    need_pkgs+=("${opt_pkgs[@]}")
  else
    echo "bootstrap: optional packages missing (make test-arm64 and make dist skip or fail without them);" \
      "as root: apt-get install -y --no-install-recommends ${opt_pkgs[*]}" >&2
  fi
fi

if [ ${#need_pkgs[@]} -gt 0 ]; then
  line="apt-get update && apt-get install -y --no-install-recommends ${need_pkgs[*]}"
  if [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  else
    echo "bootstrap: missing packages; run as root: $line" >&2
    exit 1
  fi
fi

if ! have go; then
  echo "bootstrap: Go >= 1.26 is required on PATH (https://go.dev/doc/install)" >&2
  exit 1
fi
gov=$(go env GOVERSION | sed 's/^go//')
case "$gov" in
  1.2[6-9]*|1.[3-9]*|[2-9].*) ;;
  *) echo "bootstrap: Go $gov is too old; swapagent needs Go >= 1.26" >&2; exit 1 ;;
esac
go mod download
