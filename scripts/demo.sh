#!/usr/bin/env bash
# make demo: the decoder scenario of hyper-parallel issue 294 on the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== decoder-sim on the emulated AscendCL runtime (no agent)"
build/bin/decoder-sim --steps 3
