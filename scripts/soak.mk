# scripts/soak.mk: `make soak`, the long forms of three proofs of `make test`: the asynchronous swap
# (sim/decoder/async_test.go), 50 seeds of random stream delays per combination instead of 5; the ABI
# fuzz under the preloaded agent (shim/shimtest/fuzz_test.go), 1,000,000 random calls per seed instead of
# 50,000; and the exit soak (python/tests/test_exit_soak.py), 250 runs per framework instead of 8 (about
# 3 hours on a 2-core machine).
.PHONY: soak
soak: bootstrap
	@$(MAKE) --no-print-directory build
	SWAPAGENT_SOAK_SEEDS=50 $(GO) test -count=1 -timeout 180m -run TestAsyncSwapBitIdenticalAndHazardFree \
		./sim/decoder/
	SWAPAGENT_SOAK_FUZZ_CALLS=1000000 $(GO) test -count=1 -timeout 120m -run TestFuzzABI -v ./shim/shimtest/
	SWAPAGENT_SOAK_RUNS=250 .venv/bin/python -m pytest -q python/tests/test_exit_soak.py
