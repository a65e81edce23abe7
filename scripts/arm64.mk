# scripts/arm64.mk: linux/arm64, the platform of Kunpeng + Ascend 910B hosts. `make arm64` cross-builds
# everything (the emulator's libraries and tests, libswapagent.so with cgo, the CLI, decoder-sim, the
# shim's test programs) into build/arm64, laid out like build/, with gcc-aarch64-linux-gnu.
# `make test-arm64` runs the arm64 suite under qemu-user (scripts/test-arm64.sh); `make test` runs it
# whenever the cross tools are present (scripts/bootstrap.sh installs them as root) and otherwise says in
# one line that it skips it.
ARM64_BUILD := build/arm64
ARM64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64-static
ARM64_SYSROOT ?= /usr/aarch64-linux-gnu
# What test-arm64 lacks on this machine (empty when it can run).
ARM64_MISSING = $(strip $(foreach t,$(ARM64_CC) $(QEMU_AARCH64),$(if $(shell command -v $(t) 2>/dev/null),,$(t))) \
	$(if $(wildcard $(ARM64_SYSROOT)/lib/libc.so.6),,$(ARM64_SYSROOT)/lib/libc.so.6))

.PHONY: arm64 test-arm64 test-arm64-if-tools
arm64:
	@$(MAKE) --no-print-directory BUILD=$(ARM64_BUILD) CC=$(ARM64_CC) GOARCH=arm64 build

# The x86-64 CLI ($(BUILD)/bin/swapagent) reads the arm64 traces.
test-arm64: $(BUILD)/bin/swapagent
	@$(if $(ARM64_MISSING),echo "test-arm64: missing $(ARM64_MISSING) (scripts/bootstrap.sh as root installs them)" >&2; exit 1)
	@$(MAKE) --no-print-directory arm64
	@ARM64_BUILD=$(ARM64_BUILD) CLI=$(BUILD)/bin/swapagent QEMU_AARCH64=$(QEMU_AARCH64) \
		ARM64_SYSROOT=$(ARM64_SYSROOT) bash scripts/test-arm64.sh

test-arm64-if-tools:
	@$(if $(ARM64_MISSING),echo "test-arm64: skipped: $(ARM64_MISSING) not found (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user-static)",$(MAKE) --no-print-directory test-arm64)
