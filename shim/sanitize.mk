# shim/sanitize.mk: `make sanitize` (part of `make test`): AddressSanitizer and ThreadSanitizer builds of
# the shim's C parts and the emulated runtime, and the programs that run under them (scripts/sanitize.sh).
# Go's runtime does not run under either sanitizer inside a C process, so the sanitized agent is C only:
# libsan-agent.so links every object of shim/c (interposers, ring, dl hooks, launch check, tensor table,
# control ABI wrappers, crash handler) with shim/c/san/san_agent.c, a C stand-in for the Go half that
# drains and checks the ring from its own thread, rewrites the watched ranges and answers the control
# calls as policy off. Each kind builds into $(BUILD)/san-KIND with the rules of the emulator, the shim
# and decoder-sim, the kind's flags in CFLAGS:
#   san-ring     the ring alone: producers against one consumer, then a full ring (shim/c/san/san_ring.c)
#   sa-stress    threads allocating through the interposers into the emulator, the stand-in draining
#   sa-fork      fork without exec while threads allocate and call the control ABI; children stay inert
#   sa-queued    threads making queued control calls at once (the copies, handles, resident table, ring)
#   decoder-sim  a short training run on two streams, a launch thread, the executor cache, the runtime
#                found through dlsym (trampolines) and a VMM pool: launches and the launch check, tensors
#                and executors, the emulator's streams, events, copies and mappings, the control ABI
#   acl-test     the emulator's own tests, under AddressSanitizer only: several race on purpose (a host
#                read during an async copy, the hazard checker's kernels), which ThreadSanitizer reports
SAN_KINDS := asan tsan
SAN_FLAGS_asan := -O1 -g -fsanitize=address -fno-omit-frame-pointer
# ThreadSanitizer does not model atomic_thread_fence (-Wtsan). The seqlocks that use fences (the watched
# ranges, the executor table) guard only atomics, whose accesses it checks as such, so nothing is missed.
SAN_FLAGS_tsan := -O1 -g -fsanitize=thread -Wno-tsan
SAN_OUTPUTS := lib/libsan-agent.so test/san-ring test/sa-stress test/sa-fork test/sa-queued bin/decoder-sim
SAN_OUTPUTS_asan := test/acl-test

.PHONY: sanitize $(addprefix sanitize-,$(SAN_KINDS))
sanitize: $(addprefix sanitize-,$(SAN_KINDS))

$(addprefix sanitize-,$(SAN_KINDS)): sanitize-%:
	@CFLAGS="$(SAN_FLAGS_$*)" $(MAKE) --no-print-directory BUILD=$(BUILD)/san-$* SAN_BUILD=1 \
		$(addprefix $(BUILD)/san-$*/,$(SAN_OUTPUTS) $(SAN_OUTPUTS_$*)) >$(BUILD)/san-$*.log 2>&1 || \
		{ cat $(BUILD)/san-$*.log; exit 1; }
	@CC=$(CC) bash scripts/sanitize.sh $* $(BUILD)/san-$*

# dl.c stays uninstrumented: the sanitizer's runtime resolves its interceptors through dlsym, which the
# preloaded agent hooks, before the runtime can check anything (an instrumented hook faults there).
ifneq ($(SAN_BUILD),)
$(BUILD)/obj/shim/dl.o: SHIM_CFLAGS += -fno-sanitize=all
$(BUILD)/obj/shim/dl.o: shim/sanitize.mk
endif

# For any BUILD (sanitize-% sets it): the C-only agent, from the shim's one relocatable object.
$(BUILD)/lib/libsan-agent.so: $(BUILD)/obj/shim/sashim.o shim/c/san/san_agent.c $(wildcard shim/c/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=hidden -I$(ACL_INC) -Ishim/c -shared -o $@ $(BUILD)/obj/shim/sashim.o \
		shim/c/san/san_agent.c -Wl,-z,defs -ldl -lpthread

$(BUILD)/test/san-ring: shim/c/san/san_ring.c shim/c/ring.c $(wildcard shim/c/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(ACL_INC) -Ishim/c -o $@ shim/c/san/san_ring.c shim/c/ring.c -lpthread
