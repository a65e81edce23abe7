#!/usr/bin/env bash
# godeps.sh TARGET OUT PKG...: writes OUT, a make fragment saying that TARGET depends on what
# `go list -deps PKG...` says it is built from, within this module: every Go, cgo, C, C++, header,
# assembly, syso and embedded file of the packages it imports, the headers under the -I directories of
# their cgo flags that lie inside the tree, the packages' directories (a file added or removed) and
# go.mod/go.sum. Every file is also named as a target of its own with no recipe, so a file deleted later
# does not stop make. Run by the Go targets' recipes before they build (see GO_DEPS in the Makefile),
# with the build's GOARCH and CGO_ENABLED, so the list is the target architecture's.
set -euo pipefail
target=$1 out=$2
shift 2
root=$PWD
# Fields of `go list`: one path a line; "I dir" for a cgo include directory.
fmt='{{if and .Module .Module.Main}}{{$d := .Dir}}{{$d}}
{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoFiles}}{{$d}}/{{.}}
{{end}}{{range .CFiles}}{{$d}}/{{.}}
{{end}}{{range .CXXFiles}}{{$d}}/{{.}}
{{end}}{{range .HFiles}}{{$d}}/{{.}}
{{end}}{{range .SFiles}}{{$d}}/{{.}}
{{end}}{{range .SysoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{range .CgoCFLAGS}}I {{.}}
{{end}}{{end}}'
list=$("${GO:-go}" list -deps -f "$fmt" "$@")
deps=("$root/go.mod" "$root/go.sum")
while read -r a b; do
  if [ "$a" = I ]; then
    [[ "$b" == -I* ]] || continue
    inc=$(realpath -m "${b#-I}")
    case "$inc" in
      "$root"/*) while IFS= read -r h; do deps+=("$h"); done < <(find "$inc" -name '*.h' | sort) ;;
    esac
  elif [ -n "$a" ]; then
    deps+=("$a")
  fi
done <<<"$list"
declare -A seen
uniq=()
for d in "${deps[@]#"$root"/}"; do
  [ -n "${seen[$d]:-}" ] || uniq+=("$d")
  seen[$d]=1
done
mkdir -p "$(dirname "$out")"
tmp=$out.tmp
{
  printf '# Written by scripts/godeps.sh for %s; do not edit.\n' "$target"
  printf '%s:' "$target"
  printf ' \\\n  %s' "${uniq[@]}"
  printf '\n'
  printf '%s:\n' "${uniq[@]}"
} >"$tmp"
mv "$tmp" "$out"
