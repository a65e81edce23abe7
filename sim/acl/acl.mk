# sim/acl: the emulated AscendCL runtime, installed like a CANN 8 toolkit under $(ASCEND) (lib64/, and include/
# with the headers of the top-level include/):
# libascendcl.so (runtime), libnnopbase.so (tensors, executors), libopapi.so (aclnn ops); its unit tests, the
# dlopen/dladdr path-discovery and export test, and the launch and copy bandwidth bench.
ACL_LIB := $(ASCEND)/lib64/libascendcl.so
NNOPBASE_LIB := $(ASCEND)/lib64/libnnopbase.so
OPAPI_LIB := $(ASCEND)/lib64/libopapi.so
ACL_LIBS := $(ACL_LIB) $(NNOPBASE_LIB) $(OPAPI_LIB)
# libopapi.so is linked after the other two, so a program that depends on it alone relinks when any changes.
ACL_SRC := sim/acl/src
ACL_RT_SRCS := $(addprefix $(ACL_SRC)/,core.c hazard.c mem.c ops.c ptrset.c stream.c vec.c vmm.c)
NNOPBASE_SRCS := $(addprefix $(ACL_SRC)/,nnopbase.c ptrset.c)
OPAPI_SRCS := $(ACL_SRC)/opapi.c
ACL_PRIV_HDRS := $(wildcard $(ACL_SRC)/*.h)
ACL_INSTALLED_HDRS := $(patsubst $(ACL_INC)/%,$(ASCEND)/include/%,$(ACL_HDRS))
# Test programs find the libraries relative to themselves, like an installed toolkit would be found.
ACL_TEST_LINK := -L$(ASCEND)/lib64 -lopapi -lnnopbase -lascendcl -Wl,-rpath,'$$ORIGIN/../ascend/latest/lib64' -lpthread

BUILD_TARGETS += $(ACL_LIBS) $(ACL_INSTALLED_HDRS) $(BUILD)/test/acl-test $(BUILD)/test/acl-dladdr-test \
	$(BUILD)/test/acl-bench
CTESTS += $(BUILD)/test/acl-test $(BUILD)/test/acl-dladdr-test
BENCHES += acl-bench

# Each library exports only its API (-fvisibility=hidden; the API carries ACL_FUNC_VISIBILITY) plus, for the
# other two to link against, the aclsim_internal_* entry points (src/internal.h); -Bsymbolic keeps the
# emulator's own calls internal so an interposer sees only the application's calls. libnnopbase and libopapi
# find their dependencies beside themselves (DT_RPATH $ORIGIN, which LD_LIBRARY_PATH does not override: the
# emulator's libraries only work with each other).
ACL_SO_FLAGS = $(CFLAGS) -O3 -fvisibility=hidden -I$(ACL_INC) -shared -Wl,-soname,$(@F) -Wl,-Bsymbolic -Wl,-z,defs
ACL_SO_DEPS := $(ACL_PRIV_HDRS) $(ACL_HDRS) sim/acl/acl.mk

$(ACL_LIB): $(ACL_RT_SRCS) $(ACL_SO_DEPS)
	@mkdir -p $(@D)
	$(CC) $(ACL_SO_FLAGS) -o $@ $(ACL_RT_SRCS) -lpthread

$(NNOPBASE_LIB): $(NNOPBASE_SRCS) $(ACL_SO_DEPS) $(ACL_LIB)
	$(CC) $(ACL_SO_FLAGS) -o $@ $(NNOPBASE_SRCS) -L$(@D) -lascendcl -Wl,--disable-new-dtags \
		-Wl,-rpath,'$$ORIGIN' -lpthread

$(OPAPI_LIB): $(OPAPI_SRCS) $(ACL_SO_DEPS) $(ACL_LIB) $(NNOPBASE_LIB)
	$(CC) $(ACL_SO_FLAGS) -o $@ $(OPAPI_SRCS) -L$(@D) -lnnopbase -lascendcl -Wl,--disable-new-dtags \
		-Wl,-rpath,'$$ORIGIN'

$(ASCEND)/include/%.h: $(ACL_INC)/%.h
	@mkdir -p $(@D)
	cp $< $@

$(BUILD)/test/acl-test: sim/acl/test/acl_test.c $(ACL_LIBS) $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< $(ACL_TEST_LINK)

# Deliberately not linked against the libraries: it dlopens them the way MindSpore's loader does.
$(BUILD)/test/acl-dladdr-test: sim/acl/test/acl_dladdr_test.c $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< -ldl

$(BUILD)/test/acl-bench: sim/acl/test/acl_bench.c $(ACL_LIBS) $(ACL_INSTALLED_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ASCEND)/include -o $@ $< $(ACL_TEST_LINK)

.PHONY: acl-bench
acl-bench: $(BUILD)/test/acl-bench
	@$(BUILD)/test/acl-bench
