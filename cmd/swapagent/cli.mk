# cmd/swapagent/cli.mk: builds the swapagent command, build/bin/swapagent, from the Go packages it links
# (what `go list -deps` says: the Makefile's go_deps), so editing any of them rebuilds it.
BUILD_TARGETS += $(BUILD)/bin/swapagent

$(BUILD)/bin/swapagent: $(GO_DEPS_DIR)/swapagent.d
	@mkdir -p $(@D)
	@$(call go_deps,./cmd/swapagent)
	$(GO_TARGET_ENV) $(GO) build -ldflags "$(GO_VERSION_LDFLAGS)" -o $@ ./cmd/swapagent
