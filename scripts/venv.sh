#!/usr/bin/env bash
# venv.sh owns .venv, the Python environment of the framework companions' tests (python/tests) and
# of examples/: it creates it with the python3 on PATH and installs requirements.txt and
# requirements-models.txt (the real models: mindformers without its dependencies, see there), and does
# nothing when .venv already holds exactly these requirements (a stamp with the sha256 of both files and
# the interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
req=requirements.txt
models=requirements-models.txt
stamp=$venv/.swapagent-requirements.sha256
py=${PYTHON:-python3}

command -v "$py" >/dev/null 2>&1 || { echo "venv.sh: $py not found on PATH" >&2; exit 1; }
# MindSpore 2.10.0 has wheels for CPython 3.9-3.12 and torch 2.15.0 for >= 3.11.
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$pyver" in
  3.11|3.12) ;;
  *) echo "venv.sh: $py is Python $pyver; the pinned MindSpore 2.10.0 and torch 2.15.0 need 3.11 or 3.12" >&2; exit 1 ;;
esac

"$py" -c 'import ensurepip, venv' >/dev/null 2>&1 ||
  { echo "venv.sh: $py lacks the venv module (Debian: apt-get install python3-venv)" >&2; exit 1; }

want="$(sha256sum "$req" "$models" | cut -d' ' -f1 | tr '\n' ' ')python$pyver"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$pyver" ]; then
  rm -rf "$venv"
fi

# A new .venv takes about 9 GB (torch brings CUDA's libraries, about 4 GB, that `import torch` loads even
# on CPU), and pip holds the downloaded wheels, about 4 GB, in $TMPDIR until it has installed them: check for
# that room first, so that a full disk is one clear line rather than a failed install halfway through.
# No pip cache (--no-cache-dir below): it would keep another copy of those wheels after the install.
need_gb() {
  local have
  have=$(df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ "$have" -lt "$2" ]; then
    echo "venv.sh: making $venv needs about $2 GB free on the filesystem of $(cd "$1" && pwd), which has $have GB" >&2
    exit 1
  fi
}
if [ ! -x "$venv/bin/python" ]; then
  tmp=${TMPDIR:-/tmp}
  if [ "$(stat -c %d .)" = "$(stat -c %d "$tmp")" ]; then
    need_gb . 13
  else
    need_gb . 9
    need_gb "$tmp" 4
  fi
fi

start=$(date +%s)
echo "venv.sh: installing $req and $models into $venv (Python $pyver; MindSpore and torch: about 9 GB, a few minutes)"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
rm -f "$stamp"
# One resolution for both files, so requirements.txt's pins (numpy 1.26.4) hold for the models' packages;
# mindformers alone afterwards, without its dependencies (requirements-models.txt says why).
"$venv/bin/python" -m pip install --progress-bar off -q --disable-pip-version-check --no-cache-dir -r "$req" \
  -r <(grep -v '^mindformers==' "$models")
"$venv/bin/python" -m pip install --progress-bar off -q --disable-pip-version-check --no-cache-dir --no-deps \
  $(grep '^mindformers==' "$models")
echo "$want" > "$stamp"
echo "venv.sh: $venv ready in $(( $(date +%s) - start ))s ($(du -sh "$venv" | cut -f1))"
