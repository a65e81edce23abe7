#!/usr/bin/env bash
# test-dist.sh: the install test of `make dist` (`make test-dist`, part of `make test`). As a user on an
# Ascend host would, it unpacks this machine's archive (build/dist/swapagent-VERSION-linux-ARCH.tar.gz)
# into an empty directory outside the repository, installs the companions' wheel into a fresh venv, and
# runs from there, with a clean environment in which nothing of the repository is on PATH, PYTHONPATH,
# LD_LIBRARY_PATH or LD_PRELOAD:
#   - the archive's layout, `swapagent version` (version, commit, Go version, target), glibc <= 2.34;
#   - the torch companion on a tiny model: layer_swap under the archive's agent (`swapagent run`),
#     offloaded_bytes > 0 and loss and gradients bit-identical to a run without swap; not preloaded, the
#     companion finds the library beside `swapagent` on PATH, and through SWAPAGENT_HOME;
#   - the decoder scenario against an "installed toolkit" (the emulator copied to $tmp/Ascend/latest,
#     found through ASCEND_HOME_PATH and LD_LIBRARY_PATH like CANN's set_env.sh): safe gives the step lines
#     of a run without the agent, outputs-only is diagnosed, and `swapagent doctor` reads the log;
#   - the arm64 archive when make built it: aarch64 binaries (and `swapagent version` under qemu-user).
# The fresh venv borrows torch from the repository's .venv (a .pth line: torch is 1 GB, and the venv
# must not download); the companion itself comes only from the wheel, except under `swapagent run`, which
# puts the archive's python/ (the guard's bootstrap and the package beside the agent) first on PYTHONPATH;
# the guard runs an unmodified job that swaps with the hyper-parallel stand-in of the tests. Prints
# "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$ROOT/${DIST:-build/dist}
VERSION=${VERSION:?VERSION is required}
ARCH=${ARCH:-amd64}
archive=$DIST/swapagent-$VERSION-linux-$ARCH.tar.gz
arm_archive=$DIST/swapagent-$VERSION-linux-arm64.tar.gz
whl=$DIST/swapagent-$VERSION-py3-none-any.whl
QEMU=${QEMU_AARCH64:-qemu-aarch64-static}
SYSROOT=${ARM64_SYSROOT:-/usr/aarch64-linux-gnu}

