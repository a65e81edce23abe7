# swapagent: one Makefile, with one fragment per component (*.mk beside its sources) so each part owns
# its build, test and bench rules. Quick start: `make demo`, `make test`.
SHELL := /bin/bash
GO ?= go
BUILD := build
ASCEND := $(BUILD)/ascend/latest
CC ?= gcc
# Target of a build: empty builds for this machine. scripts/arm64.mk cross-builds with
# `$(MAKE) BUILD=build/arm64 CC=aarch64-linux-gnu-gcc GOARCH=arm64`: then cgo builds for GOARCH with CC.
GOARCH ?=
GO_TARGET_ENV := $(if $(GOARCH),CGO_ENABLED=1 GOARCH=$(GOARCH) CC=$(CC))
# The release version, one source: pyproject.toml (the wheel's); stamped into the agent and the CLI.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
GO_VERSION_LDFLAGS := -X swapagent/internal/buildinfo.Version=$(VERSION)
CWARN := -Wall -Wextra -Werror
CFLAGS ?= -O2 -g
CFLAGS += $(CWARN) -std=gnu11 -fPIC -D_GNU_SOURCE
# The AscendCL headers (the subset of CANN's C ABI this project uses) live in include/, apart from both the
# shim and the emulator: the shim, the emulator, the decoder and replay all build against them.
ACL_INC := include
ACL_HDRS := $(wildcard $(ACL_INC)/acl/*.h $(ACL_INC)/aclnnop/*.h)
export GOFLAGS ?= -mod=mod

# Go targets depend on what `go list -deps` says they are built from (scripts/godeps.sh: every file of
# this module's packages they import, cgo headers, the packages' directories, go.mod and go.sum). Each Go
# target's recipe runs $(call go_deps,PKG) before it builds, which writes that list to
# $(GO_DEPS_DIR)/<target's file name>.d for the next make to include; a target also depends on its list,
# so one whose list is missing is built once to make it. go build itself takes what is current from the
# Go build cache.
GO_DEPS_DIR = $(BUILD)/deps
go_deps = $(GO_TARGET_ENV) GO=$(GO) bash scripts/godeps.sh $@ $(GO_DEPS_DIR)/$(@F).d $(1)
-include $(wildcard $(GO_DEPS_DIR)/*.d)
$(GO_DEPS_DIR)/%.d: ;
# Tools of the checks (scripts/tools.sh, run by bootstrap), for this machine whatever BUILD is.
TOOLS := build/tools
GOLANGCI_LINT := $(TOOLS)/golangci-lint

# Fragments append to these.
BUILD_TARGETS :=
CTESTS :=
BENCHES :=
PYTESTS :=

.PHONY: all build test demo bench bootstrap venv fmt-check vet lint generate generate-check go-test c-test py-test \
	clean
all: build

include $(sort $(wildcard sim/*/*.mk shim/*.mk python/*.mk cmd/*/*.mk scripts/*.mk))

bootstrap:
	@bash scripts/bootstrap.sh

# The Python environment of the companions' tests (MindSpore and torch): only `make test` needs it.
venv:
	@bash scripts/venv.sh

build: $(BUILD_TARGETS)

fmt-check:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './build/*' -not -path './.venv/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

vet:
	$(GO) vet ./...

# golangci-lint with the checked-in .golangci.yml.
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT): scripts/tools.sh
	@bash scripts/tools.sh

# The control ABI's vocabulary (codes, flags, states, keep reasons, policies, ABI version) has one source,
# shim/c/swapagent.h, and the control calls one table, shim/c/calls.def: internal/cmd/genabi writes them
# into swapagent.h's call kinds, trace/abi_gen.go, python/swapagent/_abi.py and agent/calls_gen.go.
# `make generate` after editing either; generate-check fails while a generated file is not current.
generate:
	$(GO) run ./internal/cmd/genabi

generate-check:
	$(GO) run ./internal/cmd/genabi -check

c-test: build
	@set -e; for t in $(CTESTS); do echo "== $$t"; $$t; done

# Python tests run with the project's virtual environment (.venv, made by scripts/bootstrap.sh), once each:
# the companions have one implementation (docs/design.md, "Where each rule lives").
py-test: build
	@set -e; for t in $(PYTESTS); do echo "== pytest $$t"; .venv/bin/python -m pytest -q $$t; done

go-test: build
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race ./tracker/... ./offload/... ./trace/... ./plan/...

test: bootstrap venv
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory fmt-check vet generate-check lint c-test sanitize go-test py-test \
		test-arm64-if-tools test-dist

demo: bootstrap
	@$(MAKE) --no-print-directory build
	@bash scripts/demo.sh

bench: bootstrap
	@$(MAKE) --no-print-directory build
	@set -e; for b in $(BENCHES); do $(MAKE) --no-print-directory $$b; done

clean:
	rm -rf $(BUILD)
