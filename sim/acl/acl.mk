# sim/acl: the emulated AscendCL runtime, installed like a CANN toolkit under $(ASCEND) (lib64/ + include/),
# its unit tests, the dlopen/dladdr path-discovery test, and the host-link copy bandwidth bench.
ACL_LIB := $(ASCEND)/lib64/libascendcl.so
ACL_SRCS := $(wildcard sim/acl/src/*.c)
ACL_PRIV_HDRS := $(wildcard sim/acl/src/*.h)
ACL_PUB_HDRS := $(wildcard $(ACL_INC)/acl/*.h $(ACL_INC)/aclnnop/*.h)
ACL_INSTALLED_HDRS := $(patsubst $(ACL_INC)/%,$(ASCEND)/include/%,$(ACL_PUB_HDRS))
# Test programs find the library relative to themselves, like an installed toolkit would be found.
ACL_TEST_LINK := -L$(ASCEND)/lib64 -lascendcl -Wl,-rpath,'$$ORIGIN/../ascend/latest/lib64' -lpthread

BUILD_TARGETS += $(ACL_LIB) $(ACL_INSTALLED_HDRS) $(BUILD)/test/acl-test $(BUILD)/test/acl-dladdr-test \
	$(BUILD)/test/acl-bench
CTESTS += $(BUILD)/test/acl-test $(BUILD)/test/acl-dladdr-test
BENCHES += acl-bench

# Only the ACL API is exported (-fvisibility=hidden; the API carries ACL_FUNC_VISIBILITY); -Bsymbolic keeps
# the emulator's own calls internal so an interposer sees only the application's calls.
$(ACL_LIB): $(ACL_SRCS) $(ACL_PRIV_HDRS) $(ACL_PUB_HDRS) sim/acl/acl.mk
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -fvisibility=hidden -I$(ACL_INC) -shared -Wl,-soname,libascendcl.so -Wl,-Bsymbolic \
		-Wl,-z,defs -o $@ $(ACL_SRCS) -lpthread

$(ASCEND)/include/%.h: $(ACL_INC)/%.h
	@mkdir -p $(@D)
	cp $< $@

$(BUILD)/test/acl-test: sim/acl/test/acl_test.c $(ACL_LIB) $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< $(ACL_TEST_LINK)

# Deliberately not linked against the library: it dlopens it the way MindSpore's loader does.
$(BUILD)/test/acl-dladdr-test: sim/acl/test/acl_dladdr_test.c $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< -ldl

$(BUILD)/test/acl-bench: sim/acl/test/acl_bench.c $(ACL_LIB) $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< $(ACL_TEST_LINK)

.PHONY: acl-bench
acl-bench: $(BUILD)/test/acl-bench
	@$(BUILD)/test/acl-bench
