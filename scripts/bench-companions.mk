# scripts/bench-companions.mk: bench-companions, what the framework companions (swapagent.torch and
# swapagent.mindspore) cost a training step (python/bench/companions.py): on a Llama-shaped decoder
# (12 layers, hidden 64, CPU), µs per saved tensor and step time with the companion under off and safe
# against no companion, each measured side by side in one run (best of N), and the profile of where a
# saved tensor's time goes (framework hooks, the companion's Python, ABI and agent). Then issue 26's own
# check (python/bench/floor.py): on a 12-layer hidden-96 model, the companion under off, by the plain control
# calls and by queued ones and against a null agent (its own cost), each against the empty hooks of its
# kinds, least of 3 interleaved runs of best of 5 x 20 steps. Then the agent's own part alone
# (agent/abi_bench_test.go): a region of 38 saves per iteration through the agent's control methods, with
# one save call per storage against one batched call, and the parts a call is made of. And the guard's
# cost (python/bench/guard.py): the same decoder swapped by the hyper-parallel stand-in under
# `swapagent run --policy safe`, blocks with the guard on and in pass-through taking turns in one process.
# Figures, no assertions. Needs .venv (scripts/venv.sh; `make bench` bootstraps it) and the agent library.
BENCHES += bench-companions

.PHONY: bench-companions
bench-companions: $(BUILD)/lib/libswapagent.so
	@.venv/bin/python python/bench/companions.py
	@.venv/bin/python python/bench/floor.py
	@.venv/bin/python python/bench/guard.py
	@echo "== the agent's part of a saved tensor, alone (ns per save: a region of 38 saves, exit, unpacks, backward exit)"
	@$(GO) test -run - -bench 'BenchmarkRegion|BenchmarkParts' -benchtime 2000x ./agent/ | \
		sed -n 's/^Benchmark\([^ \t]*\)-[0-9]*[ \t]*[0-9]*[ \t]*\([0-9.]*\) ns\/op[ \t]*\([0-9.]* ns\/save\)\{0,1\}.*/  \1: \2 ns\/op \3/p'

# bench-anchors (python/bench/anchors.py): swapagent against what a user would pick instead, on the test
# suite's real models. transformers Llama (torch): save_on_cpu, torchtune's OffloadActivations (its rule
# counted: it needs CUDA), swapagent safe and outputs-only, the hyper-parallel stand-in under the guard.
# MindFormers DeepSeek-V3 (MindSpore): an offload of every saved tensor, safe, outputs-only. Bytes moved,
# bytes freed at the peak, step time, bit-identity, in one run.
BENCHES += bench-anchors

.PHONY: bench-anchors
bench-anchors: $(BUILD)/lib/libswapagent.so $(BUILD)/bin/swapagent
	@.venv/bin/python python/bench/anchors.py
