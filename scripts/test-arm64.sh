#!/usr/bin/env bash
# test-arm64.sh: the linux/arm64 suite of `make test-arm64` (scripts/arm64.mk). It runs the cross-built
# tree ($ARM64_BUILD, default build/arm64) under qemu-user (qemu-aarch64-static -L the aarch64 sysroot;
# no binfmt needed) and reads every arm64 trace with the x86-64 CLI ($CLI, default build/bin/swapagent):
#   - the emulator's C tests (acl-test, acl-dladdr-test);
#   - decoder-sim under policy safe with the arm64 agent preloaded: step lines bit-identical to the same
#     arm64 decoder-sim without it (the default schedule, then --sync step --streams 2);
#   - the outputs-only scenario of issue 294: the agent's fault block names the 1048576-byte RoPE storage,
#     its releasing group and its owner before the runtime's addr:0 error;
#   - the shim's fork, fatal-signal and concurrency programs (sa-fork, sa-crash, sa-stress).
#   - the control calls' one path (sa-queued, policy off): qemu-user refuses process_vm_readv, so the calls'
#     arguments are read and written through a pipe; queued and plain calls must agree and every bad pointer
#     must be refused.
# Small configurations keep it short under emulation. Prints one line per check and "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=${ARM64_BUILD:-build/arm64}
CLI=${CLI:-build/bin/swapagent}
QEMU=${QEMU_AARCH64:-qemu-aarch64-static}
SYSROOT=${ARM64_SYSROOT:-/usr/aarch64-linux-gnu}
LIB=$ROOT/$A/lib/libswapagent.so
SIM=$ROOT/$A/bin/decoder-sim
T=$ROOT/$A/test

# Nothing from the caller steers the agent or the emulator.
for v in $(compgen -e); do
  case $v in SWAPAGENT_* | ACLSIM_* | LD_PRELOAD | MS_ROLE | RANK | RANK_ID) unset "$v" ;; esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" # qemu writes no core files (ulimit below), and nothing lands in the repository
ulimit -c 0

. "$ROOT/scripts/checks.sh"
t0=$(date +%s)

# arm VAR=VALUE... -- PROG ARGS: PROG under qemu-user, the variables set in its environment only (an
# aarch64 LD_PRELOAD must not reach host programs), bounded by a timeout. qemu 7 keeps a descriptor per
# 4 KiB guest page of every mapping, so the emulator's reserved device range (4 x the device memory +
# 16 GiB, PROT_NONE) costs time at every start and fork: 1 GiB of device memory is plenty here.
arm() {
  local envs=(-E ACLSIM_DEVICE_MEM=1G)
  while [ "$1" != "--" ]; do envs+=(-E "$1"); shift; done
  shift
  timeout 240 "$QEMU" -L "$SYSROOT" "${envs[@]}" "$@"
}

# report DIR EXPR: the x86-64 CLI's JSON report of the single trace in DIR, and a Python expression over
# its process p (a dict) that must hold; prints what it checked on failure.
# report DIR EXPR [killed]: the one process's JSON report satisfies EXPR; report exits 0, or, for a process
# killed by a signal (killed), 3 with the line that says its trace was never closed.
report() {
  local dir=$1 expr=$2 killed=${3:-}
  local rc=0
  "$ROOT/$CLI" report --format json "$dir" > "$dir.json" 2> "$dir.report-err" || rc=$?
  if [ -n "$killed" ]; then
    [ "$rc" -eq 3 ] && grep -q 'trace not closed (process killed?)' "$dir.report-err" ||
      { echo "report exit $rc, want 3 and 'trace not closed'"; cat "$dir.report-err"; return 1; }
  elif [ "$rc" -ne 0 ]; then
    cat "$dir.report-err"
    return 1
  fi
  python3 - "$dir.json" "$expr" <<'EOF'
import json, sys
procs = json.load(open(sys.argv[1]))["processes"]
if len(procs) != 1:
    sys.exit("want one process in the report, got %d" % len(procs))
p = procs[0]
if not eval(sys.argv[2], {"p": p}):
    keys = ("events", "truncated", "offloaded_bytes", "kept", "faults", "calls", "lost_events", "logs", "meta")
    sys.exit("report check failed: %s\n%s" % (sys.argv[2], json.dumps({k: p.get(k) for k in keys})[:3000]))
EOF
}

steps() { grep '^step ' "$1"; }

# 1. The emulator's C tests. acl-test is the longest (each case forks and reserves the device range at
# the default 8 GiB, which the test sets itself): it runs in the background while the rest goes on. Its
# address-space limit makes the emulator's reservation fall back from 48 to 24 GiB (mem.c halves it while
# mmap fails, down to twice the device memory), which halves the cost of every case under qemu.
( ulimit -v $((36 << 20)); arm -- "$T/acl-test" > acl-test.log 2>&1; echo $? > acl-test.rc ) &
acl_pid=$!

