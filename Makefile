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
ACL_INC := sim/acl/include
export GOFLAGS ?= -mod=mod

# Fragments append to these.
BUILD_TARGETS :=
CTESTS :=
BENCHES :=
PYTESTS :=

.PHONY: all build test demo bench bootstrap venv fmt-check vet go-test c-test py-test clean
all: build

include $(sort $(wildcard sim/*/*.mk shim/*.mk cmd/*/*.mk scripts/*.mk))

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

c-test: build
	@set -e; for t in $(CTESTS); do echo "== $$t"; $$t; done

# Python tests run with the project's virtual environment (.venv, made by scripts/bootstrap.sh).
py-test: build
	@set -e; for t in $(PYTESTS); do echo "== pytest $$t"; .venv/bin/python -m pytest -q $$t; done

go-test: build
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -race ./tracker/... ./offload/... ./trace/...

test: bootstrap venv
	@$(MAKE) --no-print-directory build
	@$(MAKE) --no-print-directory fmt-check vet c-test go-test py-test test-arm64-if-tools test-dist

demo: bootstrap
	@$(MAKE) --no-print-directory build
	@bash scripts/demo.sh

bench: bootstrap
	@$(MAKE) --no-print-directory build
	@set -e; for b in $(BENCHES); do $(MAKE) --no-print-directory $$b; done

clean:
	rm -rf $(BUILD)
