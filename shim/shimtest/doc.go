// Package shimtest holds the integration tests of libswapagent.so: real processes (decoder-sim, the C
// programs of shim/c/test, /usr/bin/python3) run under LD_PRELOAD against the emulated runtime, and their
// traces are read back through package trace. It has no code of its own: the tests live outside package
// main (shim/) so the test binary itself never contains the interposers.
package shimtest
