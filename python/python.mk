# python/python.mk: the framework companions' tests (python/tests), run by `make py-test` with .venv
# (scripts/venv.sh, called from scripts/bootstrap.sh). They need build/lib/libswapagent.so and build/bin/swapagent.
# test_real_models.py also trains MindFormers' DeepSeek-V3 and transformers' Llama (requirements-models.txt)
# and runs examples/ once each (about 100 s, printed at its end). The companions are Python only: nothing
# here is built (docs/design.md, "Where each rule lives").
PYTESTS += python/tests
