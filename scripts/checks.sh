# checks.sh: the tally of a scripted test suite (test-arm64.sh, test-dist.sh), sourced by it. `ok NAME`
# and `fail NAME [LOG...]` print one line per check (a failure also the last lines of each log it names)
# and count them in $passed and $failed, for the suite's closing "N passed, N failed".
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL $1"
  shift
  for f in "$@"; do [ -f "$f" ] && tail -n 25 "$f" | sed 's/^/    | /'; done
}
