# scripts/dist.mk: `make dist`, the release files in build/dist (scripts/dist.sh):
#   swapagent-$(VERSION)-linux-amd64.tar.gz and -linux-arm64.tar.gz: bin/swapagent, lib/libswapagent.so,
#   include/swapagent.h, README (scripts/dist-README.md: use with a CANN toolkit) and LICENSE, under one
#   top directory; arm64 is cross-built into build/arm64 (scripts/arm64.mk);
#   swapagent-$(VERSION)-py3-none-any.whl: the Python companions, built offline with .venv's hatchling.
# `make test-dist` (part of `make test`) installs the archive of this machine and the wheel outside the
# repository and runs the torch companion and the decoder scenario from there (scripts/test-dist.sh).
DIST := build/dist
HOST_GOARCH := $(patsubst x86_64,amd64,$(patsubst aarch64,arm64,$(shell uname -m)))

.PHONY: dist dist-host dist-arm64 wheel test-dist
dist: dist-host wheel
ifeq ($(HOST_GOARCH),amd64)
dist: dist-arm64
endif

dist-host: $(BUILD)/bin/swapagent $(BUILD)/lib/libswapagent.so $(BUILD)/include/swapagent.h
	@bash scripts/dist.sh archive $(BUILD) $(HOST_GOARCH) $(VERSION)

dist-arm64:
	@$(if $(ARM64_MISSING),echo "dist-arm64: missing $(ARM64_MISSING) (scripts/bootstrap.sh as root installs them)" >&2; exit 1)
	@$(MAKE) --no-print-directory arm64
	@bash scripts/dist.sh archive $(ARM64_BUILD) arm64 $(VERSION)

wheel: venv
	@bash scripts/dist.sh wheel $(VERSION)

# The arm64 archive is checked too when the cross tools are here (make test has built build/arm64 then).
test-dist: dist-host wheel $(BUILD)/bin/decoder-sim
	@$(if $(ARM64_MISSING),,$(MAKE) --no-print-directory dist-arm64)
	@DIST=$(DIST) VERSION=$(VERSION) ARCH=$(HOST_GOARCH) bash scripts/test-dist.sh
