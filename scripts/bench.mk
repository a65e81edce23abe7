# Benchmarks of the pure-Go packages (figures, never assertions).
BENCHES += bench-trace

.PHONY: bench-trace
bench-trace:
	@echo "== trace: write/read speed and bytes per event"
	@$(GO) test -run XXX -bench . -benchtime 1s ./trace/ | grep -E 'Benchmark|ok'
	@$(GO) test -count=1 -run TestCompactness -v ./trace/ | grep -E 'bytes/event'

BENCHES += bench-replay
.PHONY: bench-replay
bench-replay:
	@echo "== replay: simulated events per second on one core (target >= 5 M/s)"
	@$(GO) test -run '^$$' -bench Simulate -benchtime 2s -cpu 1 ./replay/ | grep -E 'Benchmark|ok'

BENCHES += bench-probe
.PHONY: bench-probe
bench-probe: $(BUILD)/bin/swapagent $(BUILD)/bin/decoder-sim $(BUILD)/test/acl-bench
	@bash scripts/bench-probe.sh $(BUILD)
