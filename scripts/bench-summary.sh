#!/usr/bin/env bash
# bench-summary.sh METRIC...: reads `go test -bench -count N` output and prints, per metric and benchmark, the
# best (highest) and the median of METRIC (a rate reported with b.ReportMetric, such as events/s) over its N
# runs, with the other metrics of its best run. A loaded machine slows some runs by up to 2x: the best run
# is what the code can do, the median what a run can expect.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bench-summary.sh METRIC..." >&2; exit 2; }
in=$(cat)
for metric in "$@"; do
printf '%s\n' "$in" | awk -v m="$metric" '
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  for (i = 2; i < NF; i++) if ($(i + 1) == m) v = $i
  if (!(name in n)) order[++names] = name
  vals[name, ++n[name]] = v
  if (v + 0 >= best[name] + 0) { best[name] = v; line[name] = $0 }
}
END {
  for (k = 1; k <= names; k++) {
    name = order[k]; c = n[name]
    for (i = 1; i <= c; i++) s[i] = vals[name, i] + 0
    for (i = 2; i <= c; i++) { x = s[i]; j = i - 1; while (j > 0 && s[j] > x) { s[j + 1] = s[j]; j-- } s[j + 1] = x }
    med = (c % 2) ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
    extra = line[name]; sub(/^[^ \t]+[ \t]+[0-9]+[ \t]+/, "", extra)
    printf "%-55s best %.2f M %s, median %.2f M (%d runs); best run: %s\n", name, best[name] / 1e6, m, med / 1e6, c, extra
  }
}'
done
