# scripts/bench-companions.mk: bench-companions, what the framework companions (swapagent.torch and
# swapagent.mindspore) cost a training step (shim/python/bench/companions.py): on a Llama-shaped decoder
# (12 layers, hidden 64, CPU), µs per saved tensor and step time with the companion under off and safe
# against no companion, each measured side by side in one run (best of N), and the profile of where a
# saved tensor's time goes (framework hooks, the companion's Python, ABI and agent). Figures, no assertions.
# Needs .venv (scripts/venv.sh; `make bench` bootstraps it) and the agent library.
BENCHES += bench-companions

.PHONY: bench-companions
bench-companions: $(BUILD)/lib/libswapagent.so
	@.venv/bin/python shim/python/bench/companions.py
