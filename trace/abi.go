package trace

// The control ABI's vocabulary (return codes, save flags, states, keep reasons, policies and the ABI
// version) has one source, shim/c/swapagent.h: internal/cmd/genabi generates it into abi_gen.go and into
// the Python companion's python/swapagent/_abi.py. Edit the header, then run `make generate` (or
// go generate ./trace); make test fails while a generated file is not current.

//go:generate go run swapagent/internal/cmd/genabi