s=$(date +%s)
if arm ACLSIM_LIB="$ROOT/$A/ascend/latest/lib64/libascendcl.so" -- "$T/acl-dladdr-test" > dladdr.log 2>&1 &&
  grep -q '^[0-9]* passed, 0 failed$' dladdr.log; then
  ok "acl-dladdr-test: $(grep -c '^ok ' dladdr.log) checks: dlopen/dlsym/dladdr discovery, exports ($(($(date +%s) - s))s)"
else
  fail "acl-dladdr-test" dladdr.log
fi

# 2. decoder-sim under policy safe: the same step lines with and without the agent.
small=(--steps 2 --layers 4 --seq 1024 --hidden 16 --swap-layers 0-2)
safe_case() {
  local name=$1
  shift
  local s
  s=$(date +%s)
  arm -- "$SIM" "$@" > "$name.plain.out" 2> "$name.plain.err" || { fail "$name: decoder-sim without the agent" "$name.plain.err"; return; }
  arm LD_PRELOAD="$LIB" SWAPAGENT_POLICY=safe SWAPAGENT_OUT="$tmp/$name" SWAPAGENT_MIN_BYTES=4096 -- \
    "$SIM" "$@" > "$name.agent.out" 2> "$name.agent.err" || { fail "$name: decoder-sim under the agent" "$name.agent.err"; return; }
  if [ -z "$(steps "$name.plain.out")" ] || [ "$(steps "$name.plain.out")" != "$(steps "$name.agent.out")" ]; then
    fail "$name: step lines differ from the run without the agent" "$name.plain.out" "$name.agent.out"
    return
  fi
  grep -q 'agent present: .* 0 errors' "$name.agent.err" || { fail "$name: decoder-sim did not see the agent, or it erred" "$name.agent.err"; return; }
  if ! report "$tmp/$name" "p['meta']['policy'] == 'safe' and p['offloaded_bytes'] > 0 and p['restored_bytes'] == p['offloaded_bytes'] \
      and p['kept']['input'] > 0 and not p['faults'] and p['lost_events'] == 0 and not p['truncated']" > "$name.check" 2>&1; then
    fail "$name: the x86-64 CLI's report of the arm64 trace" "$name.check"
    return
  fi
  "$ROOT/$CLI" report "$tmp/$name" > "$name.report.txt" 2>&1 || { fail "$name: swapagent report (text)" "$name.report.txt"; return; }
  ok "$name: $(steps "$name.agent.out" | wc -l) step lines bit-identical to arm64 without the agent; $(python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['processes'][0]; print('%d storages (%d bytes) offloaded, kept input %d' % (p['offloaded_storages'], p['offloaded_bytes'], p['kept']['input']))" "$tmp/$name.json"), read by the x86-64 CLI ($(($(date +%s) - s))s)"
}
safe_case decoder-safe "${small[@]}"
safe_case decoder-safe-step-2streams "${small[@]}" --sync step --streams 2

# 3. outputs-only, the behaviour before hyper-parallel's fix: the RoPE cos/sin storage (4096 x 64 float32
# = 1048576 bytes) is released; the agent's diagnosis comes before the runtime's error.
s=$(date +%s)
name=outputs-only
arm LD_PRELOAD="$LIB" SWAPAGENT_POLICY=outputs-only SWAPAGENT_OUT="$tmp/$name" SWAPAGENT_MIN_BYTES=4096 -- \
  "$SIM" --steps 1 --layers 3 --seq 4096 --rope-dim 64 --hidden 16 --swap-layers 0-1 > "$name.out" 2> "$name.err"
rc=$?
diag=$(grep -n -m1 -E 'swapagent: =+ +most likely: storage 0x[0-9a-f]+#[0-9]+ \(1048576 bytes.*released by layer\.' "$name.err" | cut -d: -f1)
owner=$(grep -n -m1 -E 'swapagent: =+ +owner: keyword input of layer\.' "$name.err" | cut -d: -f1)
rterr=$(grep -n -m1 'FaultReport:addr:0' "$name.err" | cut -d: -f1)
if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
  fail "$name: decoder-sim exited $rc; want the runtime's fault (exit 1)" "$name.err"
elif [ -z "$diag" ] || [ -z "$owner" ] || [ -z "$rterr" ] || [ "$diag" -ge "$rterr" ] || [ "$owner" -ge "$rterr" ] ||
  ! grep -q 'FaultReport:size:1048576 bytes' "$name.err"; then
  fail "$name: want the agent's fault block (1048576-byte storage released by a layer, keyword-input owner) before the runtime's addr:0 error" "$name.err"
