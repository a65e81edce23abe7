# cmd/swapagent/cli.mk: builds the swapagent command, build/bin/swapagent, from the Go packages it links
# (the command, report, replay, doctor, trace, tracker, offload, internal), so editing any of them rebuilds it.
SWAPAGENT_CLI_SRCS := $(filter-out %_test.go,$(wildcard cmd/swapagent/*.go report/*.go trace/*.go internal/*/*.go bpf/*.go bpf/*.o replay/*.go replay/*/*.go replay/*/*.c replay/*/*.h doctor/*.go tracker/*.go offload/*.go)) go.mod
BUILD_TARGETS += $(BUILD)/bin/swapagent

$(BUILD)/bin/swapagent: $(SWAPAGENT_CLI_SRCS)
	@mkdir -p $(@D)
	$(GO_TARGET_ENV) $(GO) build -ldflags "$(GO_VERSION_LDFLAGS)" -o $@ ./cmd/swapagent
