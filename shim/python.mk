# shim/python.mk: the framework companions' tests (shim/python/tests), run by `make py-test` with .venv
# (scripts/venv.sh, called from scripts/bootstrap.sh). They need build/lib/libswapagent.so and build/bin/swapagent.
PYTESTS += shim/python/tests
