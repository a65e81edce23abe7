# Benchmarks of the pure-Go packages (figures, never assertions).
BENCHES += bench-trace

.PHONY: bench-trace
bench-trace:
	@echo "== trace: write/read speed and bytes per event"
	@$(GO) test -run XXX -bench . -benchtime 1s ./trace/ | grep -E 'Benchmark|ok'
	@$(GO) test -count=1 -run TestCompactness -v ./trace/ | grep -E 'bytes/event'
