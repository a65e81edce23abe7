#!/usr/bin/env bash
# dist.sh owns the release files of `make dist` (scripts/dist.mk), in build/dist:
#   dist.sh archive BUILD ARCH VERSION  packs BUILD's bin/swapagent, lib/libswapagent.so and
#       include/swapagent.h, the Python package python/swapagent (the companions, and the guard's bootstrap
#       that `swapagent run` puts first on PYTHONPATH), README (scripts/dist-README.md) and LICENSE into
#       swapagent-VERSION-linux-ARCH.tar.gz, under one top directory of the same name (also left unpacked
#       in build/dist, so `file build/dist/*/bin/swapagent` shows each archive's binaries);
#   dist.sh wheel VERSION               builds the companions' wheel swapagent-VERSION-py3-none-any.whl with
#       .venv's pip and hatchling (requirements.txt), offline.
# Archives are reproducible for a given build: sorted names, owner 0, every mtime the commit's time.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=build/dist

archive() {
  local build=$1 arch=$2 version=$3
  local name=swapagent-$version-linux-$arch
  local want
  case $arch in amd64) want='X86-64' ;; arm64) want='AArch64' ;; *) want='' ;; esac
  for f in "$build/bin/swapagent" "$build/lib/libswapagent.so" "$build/include/swapagent.h"; do
    [ -f "$f" ] || { echo "dist.sh: $f is missing (build it first)" >&2; exit 1; }
  done
  # A library or command of another architecture must never be packed under this name.
  for f in "$build/bin/swapagent" "$build/lib/libswapagent.so"; do
    readelf -h "$f" | grep -q "Machine:.*$want" ||
      { echo "dist.sh: $f is not a linux/$arch binary: $(readelf -h "$f" | grep Machine:)" >&2; exit 1; }
  done
  local stage=$dist/$name
  rm -rf "$stage" "$dist/$name.tar.gz"
  mkdir -p "$stage/bin" "$stage/lib" "$stage/include"
  install -m 755 "$build/bin/swapagent" "$stage/bin/swapagent"
  install -m 755 "$build/lib/libswapagent.so" "$stage/lib/libswapagent.so"
  install -m 644 "$build/include/swapagent.h" "$stage/include/swapagent.h"
  local f
  for f in $(cd python && find swapagent -name '*.py' | sort); do
    install -D -m 644 "python/$f" "$stage/python/$f"
  done
  sed -e "s/@VERSION@/$version/g" -e "s/@ARCH@/$arch/g" scripts/dist-README.md > "$stage/README"
  install -m 644 LICENSE "$stage/LICENSE"
  chmod 644 "$stage/README"
  local mtime
  mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -C "$dist" -cf - "$name" |
    gzip -n -9 > "$dist/$name.tar.gz"
  echo "dist: $dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1))"
}

wheel() {
  local version=$1
  local py=.venv/bin/python
  [ -x "$py" ] || { echo "dist.sh: $py is missing (make venv)" >&2; exit 1; }
  "$py" -c 'import hatchling' 2>/dev/null ||
    { echo "dist.sh: hatchling is not in .venv (it is in requirements.txt: make venv)" >&2; exit 1; }
  mkdir -p "$dist"
  rm -f "$dist"/swapagent-*-py3-none-any.whl
  local log
  log=$(mktemp)
  if ! "$py" -m pip wheel --no-deps --no-build-isolation --no-index --disable-pip-version-check -q \
      -w "$dist" . >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  local whl=$dist/swapagent-$version-py3-none-any.whl
  [ -f "$whl" ] || { echo "dist.sh: pip made no $whl (pyproject.toml's version is not $version?)" >&2; exit 1; }
  echo "dist: $whl ($(du -h "$whl" | cut -f1))"
}

case "${1:-}" in
  archive) shift; archive "$@" ;;
  wheel) shift; wheel "$@" ;;
  *) echo "usage: dist.sh archive BUILD ARCH VERSION | dist.sh wheel VERSION" >&2; exit 2 ;;
esac