elif ! report "$tmp/$name" "p['meta']['policy'] == 'outputs-only' and len(p['faults']) > 0 and p['released_external'] > 0" > "$name.check" 2>&1; then
  fail "$name: the x86-64 CLI's report of the arm64 trace" "$name.check"
elif ! "$ROOT/$CLI" replay --policy safe "$tmp/$name" > "$name.replay" 2>&1; then
  fail "$name: swapagent replay --policy safe on the arm64 trace" "$name.replay"
else
  ok "$name: fault diagnosed at line $diag, before the runtime's addr:0 at line $rterr (exit $rc); report and replay read the trace ($(($(date +%s) - s))s)"
fi

# 4. The shim's fork, fatal-signal and concurrency programs (shim/shimtest runs them larger on x86-64).
s=$(date +%s)
arm LD_PRELOAD="$LIB" SWAPAGENT_OUT="$tmp/fork" -- "$T/sa-fork" 10 > fork.out 2> fork.err
rc=$?
ntraces=$(find "$tmp/fork" -name '*.swtrace' 2>/dev/null | wc -l)
if [ "$rc" -ne 0 ] || ! grep -q 'trials 10 hangs 0 failures 0' fork.out; then
  fail "sa-fork: exit $rc" fork.out fork.err
elif [ "$ntraces" -ne 1 ]; then
  fail "sa-fork: want the parent's trace only, found $ntraces" fork.out
elif ! report "$tmp/fork" "p['calls'].get('aclrtMalloc', 0) > 0 and p['lost_events'] == 0" > fork.check 2>&1; then
  fail "sa-fork: trace" fork.check
else
  ok "sa-fork: 10 forks without exec while threads allocate: no hang, no failure, one trace ($(($(date +%s) - s))s)"
fi

for mode in abort segv; do
  s=$(date +%s)
  arm LD_PRELOAD="$LIB" SWAPAGENT_OUT="$tmp/crash-$mode" -- "$T/sa-crash" 2000 "$mode" > "crash-$mode.out" 2> "crash-$mode.err"
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -q allocated "crash-$mode.out"; then
    fail "sa-crash $mode: exit $rc; want death by the signal after \"allocated\"" "crash-$mode.out" "crash-$mode.err"
  elif ! report "$tmp/crash-$mode" "p['calls'].get('aclrtMalloc') == 2000 and p['calls'].get('aclrtFree') == 2000 \
      and any('fatal signal' in str(l) for l in p['logs'])" killed > "crash-$mode.check" 2>&1; then
    fail "sa-crash $mode: the ring was not flushed on the fatal signal" "crash-$mode.check"
  else
    ok "sa-crash $mode: all 2000 malloc/free pairs and the fatal-signal record in the trace (exit $rc, $(($(date +%s) - s))s)"
  fi
done

s=$(date +%s)
arm LD_PRELOAD="$LIB" SWAPAGENT_POLICY=off SWAPAGENT_MIN_BYTES=65536 SWAPAGENT_OUT="$tmp/queued" -- "$T/sa-queued" off > queued.out 2> queued.err
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '^ok   refusals counted:' queued.out; then
  fail "sa-queued: exit $rc" queued.out queued.err
else
  ok "sa-queued off: without process_vm_readv the calls' arguments go through a pipe: queued and plain agree, bad pointers refused ($(($(date +%s) - s))s)"
fi

s=$(date +%s)
arm LD_PRELOAD="$LIB" SWAPAGENT_OUT="$tmp/stress" ACLSIM_QUARANTINE=0 -- "$T/sa-stress" 4 20000 > stress.out 2> stress.err
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q 'ok 80000 pairs' stress.out; then
  fail "sa-stress: exit $rc" stress.out stress.err
elif ! report "$tmp/stress" "p['calls'].get('aclrtMalloc') == 80000 and p['calls'].get('aclrtFree') == 80000 \
    and p['lost_events'] == 0" > stress.check 2>&1; then
  fail "sa-stress: the trace lacks events" stress.check
else
  ok "sa-stress: 4 threads x 20000 malloc/free pairs, every event in the trace, none lost ($(($(date +%s) - s))s)"
fi

# 1 (end). acl-test's result.
s=$(date +%s)
wait "$acl_pid"
rc=$(cat acl-test.rc 2>/dev/null || echo 1)
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' acl-test.log | tail -1)
if [ "$rc" -eq 0 ] && [[ "$summary" == *" passed, 0 failed" ]]; then
  ok "acl-test: ${summary%%,*} (waited $(($(date +%s) - s))s more for it)"
else
  grep -v '^ok ' acl-test.log > acl-test.fail
  fail "acl-test: exit $rc, ${summary:-no summary}" acl-test.fail
fi

echo "test-arm64: $(($(date +%s) - t0))s under $QEMU"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
