#!/usr/bin/env bash
# bench-probe.sh (make bench-probe): what one probed call costs, measured side by side, then the latencies
# the probe reads. The same loop of cheap runtime calls (acl-bench pairs N: aclrtMalloc + aclrtFree of 4 KiB
# on the emulator) runs alone and under `swapagent probe`, ROUNDS times each, interleaved; the best run of
# each counts. A probed call's cost is the difference per pair over its two calls (each call: a uprobe at
# entry and one at return). Figures only; root is needed for eBPF (without it: one line saying so).
set -uo pipefail
build=${1:-build}
n=${PAIRS:-200000}
rounds=${ROUNDS:-3}
sa=$build/bin/swapagent
bench=$build/test/acl-bench
echo "== probe: the cost of a probed call, side by side ($rounds interleaved runs of acl-bench pairs $n each, best counts)"
if [ "$(id -u)" != 0 ]; then
  echo "  skipped: eBPF uprobes need root"
  exit 0
fi
ns() { sed -n 's/^pairs [0-9]*: \([0-9.]*\) ns per .*/\1/p'; }
plain="" probed=""
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  a=$("$bench" pairs "$n" | ns)
  b=$("$sa" probe -o "$out" -- "$bench" pairs "$n" 2>/dev/null | ns)
  [ -n "$a" ] && { [ -z "$plain" ] || awk "BEGIN{exit !($a < $plain)}"; } && plain=$a
  [ -n "$b" ] && { [ -z "$probed" ] || awk "BEGIN{exit !($b < $probed)}"; } && probed=$b
done
if [ -z "$plain" ] || [ -z "$probed" ]; then
  echo "  the loop or the probe did not run (see \`$sa probe -- $bench pairs $n\`)"
  exit 0
fi
awk -v a="$plain" -v b="$probed" 'BEGIN {
  printf "  without the probe: %8.1f ns per aclrtMalloc+aclrtFree pair\n", a
  printf "  under swapagent probe: %4.1f ns per pair (x%.2f)\n", b, b / a
  printf "  the probe adds %.0f ns per probed call (entry and return uprobes), against a %.0f ns call\n", (b - a) / 2, a / 2
}'
echo "== probe: eBPF uprobe latencies of decoder-sim's runtime calls (each includes the probe's own cost above)"
"$sa" probe -- "$build/bin/decoder-sim" --steps 1 2>&1 | grep -E '^[a-zA-Z]+: calls' || true
