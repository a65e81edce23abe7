# scripts/swap.mk: bench-swap, the swap figures of decoder-sim under the agent (cmd/swapbench): bytes
# moved per step and device bytes saved against their ideals, and the share of the copies' device time the
# compute streams stalled on them with the copy engine throttled to 25 GB/s, prefetch 1 and prefetch 0;
# in --sync step mode (the host waits only to read results), then --sync op. Figures, no assertions.
BENCHES += bench-swap

.PHONY: bench-swap
bench-swap: $(BUILD)/lib/libswapagent.so $(BUILD)/bin/decoder-sim $(BUILD)/bin/swapagent
	@$(GO) run ./cmd/swapbench --lib $(BUILD)/lib/libswapagent.so --sim $(BUILD)/bin/decoder-sim \
		--cli $(BUILD)/bin/swapagent --steps 3 --hidden 32 --gbps 25
