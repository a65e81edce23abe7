# Benchmarks of the pure-Go packages (figures, never assertions).
BENCHES += bench-trace

.PHONY: bench-trace
bench-trace: $(BUILD)/lib/libswapagent.so $(BUILD)/bin/decoder-sim
	@echo "== trace: write/read speed and bytes per event (synthetic trace)"
	@$(GO) test -run XXX -bench 'Benchmark(Write|Read)$$' -benchtime 1s -cpu 1 ./trace/ | grep -E 'Benchmark|ok'
	@$(GO) test -count=1 -run TestCompactness -v ./trace/ | grep -E 'bytes/event'
	@echo "== trace: decoder-sim --steps 20 recorded at each SWAPAGENT_TRACE level (targets: all <= 3 B/event,"
	@echo "   memory <= 1 B per runtime call, writer >= 10 M events/s on one core; 7 runs each, best and median,"
	@echo "   per second of wall time and per second of CPU time: the machine's load moves a run by up to 2x)"
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; for l in all memory off; do \
		LD_PRELOAD=$(CURDIR)/$(BUILD)/lib/libswapagent.so SWAPAGENT_OUT=$$d/$$l SWAPAGENT_TRACE=$$l \
			$(BUILD)/bin/decoder-sim --steps 20 >/dev/null 2>&1; done; \
		SWAPAGENT_BENCH_TRACES=$$d $(GO) test -count=1 -run TestRecordedSizes -v ./trace/ | grep -E '^trace level'; \
		SWAPAGENT_BENCH_TRACES=$$d $(GO) test -count=7 -run XXX -bench WriteRecorded -benchtime 1s -cpu 1 ./trace/ | \
			bash scripts/bench-summary.sh events/s events/cpu-s

BENCHES += bench-report
.PHONY: bench-report
bench-report: $(BUILD)/bin/swapagent $(BUILD)/lib/libswapagent.so $(BUILD)/bin/decoder-sim
	@echo "== report, replay, doctor: peak RSS reading one decoder-sim --steps 20 trace, 50 copies of it and a 200-step one;"
	@echo "   report on a header followed by 100 MB of garbage"
	@$(GO) test -count=1 -run TestReportMemoryDoesNotGrowWithTraces -v ./cmd/swapagent/ | grep -E '^(report --format|report of a header|replay|doctor)'

BENCHES += bench-replay
.PHONY: bench-replay
bench-replay:
	@echo "== replay: simulated events per second on one core (target >= 5 M/s)"
	@$(GO) test -run '^$$' -bench Simulate -benchtime 2s -cpu 1 ./replay/ | grep -E 'Benchmark|ok'

BENCHES += bench-probe
.PHONY: bench-probe
bench-probe: $(BUILD)/bin/swapagent $(BUILD)/bin/decoder-sim $(BUILD)/test/acl-bench
	@bash scripts/bench-probe.sh $(BUILD)

BENCHES += bench-plan
.PHONY: bench-plan
bench-plan: $(BUILD)/bin/swapagent $(BUILD)/lib/libswapagent.so $(BUILD)/bin/decoder-sim
	@$(GO) run ./cmd/planbench
