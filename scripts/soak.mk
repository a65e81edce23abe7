# scripts/soak.mk: `make soak`, the long form of the asynchronous swap proof of `make test`
# (sim/decoder/async_test.go): 50 seeds of random stream delays per combination instead of 5.
.PHONY: soak
soak: bootstrap
	@$(MAKE) --no-print-directory build
	SWAPAGENT_SOAK_SEEDS=50 $(GO) test -count=1 -timeout 180m -run TestAsyncSwapBitIdenticalAndHazardFree \
		./sim/decoder/
