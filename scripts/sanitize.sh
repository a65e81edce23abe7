#!/usr/bin/env bash
# sanitize.sh KIND DIR: runs the programs of a sanitizer build (shim/sanitize.mk) of KIND, asan or tsan,
# built into DIR, and fails on any sanitizer report or wrong result. The agent is the C-only
# libsan-agent.so, preloaded after the sanitizer's runtime (which must come first in the process).
set -euo pipefail
kind=$1 dir=$2
case "$kind" in
  asan) rt=$(${CC:-gcc} -print-file-name=libasan.so) ;;
  tsan) rt=$(${CC:-gcc} -print-file-name=libtsan.so) ;;
  *) echo "sanitize.sh: unknown kind $kind" >&2; exit 2 ;;
esac
# A report fails the program with exit 66. Children of sa-fork start runtime threads after a fork of a
# threaded parent: ThreadSanitizer supports that only when asked not to die.
export ASAN_OPTIONS=halt_on_error=1:exitcode=66:detect_leaks=1:strict_string_checks=1
export TSAN_OPTIONS=halt_on_error=1:exitcode=66:die_after_fork=0
export ACLSIM_QUARANTINE=0
lib=$(realpath "$dir/lib/libsan-agent.so")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# run NAME CHECK PROGRAM ARGS...: CHECK is a grep -E pattern every line of which must match the output.
run() {
  local name=$1 check=$2
  shift 2
  local start=$SECONDS rc=0
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  local missing=""
  while IFS= read -r pat; do
    grep -Eq -- "$pat" "$tmp/$name.out" "$tmp/$name.err" || missing+=" [$pat]"
  done <<<"$check"
  if [ "$rc" -ne 0 ] || [ -n "$missing" ]; then
    echo "sanitize $kind: FAIL $name: exit $rc${missing:+, missing$missing}"
    tail -n 40 "$tmp/$name.err" "$tmp/$name.out" | sed 's/^/    /'
    fails=$((fails + 1))
  else
    echo "sanitize $kind: ok $name ($((SECONDS - start))s)"
  fi
}

preload="$rt $lib"
agent_ok='san-agent: events [1-9][0-9]* lost 0 bad 0 launch-faults 0 sync-faults 0'
run san-ring '^ok ' "$dir/test/san-ring" 4 50000
run sa-stress "$agent_ok
san-agent: fn aclrtMalloc 40000$
san-agent: fn aclrtFree 40000$
^ok 40000 pairs" env LD_PRELOAD="$preload" "$dir/test/sa-stress" 4 10000
# No leak check in sa-fork: its children inherit the parent's thread list, which LeakSanitizer cannot
# stop, and would report false leaks.
# A fork under ThreadSanitizer costs about a second: fewer trials there.
forks=20
[ "$kind" = tsan ] && forks=8
run sa-fork "^trials $forks hangs 0 failures 0
$agent_ok" env LD_PRELOAD="$preload" \
  ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "$dir/test/sa-fork" "$forks"
run sa-queued "^ok   threads: .* 0 failed
$agent_ok" env LD_PRELOAD="$preload" "$dir/test/sa-queued" threads
run decoder-sim "$agent_ok
san-agent: fn aclnnMul [1-9]
^step 3/3: loss" env LD_PRELOAD="$preload" "$dir/bin/decoder-sim" --layers 4 --seq 1024 --steps 3 \
  --streams 2 --launch thread --executor-cache on --sync layer --link dlsym --alloc vmm
# The emulator's tests: several expect a child to die of SIGSEGV on memory made inaccessible, so the
# sanitizer must leave that signal alone.
if [ "$kind" = asan ]; then
  run acl-test '^[0-9]+ passed, 0 failed$' env ASAN_OPTIONS="$ASAN_OPTIONS:handle_segv=0" "$dir/test/acl-test"
fi
[ "$fails" -eq 0 ] || { echo "sanitize $kind: $fails failed"; exit 1; }
