#!/usr/bin/env bash
# make demo: the scenario of hyper-parallel issue 294 on the emulated AscendCL runtime. decoder-sim (12
# DeepSeek-V3-shaped layers, RoPE cos/sin shared by every layer as a keyword input, layers 0-10 swapped)
# runs under the agent with the safe policy, then under the policy hyper-parallel had before its fix.
set -uo pipefail
cd "$(dirname "$0")/.."
out=swapagent-out/demo
rm -rf "$out"
sa=build/bin/swapagent
sim=build/bin/decoder-sim

echo "== 1. decoder-sim under swapagent, policy safe (swaps internal activations only)"
$sa run --policy safe --out "$out/safe" -- $sim --steps 3 || exit 1
echo
echo "== 2. the same job under policy outputs-only (hyper-parallel before the fix): expect a fault"
$sa run --policy outputs-only --out "$out/outputs-only" -- $sim --steps 3
echo "(decoder-sim exited with $?, as the original job did)"
echo
echo "== 3. swapagent replay --policy safe on that trace: what the safe policy would have done"
$sa replay --policy safe "$out/outputs-only"
echo
echo "== 4. a picture of device memory under safe: $out/safe.svg (swapagent report --format svg)"
$sa report --format svg -o "$out/safe.svg" "$out/safe" || exit 1
echo "Traces are in $out: try $sa report --format perfetto -o trace.json $out/safe, and open it in Perfetto."
