# python/python.mk: the framework companions' tests (python/tests), run by `make py-test` with .venv
# (scripts/venv.sh, called from scripts/bootstrap.sh). They need build/lib/libswapagent.so and build/bin/swapagent.
# test_real_models.py also trains MindFormers' DeepSeek-V3 and transformers' Llama (requirements-models.txt)
# and runs examples/ once each (about 100 s, printed at its end).
PYTESTS += python/tests
PYTESTS_PURE += python/tests/test_companions.py python/tests/test_guard.py

# The compiled hot path of the companions (python/swapagent/_hot*.c: pack, unpack and Packed, the gradient
# chains and torch's region hooks in C, one module with PyInit__hot its only exported symbol), built against
# Python's limited API (abi3: one file per architecture for every Python 3 from 3.9 on) beside the agent
# library, where swapagent.core looks for it. The headers are .venv's Python's (python3's before make venv);
# the limited API's are the same for every LP64 Linux, so the arm64 cross-build uses them too. Without
# Python.h nothing is built and the companions run their pure-Python path (the run's summary says so).
HOT_PY := $(firstword $(wildcard .venv/bin/python) python3)
HOT_INC = $(shell $(HOT_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
BUILD_TARGETS += $(BUILD)/lib/swapagent_hot.abi3.so
HOT_SRC := $(wildcard python/swapagent/_hot*.c)
$(BUILD)/lib/swapagent_hot.abi3.so: $(HOT_SRC) python/swapagent/_hot.h shim/c/swapagent.h
	@mkdir -p $(@D)
	@if [ -f "$(HOT_INC)/Python.h" ]; then \
		$(CC) $(CFLAGS) -fvisibility=hidden -shared -Ishim/c -I$(HOT_INC) $(HOT_SRC) -o $@; \
	else echo "python.mk: no Python.h ($(HOT_PY)): $@ not built, the companions run their pure-Python hot path"; fi

# The bench's timed build of the same file (-DSWAPAGENT_HOT_TIMED: a probe at each entry point and in the parts
# of the region hooks, read by _hot.timers()): python/bench/floor.py prints where a saved tensor's time goes
# with it, and test_hot_path.py checks its counts. Never shipped: build/bench is no place load() looks.
HOT_TIMED := $(BUILD)/bench/swapagent_hot.abi3.so
BUILD_TARGETS += $(HOT_TIMED)
$(HOT_TIMED): $(HOT_SRC) python/swapagent/_hot.h shim/c/swapagent.h
	@mkdir -p $(@D)
	@if [ -f "$(HOT_INC)/Python.h" ]; then \
		$(CC) $(CFLAGS) -fvisibility=hidden -DSWAPAGENT_HOT_TIMED -shared -Ishim/c -I$(HOT_INC) $(HOT_SRC) -o $@; fi