tmp=$(mktemp -d /tmp/swapagent-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$ROOT/scripts/checks.sh"
t0=$(date +%s)

name=swapagent-$VERSION-linux-$ARCH
home=$tmp/opt/$name
# A user's clean environment: the archive's bin on PATH, nothing of the repository anywhere.
user_env() {
  env -i HOME="$tmp/home" LANG=C.UTF-8 TMPDIR="$tmp" PATH="$home/bin:/usr/local/bin:/usr/bin:/bin" "$@"
}
mkdir -p "$tmp/opt" "$tmp/home" "$tmp/job"

# --- the archive --------------------------------------------------------------------------------------
want_files=$(printf '%s\n' "$name/LICENSE" "$name/README" "$name/bin/swapagent" "$name/include/swapagent.h" \
  "$name/lib/libswapagent.so" $(cd python && find swapagent -name '*.py' | sed "s|^|$name/python/|") | sort)
if [ ! -f "$archive" ]; then
  fail "archive: $archive is missing (make dist)"
elif [ "$(tar -tzf "$archive" | grep -v '/$' | sort)" != "$want_files" ]; then
  tar -tzf "$archive" > "$tmp/list"
  fail "archive: want exactly bin/swapagent, lib/libswapagent.so, include/swapagent.h, python/swapagent, README, LICENSE" "$tmp/list"
else
  tar -xzf "$archive" -C "$tmp/opt"
  if cmp -s "$home/LICENSE" LICENSE && grep -q 'ASCEND_HOME_PATH' "$home/README" && grep -q "swapagent $VERSION" "$home/README"; then
    ok "archive: $(basename "$archive") holds bin, lib (the agent), include, python (the companions and the guard's bootstrap), README (version $VERSION, CANN setup) and LICENSE"
  else
    fail "archive: README or LICENSE content" "$home/README"
  fi
fi

# glibc_max FILE: the newest GLIBC_x.y symbol version FILE needs.
glibc_max() { objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -u | tail -1; }
version_ok() { # version_ok OUTPUT ARCH
  local out=$1 arch=$2
  [ "$(head -1 <<<"$out")" = "swapagent $VERSION" ] && grep -q "^target: linux/$arch$" <<<"$out" &&
    grep -q '^go: go1\.' <<<"$out" && grep -Eq '^revision: [0-9a-f]{7,}' <<<"$out"
}

if [ -x "$home/bin/swapagent" ]; then
  out=$(user_env "$home/bin/swapagent" version 2>&1)
  if version_ok "$out" "$ARCH"; then
    ok "swapagent version: $(head -1 <<<"$out"), $(grep '^target:' <<<"$out"), $(grep '^revision:' <<<"$out" | cut -c1-22)"
  else
    echo "$out" > "$tmp/version"
    fail "swapagent version: want \"swapagent $VERSION\", target linux/$ARCH, go and revision lines" "$tmp/version"
  fi
  g1=$(glibc_max "$home/bin/swapagent") g2=$(glibc_max "$home/lib/libswapagent.so")
  if [ -n "$g1" ] && [ -n "$g2" ] && [ "$(printf '%s\n%s\n2.34\n' "$g1" "$g2" | sort -t. -k1,1n -k2,2n | tail -1)" = 2.34 ]; then
    ok "glibc: the command needs GLIBC_$g1, the agent GLIBC_$g2 (openEuler 22.03 has 2.34)"
  else
    fail "glibc: the command needs GLIBC_${g1:-?}, the agent GLIBC_${g2:-?}; the release must run on glibc 2.34"
  fi
fi

# --- the wheel in a fresh venv ------------------------------------------------------------------------
venv=$tmp/venv
if [ ! -f "$whl" ]; then
  fail "wheel: $whl is missing (make dist)"
elif ! "$ROOT/.venv/bin/python" -m venv "$venv" > "$tmp/venv.log" 2>&1; then
  fail "wheel: python -m venv" "$tmp/venv.log"
else
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  torch_site=$("$ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" > "$site/zz-borrowed-torch.pth"
  if user_env "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl" > "$tmp/pip.log" 2>&1; then
    if [ -f "$site/swapagent/_bootstrap/sitecustomize.py" ] && [ -f "$site/swapagent/guard.py" ]; then
      ok "wheel: $(basename "$whl") installed into a fresh venv, the guard and its bootstrap with it"
    else
      fail "wheel: $(basename "$whl") lacks swapagent/guard.py or swapagent/_bootstrap/sitecustomize.py"
    fi
  else
    fail "wheel: pip install" "$tmp/pip.log"
  fi
fi

cat > "$tmp/job/train.py" <<'EOF'
"""A tiny torch job: 4 residual MLP blocks, the first 3 under swapagent.torch.layer_swap (CPU tensors
count as device tensors: include_cpu), 2 SGD steps. Writes losses, a gradient digest, where the companion
and the agent came from, and the agent's stats."""
import hashlib, json, os, sys
import torch

mode, repo, out = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Model(torch.nn.Module):
    def __init__(self, d=64, n=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, 1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x).pow(2).mean()


model, x = Model(), torch.randn(256, 64)
res = {"mode": mode, "sys_path": sys.path, "env": {k: os.environ.get(k) for k in
       ("PATH", "PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "SWAPAGENT_LIB", "SWAPAGENT_HOME")}}
h = None
if mode == "swap":
    import importlib.metadata
    import swapagent
    import swapagent.core
    import swapagent.torch as sa
    h = sa.layer_swap(model.layers, swap=range(3), include_cpu=True)
    agent = swapagent.core.load()
    res.update(module=swapagent.__file__, version=swapagent.__version__,
               dist_version=importlib.metadata.version("swapagent"),
               agent={"preloaded": agent.preloaded, "path": agent.path})
opt = torch.optim.SGD(model.parameters(), lr=0.01)
res["losses"] = []
for _ in range(2):
    opt.zero_grad()
    loss = model(x)
    loss.backward()
    opt.step()
    res["losses"].append(loss.item().hex())
res["grad"] = hashlib.sha256(b"".join(p.grad.numpy().tobytes() for p in model.parameters())).hexdigest()
if h is not None:
    st = sa.stats()
    res["stats"] = {k: st.get(k) for k in ("offloaded_bytes", "kept", "released_external", "faults")}
    h.remove()
with open(out, "w") as f:
    json.dump(res, f)
EOF

# torch_case NAME MODE CHECK [ENV...] -- [PREFIX...]: train.py in the fresh venv from $tmp/job; CHECK is a
# Python expression over its result r (and the venv v, the archive h, the repository root repo).
torch_case() {
  local name=$1 mode=$2 check=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local s
  s=$(date +%s)
  if ! (cd "$tmp/job" && user_env "${envs[@]}" "$@" "$venv/bin/python" train.py "$mode" "$ROOT" "$tmp/$name.json") \
      > "$tmp/$name.log" 2>&1; then
    fail "$name: train.py" "$tmp/$name.log"
    return 1
  fi
  if ! python3 - "$tmp/$name.json" "$check" "$venv" "$home" "$ROOT" > "$tmp/$name.check" 2>&1 <<'EOF'
import json, os, sys
r = json.load(open(sys.argv[1]))
v, h, repo = sys.argv[3], sys.argv[4], sys.argv[5]
# Nothing of the repository may be on the paths, except the .venv whose torch the fresh venv borrows.
borrowed = os.path.join(repo, ".venv") + os.sep
leaks = [p for p in r["sys_path"] if (p + os.sep).startswith(repo + os.sep) and not p.startswith(borrowed)]
for k, val in r["env"].items():
    leaks += ["%s=%s" % (k, val) for part in (val or "").split(":") if part and (part + os.sep).startswith(repo + os.sep)]
if leaks:
    sys.exit("the repository is on the paths: %s" % leaks)
if not eval(sys.argv[2]):
    sys.exit("check failed: %s\n%s" % (sys.argv[2], json.dumps({k: r.get(k) for k in r if k != "sys_path"})))
EOF
  then
    fail "$name" "$tmp/$name.check"
    return 1
  fi
  echo "$(($(date +%s) - s))" > "$tmp/$name.secs"
}

if [ -x "$venv/bin/python" ] && [ -x "$home/bin/swapagent" ]; then
  torch_case torch-noswap noswap 'True' -- &&
    torch_case torch-swap swap "r['agent'] == {'preloaded': True, 'path': '(preloaded)'} and r['module'].startswith(h + '/python/') \
      and r['version'] == r['dist_version'] == '$VERSION' and r['stats']['offloaded_bytes'] > 0 and r['stats']['released_external'] == 0 \
      and not r['stats']['faults'] and r['losses'] == json.load(open('$tmp/torch-noswap.json'))['losses'] \
      and r['grad'] == json.load(open('$tmp/torch-noswap.json'))['grad']" \
      -- swapagent run --policy safe --out "$tmp/out-torch" -- &&
    ok "torch companion under the archive's agent (swapagent run): $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%d bytes offloaded, kept %s' % (r['stats']['offloaded_bytes'], {k: n for k, n in r['stats']['kept'].items() if n}))" "$tmp/torch-swap.json"); loss and gradients bit-identical to no swap ($(cat "$tmp/torch-swap.secs")s)"
  if [ -f "$tmp/torch-swap.json" ]; then
    if user_env swapagent report --format json "$tmp/out-torch" > "$tmp/torch-report.json" 2> "$tmp/torch-report.err" &&
      python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['processes']; sys.exit(not (len(p) == 1 and p[0]['offloaded_bytes'] > 0))" "$tmp/torch-report.json"; then
      ok "swapagent report (archive) on the torch job's trace"
    else
      fail "swapagent report (archive) on the torch job's trace" "$tmp/torch-report.err"
    fi
  fi
  torch_case torch-path swap "r['agent'] == {'preloaded': False, 'path': h + '/lib/libswapagent.so'} and r['stats']['offloaded_bytes'] > 0" -- &&
    ok "torch companion, not preloaded: found the agent beside \`swapagent\` on PATH ($(cat "$tmp/torch-path.secs")s)"
  torch_case torch-home swap "r['agent'] == {'preloaded': False, 'path': h + '/lib/libswapagent.so'} and r['stats']['offloaded_bytes'] > 0" \
    SWAPAGENT_HOME="$home" PATH=/usr/bin:/bin -- &&
    ok "torch companion, not preloaded, swapagent not on PATH: found the agent through SWAPAGENT_HOME ($(cat "$tmp/torch-home.secs")s)"
fi

# --- the guard: an unmodified job whose own swap (the hyper-parallel stand-in) releases storages ---------
if [ -x "$venv/bin/python" ] && [ -x "$home/bin/swapagent" ]; then
  cp -r "$ROOT/python/tests/standin" "$tmp/job/standin"
  cp "$ROOT/python/tests/hp_job.py" "$tmp/job/hp_job.py"
  s=$(date +%s)
  hp=(PYTHONPATH="$tmp/job/standin" HYPER_PARALLEL_STANDIN_DEVICE=1 SWAPAGENT_MIN_BYTES=1024)
  mkdir -p "$tmp/hp-plain" "$tmp/hp-safe"
  (cd "$tmp/job" && user_env "${hp[@]}" "$venv/bin/python" hp_job.py --framework torch --mode noswap --out "$tmp/hp-plain" \
    > "$tmp/hp-plain.log" 2>&1)
  (cd "$tmp/job" && user_env "${hp[@]}" swapagent run --policy safe --out "$tmp/out-hp" -- \
    "$venv/bin/python" hp_job.py --framework torch --mode swap --out "$tmp/hp-safe" > "$tmp/hp-safe.log" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! user_env swapagent report --format json "$tmp/out-hp" > "$tmp/hp.json" 2>&1 ||
    ! python3 - "$tmp" > "$tmp/hp.check" 2>&1 <<'EOF'
import json, sys
tmp = sys.argv[1]
plain, safe = (json.load(open("%s/hp-%s/result.json" % (tmp, m))) for m in ("plain", "safe"))
(p,) = json.load(open(tmp + "/hp.json"))["processes"]
assert safe["grads"] == plain["grads"] and safe["losses"] == plain["losses"], "not bit-identical"
assert safe["released"] > 0 and p["guard"]["releases_allowed"] == safe["released"], p["guard"]
assert p["meta"]["python_guard"] == "attached" and p["released_external"] == 0, p["meta"]
EOF
  then
    fail "guard (archive): hyper-parallel stand-in under \`swapagent run --policy safe\` (exit $rc)" "$tmp/hp-safe.log" "$tmp/hp.check"
  else
    ok "guard (archive): an unmodified job swapping with the hyper-parallel stand-in is guarded by \`swapagent run\` alone, bit-identical to no swap ($(($(date +%s) - s))s)"
  fi
fi

# --- the decoder scenario against an installed toolkit -----------------------------------------------
if [ -x "$home/bin/swapagent" ]; then
  mkdir -p "$tmp/Ascend"
  cp -r "$ROOT/build/ascend/latest" "$tmp/Ascend/latest"
  cp "$ROOT/build/bin/decoder-sim" "$tmp/job/decoder-sim"
  ascend=$tmp/Ascend/latest
  cann=(ASCEND_HOME_PATH="$ascend" LD_LIBRARY_PATH="$ascend/lib64") # what CANN's set_env.sh sets
  s=$(date +%s)
  (cd "$tmp/job" && user_env "${cann[@]}" ./decoder-sim --steps 2 > plain.out 2> plain.err)
  rc1=$?
  (cd "$tmp/job" && user_env "${cann[@]}" swapagent run --policy safe --out "$tmp/out-dec" -- ./decoder-sim --steps 2 > safe.out 2> safe.err)
  rc2=$?
  p=$(grep '^step ' "$tmp/job/plain.out") a=$(grep '^step ' "$tmp/job/safe.out")
  if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ] || [ -z "$p" ] || [ "$p" != "$a" ]; then
    fail "decoder-sim safe under the archive's agent: exit $rc1/$rc2, step lines equal: $([ "$p" = "$a" ] && echo yes || echo no)" "$tmp/job/safe.err"
  elif ! grep -q 'agent present' "$tmp/job/safe.err" ||
    ! user_env swapagent report --format json "$tmp/out-dec" > "$tmp/dec.json" 2>&1 ||
    ! python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['processes']; sys.exit(not (len(p) == 1 and p[0]['offloaded_bytes'] > 0 and not p[0]['faults']))" "$tmp/dec.json"; then
    fail "decoder-sim safe: the agent's trace" "$tmp/job/safe.err" "$tmp/dec.json"
  else
    ok "decoder-sim (12 layers) safe under the archive's agent, runtime from ASCEND_HOME_PATH: $(wc -l <<<"$a") step lines equal to the run without it ($(($(date +%s) - s))s)"
  fi

  s=$(date +%s)
  mkdir -p "$tmp/logs"
  (cd "$tmp/job" && user_env "${cann[@]}" swapagent run --policy outputs-only --out "$tmp/logs/swapagent-out" -- \
    ./decoder-sim --steps 1 > "$tmp/logs/worker_0.log" 2>&1)
  rc=$?
  diag=$(grep -n -m1 -E 'most likely: storage 0x[0-9a-f]+#[0-9]+ \(1048576 bytes.*released by layer\.' "$tmp/logs/worker_0.log" | cut -d: -f1)
  rterr=$(grep -n -m1 'FaultReport:addr:0' "$tmp/logs/worker_0.log" | cut -d: -f1)
  user_env swapagent doctor "$tmp/logs" > "$tmp/doctor.out" 2>&1
  drc=$?
  if [ $rc -eq 0 ] || [ -z "$diag" ] || [ -z "$rterr" ] || [ "$diag" -ge "$rterr" ]; then
    fail "decoder-sim outputs-only: want the agent's diagnosis before the runtime's addr:0 (exit $rc)" "$tmp/logs/worker_0.log"
  elif [ $drc -ne 1 ] || ! grep -q '1048576' "$tmp/doctor.out"; then
    fail "swapagent doctor (archive) on the outputs-only log: exit $drc" "$tmp/doctor.out"
  else
    ok "decoder-sim outputs-only: diagnosed before the runtime's addr:0; swapagent doctor names the storage ($(($(date +%s) - s))s)"
  fi
fi

# --- the arm64 archive ---------------------------------------------------------------------------------
if [ "$ARCH" != arm64 ] && [ -f "$arm_archive" ]; then
  mkdir -p "$tmp/arm64"
  tar -xzf "$arm_archive" -C "$tmp/arm64"
  ah=$tmp/arm64/swapagent-$VERSION-linux-arm64
  desc=""
  command -v file > /dev/null && desc=$(file -b "$ah/bin/swapagent" | cut -d, -f1-2)
  if ! readelf -h "$ah/bin/swapagent" | grep -q 'Machine:.*AArch64' || ! readelf -h "$ah/lib/libswapagent.so" | grep -q 'Machine:.*AArch64' ||
    { [ -n "$desc" ] && ! grep -q 'ARM aarch64' <<<"$desc"; }; then
    fail "arm64 archive: bin/swapagent or lib/libswapagent.so is not aarch64 ($desc)"
  else
    g1=$(glibc_max "$ah/bin/swapagent") g2=$(glibc_max "$ah/lib/libswapagent.so")
    vers=""
    command -v "$QEMU" > /dev/null && vers=$("$QEMU" -L "$SYSROOT" "$ah/bin/swapagent" version 2>&1)
    if [ -n "$vers" ] && ! version_ok "$vers" arm64; then
      echo "$vers" > "$tmp/arm-version"
      fail "arm64 archive: swapagent version under qemu" "$tmp/arm-version"
    elif [ "$(printf '%s\n%s\n2.34\n' "$g1" "$g2" | sort -t. -k1,1n -k2,2n | tail -1)" != 2.34 ]; then
      fail "arm64 archive: needs GLIBC_$g1 / GLIBC_$g2, newer than 2.34"
    else
      ok "arm64 archive: ${desc:-AArch64 ELF}; $(grep '^target:' <<<"$vers")${vers:+, }glibc <= 2.34"
    fi
  fi
fi

echo "test-dist: $(($(date +%s) - t0))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
