# shim/shim.mk: builds libswapagent.so (the C interposers of shim/c, strict-warning object linked
# whole into the Go c-shared library of ./shim and the packages it imports, as the Makefile's go_deps
# lists them), installs swapagent.h, builds the C test programs of shim/c/test and the shim benchmark.
SHIM_C_SRCS := $(sort $(wildcard shim/c/*.c))
SHIM_C_HDRS := $(sort $(wildcard shim/c/*.h shim/c/*.def)) $(ACL_HDRS)
SHIM_OBJDIR := $(BUILD)/obj/shim
SHIM_OBJS := $(patsubst shim/c/%.c,$(SHIM_OBJDIR)/%.o,$(SHIM_C_SRCS))
SHIM_ARCHIVE := $(SHIM_OBJDIR)/sashim.o
SHIM_LIB := $(BUILD)/lib/libswapagent.so
SHIM_TEST_SRCS := $(sort $(wildcard shim/c/test/*.c))
SHIM_TEST_BINS := $(patsubst shim/c/test/sa_%.c,$(BUILD)/test/sa-%,$(SHIM_TEST_SRCS))
SHIM_CFLAGS := $(CFLAGS) -fno-semantic-interposition -fvisibility=hidden -I$(ACL_INC) -Ishim/c

BUILD_TARGETS += $(SHIM_LIB) $(BUILD)/include/swapagent.h $(SHIM_TEST_BINS)
BENCHES += bench-shim

$(SHIM_OBJDIR)/%.o: shim/c/%.c $(SHIM_C_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SHIM_CFLAGS) -c -o $@ $<

# One relocatable object, so cgo links every interposer (an archive would only give what Go references).
$(SHIM_ARCHIVE): $(SHIM_OBJS)
	$(CC) -r -nostdlib -o $@ $^

# The object reaches the external link as -extldflags (see shim/main.go; CGO_LDFLAGS would add it once per
# cgo package), so each $(BUILD) links its own architecture's. Go's build cache does not hash a file named
# in linker flags, so the object's hash goes into the link flags: a changed C shim always relinks.
$(SHIM_LIB): $(SHIM_ARCHIVE) $(GO_DEPS_DIR)/libswapagent.so.d
	@mkdir -p $(@D)
	@$(call go_deps,./shim)
	$(GO_TARGET_ENV) $(GO) build -buildmode=c-shared -ldflags "-extldflags=$(abspath $(SHIM_ARCHIVE)) \
		$(GO_VERSION_LDFLAGS) -X main.cShimHash=$$(sha256sum $(SHIM_ARCHIVE) | cut -c1-16)" -o $@ ./shim
	@rm -f $(BUILD)/lib/libswapagent.h

$(BUILD)/include/swapagent.h: shim/c/swapagent.h
	@mkdir -p $(@D)
	cp $< $@

# Test programs: plain C against the ACL headers; --as-needed links the emulator only into those that call it
# directly (sa-latedl must load it itself, late).
$(BUILD)/test/sa-%: shim/c/test/sa_%.c shim/c/test/sa_test.h shim/c/swapagent.h $(ASCEND)/lib64/libopapi.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ACL_INC) -Ishim/c -o $@ $< -Wl,--as-needed -L$(ASCEND)/lib64 -lopapi -lnnopbase -lascendcl \
		-Wl,-rpath,'$$ORIGIN/../ascend/latest/lib64' -Wl,--enable-new-dtags -ldl -lpthread

# bench-shim: added ns per intercepted call at each trace level side by side (the interposers do the same
# work whatever the drain then writes), and mean bytes per event of a decoder-sim trace.
.PHONY: bench-shim
bench-shim: $(SHIM_LIB) $(BUILD)/test/sa-bench
	@for l in all memory off; do d=$$(mktemp -d); printf 'SWAPAGENT_TRACE=%-6s ' $$l; \
		LD_PRELOAD=$(abspath $(SHIM_LIB)) SWAPAGENT_OUT=$$d SWAPAGENT_TRACE=$$l $(BUILD)/test/sa-bench | head -1; \
		rm -rf $$d; done
	@d=$$(mktemp -d); LD_PRELOAD=$(abspath $(SHIM_LIB)) SWAPAGENT_OUT=$$d $(BUILD)/test/sa-bench | tail -n +2; rm -rf $$d
	@$(GO) run ./cmd/tracebytes $(abspath $(SHIM_LIB)) $(abspath $(BUILD)/bin/decoder-sim)
